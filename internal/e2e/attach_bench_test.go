package e2e

import (
	"bytes"
	"net/url"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"pam/internal/eventually"
	"pam/internal/wire"
)

// minAttachSamples is how many keystrokes BenchmarkAttachRoundTrip
// times on each path at least, whatever b.N: p99 is then the 5th slowest,
// not the slowest.
const minAttachSamples = 300

// BenchmarkAttachRoundTrip measures keystroke → echo on an attach socket
// through serve and the worker's relay, against a direct `tmux attach` in
// a PTY on the same machine and tmux server, on a second run's session
// (docs/bench.md#attach-latency): on one session each client would see
// the other's echoes too, twice the output a typist's own terminal gets.
// Keystrokes alternate between the two paths, so both see the same load,
// paced like fast typing (keyPace apart). Reports p50 and p99 of each
// path over max(b.N, minAttachSamples) keystrokes each (samples) and
// their ratios.
func BenchmarkAttachRoundTrip(b *testing.B) {
	s := newSystem(b)
	s.worker("bench-attach")
	r := s.startRun(s.task(), "cat")
	other := s.startRun(s.task(), "cat")
	relay := s.attach(r.ID, url.Values{"rows": {"40"}, "cols": {"120"}})
	relay.waitFrame(wire.WSLeaseAcquired, "")

	direct := exec.Command("tmux", "-L", "pam", "-f", os.DevNull, "attach-session", "-t", "="+other.SessionName+":")
	direct.Env = append(os.Environ(), s.tm.Env(), "TERM=xterm-256color")
	direct.Env = slicesWithout(direct.Env, "TMUX=")
	tty, err := pty.StartWithSize(direct, &pty.Winsize{Rows: 40, Cols: 120})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { tty.Close(); _ = direct.Wait() })
	dout := &notifyBuffer{change: make(chan struct{}, 1)}
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := tty.Read(buf)
			dout.write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	time.Sleep(500 * time.Millisecond) // both clients drawn

	keys := "vwxyz" // letters no tmux redraw sequence contains
	relayLen := func() int { relay.mu.Lock(); defer relay.mu.Unlock(); return relay.out.Len() }
	relaySince := func(from int) string {
		relay.mu.Lock()
		defer relay.mu.Unlock()
		return relay.out.String()[from:]
	}
	var viaRelay, viaDirect []time.Duration
	measure := func(k byte, send func(), since func() string, wake <-chan struct{}) time.Duration {
		t0 := time.Now()
		send()
		deadline := time.After(eventually.Medium)
		for strings.IndexByte(since(), k) < 0 {
			select {
			case <-wake:
			case <-time.After(time.Millisecond):
			case <-deadline:
				b.Fatalf("no echo of %q within %s", k, eventually.Medium)
			}
		}
		return time.Since(t0)
	}
	// About 5 keystrokes a second on each path: steady typing.
	const keyPace = 100 * time.Millisecond
	n := max(b.N, minAttachSamples)
	b.ResetTimer()
	for i := range n {
		k := keys[i%len(keys)]
		if i%40 == 0 {
			// A fresh line now and then, untimed, so the echo never wraps.
			relay.input("\r")
			_, _ = tty.Write([]byte("\r"))
			time.Sleep(150 * time.Millisecond)
		}
		from := relayLen()
		viaRelay = append(viaRelay, measure(k, func() { relay.input(string(k)) }, func() string { return relaySince(from) }, relay.change))
		time.Sleep(keyPace)
		dfrom := dout.len()
		viaDirect = append(viaDirect, measure(k, func() { _, _ = tty.Write([]byte{k}) }, func() string { return dout.since(dfrom) }, dout.change))
		time.Sleep(keyPace)
	}
	b.StopTimer()
	slow := append([]time.Duration(nil), viaRelay...)
	sort.Slice(slow, func(i, j int) bool { return slow[i] < slow[j] })
	b.Logf("relay, slowest of %d: %v", len(slow), slow[max(0, len(slow)-5):])
	rp50, rp99 := percentiles(viaRelay)
	dp50, dp99 := percentiles(viaDirect)
	b.ReportMetric(ms(rp50), "relay-p50-ms")
	b.ReportMetric(ms(rp99), "relay-p99-ms")
	b.ReportMetric(ms(dp50), "direct-p50-ms")
	b.ReportMetric(ms(dp99), "direct-p99-ms")
	b.ReportMetric(float64(rp50)/float64(dp50), "ratio-p50")
	b.ReportMetric(float64(rp99)/float64(dp99), "ratio-p99")
	b.ReportMetric(float64(n), "samples")
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2], s[len(s)*99/100]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func slicesWithout(env []string, prefix string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, prefix) {
			out = append(out, kv)
		}
	}
	return out
}

// notifyBuffer collects a PTY's output and signals each write.
type notifyBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	change chan struct{}
}

func (n *notifyBuffer) write(p []byte) {
	n.mu.Lock()
	n.b.Write(p)
	n.mu.Unlock()
	select {
	case n.change <- struct{}{}:
	default:
	}
}

func (n *notifyBuffer) len() int { n.mu.Lock(); defer n.mu.Unlock(); return n.b.Len() }

func (n *notifyBuffer) since(from int) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.b.String()[from:]
}
