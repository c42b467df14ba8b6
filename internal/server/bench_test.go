package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"pam/internal/wire"
)

// BenchmarkDispatchLatency measures POST /runs → run_dispatch received by
// a connected worker on an idle system (docs/bench.md#the-go-benchmarks), reporting p50 and p99.
func BenchmarkDispatchLatency(b *testing.B) {
	e := newRunEnvB(b)
	w := e.worker("bench-host", 1000, "shell")
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		r := e.start(nil)
		f := w.expect(wire.FrameRunDispatch)
		lat = append(lat, time.Since(t0))
		if f.RunID != r.ID {
			b.Fatalf("dispatch of %s while waiting for %s", f.RunID, r.ID)
		}
		w.ack(f, true)
		e.signal(f.SignalToken, f.RunID, sig("finished", 1, "payload", map[string]any{"exit_code": 0}))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// The fleet BenchmarkSignalIngest posts from: ingestHosts workers, each
// with ingestRunsPerHost running runs, and ingestClients HTTP clients (or
// SQL sessions) at once — wrappers and hooks of many runs, not one.
const (
	ingestHosts       = 4
	ingestRunsPerHost = 8
	ingestClients     = 16
)

// ingestRun is one running run of the benchmark's fleet and the progress
// seq it has reached.
type ingestRun struct {
	w     *fakeWorker
	id    string
	token string
	seq   atomic.Int64
}

// ingestFleet starts the benchmark's runs, placed on their hosts and
// running (their started applied).
func (e *runEnv) ingestFleet() []*ingestRun {
	e.t.Helper()
	var runs []*ingestRun
	for h := range ingestHosts {
		w := e.worker(fmt.Sprintf("sig-host-%d", h), ingestRunsPerHost, "shell")
		for range ingestRunsPerHost {
			r := e.runningWithToken(w)
			runs = append(runs, &ingestRun{w: w, id: r.ID, token: r.token})
		}
	}
	return runs
}

// BenchmarkSignalIngest measures progress signals ingested per second
// (docs/bench.md#the-go-benchmarks) from a fleet of many runs on several
// hosts, on each transport — http: ingestClients clients posting with
// their runs' signal tokens, each waiting for its answer; uplink: every
// host pipelining signal frames for its runs, the clock stopping at the
// last signal_ack — next to plain-sql: the transaction one signal cost
// before group commit, statement by statement, from ingestClients
// sessions on the same database. Every signal must be applied: seqs per
// run increase in the order they are sent, so an ack out of order fails.
func BenchmarkSignalIngest(b *testing.B) {
	b.Run("http", func(b *testing.B) {
		e := newRunEnvB(b)
		runs := e.ingestFleet()
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: ingestClients}}
		defer client.CloseIdleConnections()
		post := func(r *ingestRun) error {
			body, _ := json.Marshal(sig(wire.SignalProgress, 1, "seq", r.seq.Add(1)))
			req, err := http.NewRequest("POST", e.url+"/api/internal/runs/"+r.id+"/signals", bytes.NewReader(body))
			if err != nil {
				return err
			}
			req.Header.Set("Authorization", "Bearer "+r.token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				return fmt.Errorf("progress of %s: %d %s", r.id, resp.StatusCode, out)
			}
			return nil
		}
		cpu := e.startCPU()
		start := time.Now()
		b.ResetTimer()
		ingestParallel(b, func(client, i int) error {
			// Each client posts for its own runs, one after the other.
			return post(runs[client+ingestClients*(i%(len(runs)/ingestClients))])
		})
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "signals/s")
		cpu.report(b)
	})

	b.Run("uplink", func(b *testing.B) {
		e := newRunEnvB(b)
		runs := e.ingestFleet()
		cpu := e.startCPU()
		start := time.Now()
		b.ResetTimer()
		var wg sync.WaitGroup
		for h := range ingestHosts {
			mine := runs[h*ingestRunsPerHost : (h+1)*ingestRunsPerHost]
			n := b.N / ingestHosts
			if h < b.N%ingestHosts {
				n++
			}
			w := mine[0].w
			wg.Add(2)
			go func() {
				defer wg.Done()
				for i := range n {
					r := mine[i%len(mine)]
					w.send(wire.SignalFrame{RunID: r.id, Kind: wire.SignalProgress, Attempt: wire.IntPtr(1),
						Seq: ptr(r.seq.Add(1)), Source: wire.SourceWrapper, Payload: json.RawMessage(`{}`)})
				}
			}()
			go func() {
				defer wg.Done()
				for range n {
					if ack := w.expect(wire.FrameSignalAck); ack.Result != wire.ResultApplied {
						b.Errorf("ack %+v", ack)
						return
					}
				}
			}()
		}
		wg.Wait()
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "signals/s")
		cpu.report(b)
	})

	b.Run("plain-sql", func(b *testing.B) {
		e := newRunEnvB(b)
		runs := e.ingestFleet()
		cfg := e.store.Pool.Config().Copy()
		cfg.MaxConns = ingestClients
		pool, err := pgxpool.NewWithConfig(b.Context(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer pool.Close()
		var hosts sync.Map // run id -> host id
		for _, r := range runs {
			hosts.Store(r.id, r.w.hostID)
		}
		cpu := e.startCPU()
		start := time.Now()
		b.ResetTimer()
		ingestParallel(b, func(client, i int) error {
			r := runs[client+ingestClients*(i%(len(runs)/ingestClients))]
			host, _ := hosts.Load(r.id)
			return plainProgress(b.Context(), pool, r.id, host.(string), r.seq.Add(1))
		})
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "signals/s")
		cpu.report(b)
	})
}

// cpuMeter measures the CPU a benchmark spends per signal, where the
// profile of the ingest needs it: in this process (the server and its
// clients) and in the database's backends (read from /proc; the metric
// is left out where that cannot be read).
type cpuMeter struct {
	e       *runEnv
	proc    time.Duration
	db      map[int]time.Duration
	batches uint64
}

func (e *runEnv) startCPU() *cpuMeter {
	return &cpuMeter{e: e, proc: procCPU(), db: e.backendCPU(), batches: e.signalBatches()}
}

// signalBatches is how many signal batches the server committed so far.
func (e *runEnv) signalBatches() uint64 {
	mfs, _ := e.srv.Registry().Gather()
	for _, mf := range mfs {
		if mf.GetName() == "pam_signal_batch_size" {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

func (m *cpuMeter) report(b *testing.B) {
	b.StopTimer()
	n := float64(b.N)
	if batches := m.e.signalBatches() - m.batches; batches > 0 {
		b.ReportMetric(n/float64(batches), "signals/batch")
	}
	b.ReportMetric(float64((procCPU()-m.proc).Microseconds())/n, "proc-cpu-us/signal")
	end := m.e.backendCPU()
	if end == nil {
		return
	}
	var db time.Duration
	for pid, t := range end {
		db += t - m.db[pid]
	}
	b.ReportMetric(float64(db.Microseconds())/n, "db-cpu-us/signal")
}

// procCPU is the CPU time this process has used.
func procCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// backendCPU is the CPU time of each backend of the test's database, or
// nil where /proc cannot tell.
func (e *runEnv) backendCPU() map[int]time.Duration {
	var pids []int
	if err := e.store.Pool.QueryRow(context.Background(),
		`SELECT array_agg(pid) FROM pg_stat_activity WHERE datname = current_database()`).Scan(&pids); err != nil {
		return nil
	}
	out := map[int]time.Duration{}
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return nil
		}
		// utime and stime are fields 14 and 15, after the command in parentheses.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 13 {
			return nil
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		out[pid] = time.Duration(ut+st) * time.Second / 100 // USER_HZ
	}
	return out
}

// ingestParallel runs b.N calls of post spread over ingestClients
// goroutines; post gets its client's number and that client's count.
func ingestParallel(b *testing.B, post func(client, i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for c := range ingestClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; next.Add(1) <= int64(b.N); i++ {
				if err := post(c, i); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// plainProgress is the transaction that applied one progress signal
// before group commit, statement by statement: lock the run, check the
// sender, read the signal facts, journal (the xid first), record the seq.
func plainProgress(ctx context.Context, pool *pgxpool.Pool, runID, host string, seq int64) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// The run, all of it (what the ingest decides from).
		rows, err := tx.Query(ctx, `SELECT id::text, task_id::text, project_id::text, provider, host_id::text, target_host_id::text,
			status, attempt, max_attempts, failure_reason, exit_code, session_name, cwd, prompt, args,
			pending_since, next_attempt_at, started_at, finished_at, completed_at, completion_source, created_at, updated_at, status_source,
			attention, attention_since, workspace FROM runs WHERE id = $1 FOR NO KEY UPDATE`, runID)
		if err != nil {
			return err
		}
		run, err := pgx.CollectExactlyOneRow(rows, pgx.RowToMap)
		if err != nil {
			return err
		}
		attempt, taskID, projectID := run["attempt"], run["task_id"], run["project_id"]
		var known bool
		if err := tx.QueryRow(ctx, `SELECT $2::uuid = host_id OR EXISTS (SELECT 1 FROM run_offers WHERE run_id = $1 AND host_id = $2)
			FROM runs WHERE id = $1`, runID, host).Scan(&known); err != nil || !known {
			return fmt.Errorf("sender of %s: %v %w", runID, known, err)
		}
		var last int64
		var processed bool
		var refused []string
		if err := tx.QueryRow(ctx, `SELECT last_progress_seq,
			EXISTS (SELECT 1 FROM processed_signals WHERE run_id = $1 AND attempt = $2 AND kind = $3),
			ARRAY(SELECT result FROM signal_refusals WHERE run_id = $1 AND attempt = $4 AND kind = $3 ORDER BY result)
			FROM runs WHERE id = $1`, runID, attempt, wire.SignalProgress, 1).Scan(&last, &processed, &refused); err != nil {
			return err
		}
		if seq <= last {
			return fmt.Errorf("progress %d of %s after %d", seq, runID, last)
		}
		if _, err := tx.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
			return err
		}
		payload, _ := json.Marshal(map[string]any{"run_id": runID, "attempt": attempt, "task_id": taskID,
			"seq": seq, "source": wire.SourceWrapper, "payload": nil})
		if _, err := tx.Exec(ctx, `INSERT INTO events (topic, run_id, project_id, host_id, payload) VALUES ($1, $2, $3, $4, $5)`,
			wire.TopicRunProgress, runID, projectID, host, payload); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE runs SET last_progress_seq = $2, updated_at = now() WHERE id = $1`, runID, seq)
		return err
	})
}

func ptr[T any](v T) *T { return &v }
