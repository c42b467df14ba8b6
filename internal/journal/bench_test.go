package journal_test

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pam/internal/eventually"
	"pam/internal/pamtest"

	"pam/internal/embeddb"
	"pam/internal/journal"
	"pam/internal/store"
	"pam/internal/store/storetest"
)

// BenchmarkSSEFanout100 journals b.N events while 100 SSE clients read
// them over real HTTP connections, and stops the clock once every client
// has the last one. events/s counts journaled events that reached all 100
// subscribers per second; deliveries/s counts frames received in total;
// delivery-p99-ms is the 99th percentile, over every delivery (samples),
// of the time from just before an event's transaction to its arrival at
// a client — at the journal's full rate, so it includes the queues a
// producer faster than the readers builds (docs/bench.md).
func BenchmarkSSEFanout100(b *testing.B) {
	const subscribers, perTx = 100, 10
	s := storetest.New(b)
	hub, _ := startHub(b, s, journal.Options{})
	srv := newServer(b, hub)
	start := lastSeq(b, s)

	// Registered before the streams, so it runs after they are closed.
	var readers sync.WaitGroup
	b.Cleanup(readers.Wait)
	seen := make([]atomic.Int64, subscribers)
	lat := make([][]int32, subscribers) // µs; each reader's own
	streams := make([]*sseStream, subscribers)
	for i := range subscribers {
		st := connect(b, srv.URL+"?after="+itoa(start), "")
		streams[i] = st
		readers.Go(func() {
			for {
				f, err := st.next()
				if err != nil {
					return
				}
				if at, ok := sentAt(f.Data); ok {
					lat[i] = append(lat[i], int32(min(time.Since(time.Unix(0, at)).Microseconds(), math.MaxInt32)))
				}
				seen[i].Store(f.ID)
			}
		})
	}
	eventually.Wait(b, testTimeout, "every subscriber", func() bool { return hub.Subscribers() == subscribers })

	ctx := context.Background()
	b.ResetTimer()
	began := time.Now()
	for n := 0; n < b.N; n += perTx {
		evs := make([]store.NewEvent, 0, perTx)
		at := time.Now().UnixNano()
		for i := n; i < min(n+perTx, b.N); i++ {
			evs = append(evs, store.NewEvent{Topic: "run.progress", Payload: map[string]any{
				"run_id": "6f1c2a4e-8d2b-4c47-9a57-1e0f3b5c7d90", "attempt": 1, "seq": i, "at": at,
			}})
		}
		if err := s.InTx(ctx, func(tx *store.Tx) error { return tx.Journal(ctx, evs...) }); err != nil {
			b.Fatal(err)
		}
	}
	last := lastSeq(b, s)
	deadline := time.Now().Add(time.Minute)
	for i := range seen {
		for seen[i].Load() < last {
			if time.Now().After(deadline) || hub.Dropped() > 0 {
				b.Fatalf("subscriber %d at %d of %d (%d dropped)", i, seen[i].Load(), last, hub.Dropped())
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	elapsed := time.Since(began)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(b.N*subscribers)/elapsed.Seconds(), "deliveries/s")
	for _, st := range streams {
		st.Close() // the readers stop, and their latencies are theirs no more
	}
	readers.Wait()
	all := slices.Concat(lat...)
	if len(all) != b.N*subscribers {
		b.Fatalf("%d deliveries timed, want %d", len(all), b.N*subscribers)
	}
	slices.Sort(all)
	b.ReportMetric(float64(all[(len(all)*99+99)/100-1])/1000, "delivery-p99-ms")
	b.ReportMetric(float64(len(all)), "samples")
}

// sentAt reads the "at" of a benchmark event's payload (Unix ns).
func sentAt(data string) (int64, bool) {
	i := strings.Index(data, `"at":`)
	if i < 0 {
		return 0, false
	}
	rest := strings.TrimLeft(data[i+len(`"at":`):], " ")
	j := strings.IndexFunc(rest, func(r rune) bool { return r < '0' || r > '9' })
	if j < 0 {
		j = len(rest)
	}
	n, err := strconv.ParseInt(rest[:j], 10, 64)
	return n, err == nil
}

// BenchmarkJournalAppend measures concurrent one-event transactions three
// ways: through tx.Journal (writers never wait for each other; readers
// deliver only up to store.SafeSeq), "lock" — the alternative of
// serialising journaling transactions with an advisory lock held to commit
// — and "naive", a plain INSERT with no ordering guarantee at all. It runs
// on the test cluster (fsync off) and on a durable cluster (fsync on, as
// `pam serve` runs), where the lock also serialises the WAL flushes.
func BenchmarkJournalAppend(b *testing.B) {
	durable := durableStore(b)
	for _, c := range []struct {
		name string
		s    *store.Store
	}{{"fsync-off", storetest.New(b)}, {"durable", durable}} {
		b.Run(c.name, func(b *testing.B) { benchmarkAppend(b, c.s) })
	}
}

// durableStore starts a private cluster with fsync on for the benchmark.
func durableStore(b *testing.B) *store.Store {
	b.Helper()
	pamtest.Require(b, "postgres")
	dir := pamtest.ShortDir(b, "pambench-") // traversable: the cluster runs as postgres when root
	c, err := embeddb.Start(b.Context(), embeddb.Options{Dir: dir + "/pg", Durable: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Stop() })
	s, err := store.Open(b.Context(), c.URL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)
	return s
}

func benchmarkAppend(b *testing.B, s *store.Store) {
	ctx := context.Background()
	payload := map[string]any{"host_id": "6f1c2a4e-8d2b-4c47-9a57-1e0f3b5c7d90", "max_runs": 4}
	raw, err := json.Marshal(payload)
	if err != nil {
		b.Fatal(err)
	}
	plain := func(lock bool) func() error {
		return func() error {
			tx, err := s.Pool.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(ctx)
			if lock {
				if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(4242)`); err != nil {
					return err
				}
			}
			if _, err := tx.Exec(ctx, `INSERT INTO events (topic, payload) VALUES ($1, $2)`, "host.updated", raw); err != nil {
				return err
			}
			return tx.Commit(ctx)
		}
	}
	variants := []struct {
		name   string
		append func() error
	}{
		{"journal", func() error {
			return s.InTx(ctx, func(tx *store.Tx) error {
				return tx.Journal(ctx, store.NewEvent{Topic: "host.updated", Payload: payload})
			})
		}},
		{"lock", plain(true)},
		{"naive", plain(false)},
	}
	rates := map[string]float64{}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			b.SetParallelism(4) // more transactions in flight than CPUs
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := v.append(); err != nil {
						b.Error(err)
						return
					}
				}
			})
			rate := float64(b.N) / b.Elapsed().Seconds()
			b.ReportMetric(rate, "tx/s")
			rates[v.name] = rate
		})
	}
	if rates["naive"] > 0 && rates["lock"] > 0 {
		b.Logf("throughput vs naive: journal %.2f, lock %.2f (%.0f / %.0f / %.0f tx/s)",
			rates["journal"]/rates["naive"], rates["lock"]/rates["naive"], rates["journal"], rates["lock"], rates["naive"])
	}
}

// BenchmarkSafeSeq is the reader's price for the ordering guarantee: one
// SafeSeq on an idle journal, and while 4 writers keep transactions in
// flight (it then waits for those in flight to finish).
func BenchmarkSafeSeq(b *testing.B) {
	s := storetest.New(b)
	ctx := context.Background()
	b.Run("idle", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.SafeSeq(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("under-writes", func(b *testing.B) {
		wctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for wctx.Err() == nil {
					_ = s.InTx(wctx, func(tx *store.Tx) error {
						return tx.Journal(wctx, store.NewEvent{Topic: "run.progress"})
					})
				}
			})
		}
		for b.Loop() {
			if _, err := s.SafeSeq(ctx); err != nil {
				b.Fatal(err)
			}
		}
		stop()
		wg.Wait()
	})
}
