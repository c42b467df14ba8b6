package notify_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"pam/internal/eventually"
	"pam/internal/notify"
	"pam/internal/store/storetest"
	"pam/internal/wire"
)

// BenchmarkDelivery measures deliveries per second to a live webhook,
// alone and beside a channel whose receiver never answers (every one of
// its requests hangs until the 10 s timeout): the dead channel must not
// slow the live one. Each op is one event journaled and delivered.
func BenchmarkDelivery(b *testing.B) {
	for _, withDead := range []bool{false, true} {
		name := "alone"
		if withDead {
			name = "beside-a-dead-receiver"
		}
		b.Run(name, func(b *testing.B) {
			st := storetest.New(b)
			live := newReceiver(b, func(int64) int { return 204 })
			channel(b, st, wire.ChannelWebhook, live.URL, "run.*")
			if withDead {
				hang := make(chan struct{})
				dead := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					select {
					case <-hang:
					case <-r.Context().Done():
					}
				}))
				b.Cleanup(func() { close(hang); dead.Close() })
				channel(b, st, wire.ChannelWebhook, dead.URL, "run.*")
			}
			run(b, st, notify.Options{})
			b.ResetTimer()
			start := time.Now()
			for left := b.N; left > 0; left -= 1000 {
				journal(b, st, "run.progress", min(left, 1000))
			}
			eventually.Wait(b, 5*time.Minute, "every delivery", func() bool { return live.hits.Load() >= int64(b.N) })
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "deliveries/s")
		})
	}
}
