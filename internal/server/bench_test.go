package server_test

import (
	"encoding/json"
	"sort"
	"sync"
	"testing"
	"time"

	"pam/internal/wire"
)

// BenchmarkDispatchLatency measures POST /runs → run_dispatch received by
// a connected worker on an idle system (docs/architecture.md#benchmarks), reporting p50 and p99.
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

// BenchmarkSignalIngest measures progress signals ingested per second on
// each transport: HTTP with the run's signal token, and uplink frames
// answered by signal_ack.
func BenchmarkSignalIngest(b *testing.B) {
	for _, transport := range []string{"http", "uplink"} {
		b.Run(transport, func(b *testing.B) {
			e := newRunEnvB(b)
			w := e.worker("sig-host", 100, "shell")
			r := e.start(nil)
			f := w.expect(wire.FrameRunDispatch)
			w.ack(f, true)
			e.signal(f.SignalToken, r.ID, sig("started", 1))
			b.ResetTimer()
			start := time.Now()
			if transport == "http" {
				var seq int64
				var mu sync.Mutex
				b.SetParallelism(4)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						mu.Lock()
						seq++
						n := seq
						mu.Unlock()
						code, _, body := e.signal(f.SignalToken, r.ID, sig("progress", 1, "seq", n))
						if code != 202 && code != 200 {
							b.Errorf("progress: %d %s", code, body)
							return
						}
					}
				})
			} else {
				// Pipelined: frames go out as fast as the socket takes them;
				// the clock stops at the last signal_ack.
				go func() {
					for i := 1; i <= b.N; i++ {
						w.send(wire.Frame{Type: wire.FrameSignal, RunID: r.ID, Kind: "progress", Attempt: wire.IntPtr(1),
							Seq: ptr(int64(i)), Source: "wrapper", Payload: json.RawMessage(`{}`)})
					}
				}()
				for i := 0; i < b.N; i++ {
					if ack := w.expect(wire.FrameSignalAck); ack.Result != "applied" {
						b.Fatalf("ack %+v", ack)
					}
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "signals/s")
		})
	}
}

func ptr[T any](v T) *T { return &v }
