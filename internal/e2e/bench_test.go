package e2e

import (
	"sort"
	"testing"
	"time"

	"pam/internal/wire"
)

// BenchmarkDispatchToSession measures POST /runs until the run's tmux
// session exists on the worker host, on an idle system (docs/architecture.md#benchmarks), with real
// serve, worker and tmux processes. Reports p50 and p99.
func BenchmarkDispatchToSession(b *testing.B) {
	s := newSystem(b)
	s.worker("bench-host", "PAM_MAX_RUNS=100")
	task := s.task()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		var r wire.Run
		s.must(202, "POST", "/api/v1/runs", map[string]any{"task_id": task.ID, "provider": "shell", "prompt": "sleep 2"}, &r)
		for {
			if _, err := s.tmux("has-session", "-t", "="+r.SessionName); err == nil {
				break
			}
			if time.Since(t0) > 30*time.Second {
				b.Fatalf("no session for run %s after 30s", r.ID)
			}
			time.Sleep(500 * time.Microsecond)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
