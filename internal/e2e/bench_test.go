package e2e

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"pam/internal/eventually"
	"pam/internal/wire"
)

// minSpawnSamples is how many runs BenchmarkDispatchToSession starts at
// least, whatever b.N: enough for a p99 that is not the slowest run.
const minSpawnSamples = 200

// BenchmarkDispatchToSession measures POST /runs until the CLI has
// started in the run's tmux session, on an idle system
// (docs/bench.md#spawn-latency), with real serve, worker and tmux
// processes. The CLI is the shell provider running `echo > FIFO`: the
// benchmark's open of the FIFO returns the moment the CLI opens it, so
// nothing polls while a run starts. Each run ends (exited) before the
// next is posted, on a tmux server that keeps running meanwhile. Reports
// p50 and p99 over max(b.N, minSpawnSamples) runs (samples), and where
// the time goes at p50, each from the POST: answered, offered
// (run.dispatched in the journal), acked (run.spawning), session created
// (the worker's log) and started signal applied (run.started).
func BenchmarkDispatchToSession(b *testing.B) {
	s := newSystem(b)
	_, wlog := s.worker("bench-host", "PAM_MAX_RUNS=100", "PAM_HOLD_OPEN=1ms")
	task := s.task()
	// A session that outlives the runs, as on a host with work going on:
	// without it each run would start (and its end stop) the tmux server.
	if out, err := s.tmux("-f", os.DevNull, "new-session", "-d", "-s", "bench-keepalive", "sleep 3600"); err != nil {
		b.Fatalf("keep-alive session: %v: %s", err, out)
	}
	fifo := filepath.Join(b.TempDir(), "started")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		b.Fatal(err)
	}
	n := max(b.N, minSpawnSamples)
	lat := make([]time.Duration, 0, n)
	type sample struct {
		id        string
		t0, cli   time.Time
		postTaken time.Duration
	}
	samples := make([]sample, 0, n)
	b.ResetTimer()
	for range n {
		t0 := time.Now()
		var r wire.Run
		s.must(202, "POST", "/api/v1/runs", map[string]any{"task_id": task.ID, "provider": "shell", "prompt": "echo > " + fifo}, &r)
		posted := time.Since(t0)
		if err := waitFIFO(fifo, eventually.Long); err != nil {
			b.Fatalf("run %s: %v", r.ID, err)
		}
		cli := time.Now()
		lat = append(lat, cli.Sub(t0))
		samples = append(samples, sample{id: r.ID, t0: t0, cli: cli, postTaken: posted})
		b.StopTimer()
		s.waitRun(r.ID, "exited", eventually.Long, func(r wire.Run) bool { return r.Status == wire.RunExited })
		b.StartTimer()
	}
	b.StopTimer()
	// Where the time goes: journal times are the database's transaction
	// starts, and the worker logs when each session exists (to the
	// millisecond), all on the benchmark's clock.
	created := sessionsStarted(wlog.String())
	var post, offer, ack, session, started []time.Duration
	for _, sm := range samples {
		at := map[string]time.Time{}
		var l wire.EventList
		s.must(200, "GET", "/api/v1/runs/"+sm.id+"/events", nil, &l)
		for _, ev := range l.Events {
			if _, ok := at[ev.Topic]; !ok {
				at[ev.Topic] = ev.CreatedAt
			}
		}
		post = append(post, sm.postTaken)
		offer = append(offer, at[string(wire.TopicRunDispatched)].Sub(sm.t0))
		ack = append(ack, at[string(wire.TopicRunSpawning)].Sub(sm.t0))
		started = append(started, at[string(wire.TopicRunStarted)].Sub(sm.t0))
		if t, ok := created[sm.id]; ok {
			session = append(session, t.Sub(sm.t0))
		}
	}
	if len(session) != len(samples) {
		b.Fatalf("the worker logged %d of %d sessions started", len(session), len(samples))
	}
	p50, p99 := percentiles(lat)
	b.ReportMetric(ms(p50), "p50-ms")
	b.ReportMetric(ms(p99), "p99-ms")
	b.ReportMetric(float64(len(lat)), "samples")
	for _, m := range []struct {
		unit string
		d    []time.Duration
	}{{"post-p50-ms", post}, {"offer-p50-ms", offer}, {"ack-p50-ms", ack}, {"session-p50-ms", session}, {"started-p50-ms", started}} {
		p, _ := percentiles(m.d)
		b.ReportMetric(ms(p), m.unit)
	}
}

// sessionStartedRe matches the worker's log line for a session created,
// in the text format pamtest's processes log in.
var sessionStartedRe = regexp.MustCompile(`time=(\S+) level=INFO msg="session started" run_id=(\S+)`)

// sessionsStarted maps run ids to the time the worker logged their
// session created.
func sessionsStarted(log string) map[string]time.Time {
	out := map[string]time.Time{}
	for _, m := range sessionStartedRe.FindAllStringSubmatch(log, -1) {
		if t, err := time.Parse(time.RFC3339Nano, m[1]); err == nil {
			out[m[2]] = t
		}
	}
	return out
}

// waitFIFO opens the FIFO for reading, which returns once a writer has
// opened it, and reads it to its end. Past d it unblocks its own open
// with a writer of its own and fails.
func waitFIFO(path string, d time.Duration) error {
	done := make(chan error, 1)
	go func() {
		f, err := os.Open(path)
		if err != nil {
			done <- err
			return
		}
		_, err = io.Copy(io.Discard, f)
		f.Close()
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
		<-done
		return errors.New("the CLI never opened the FIFO within " + d.String())
	}
}
