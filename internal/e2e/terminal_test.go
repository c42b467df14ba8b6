package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"pam/internal/eventually"
	"pam/internal/wire"
)

// ticker is a shell agent whose screen changes every 0.3 s.
const ticker = `i=0; while [ $i -lt 100000 ]; do i=$((i+1)); echo tick-$i; sleep 0.3; done`

// Socket auth happens before the upgrade: 401 without a credential, 403
// from a foreign Origin, 404 for a run that is not a UUID or does not
// exist; tickets are single use and bound to run and purpose; ?token=
// is refused even with the right token (a URL lands in logs).
func TestTerminalSocketAuth(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.worker("term-auth")
	r := s.startRun(s.task(), ticker)
	bearer := http.Header{"Authorization": {"Bearer " + s.token}}
	cases := []struct {
		name string
		run  string
		kind string
		q    url.Values
		hdr  http.Header
		want int
	}{
		{"no credential", r.ID, "pane", nil, http.Header{}, 401},
		{"bad header", r.ID, "attach", nil, http.Header{"Authorization": {"Bearer " + strings.Repeat("0", 32)}}, 401},
		{"bad token param", r.ID, "pane", url.Values{"token": {"nope"}}, http.Header{}, 401},
		{"bad ticket", r.ID, "pane", url.Values{"ticket": {"nope"}}, http.Header{}, 401},
		{"foreign origin", r.ID, "pane", nil, http.Header{"Authorization": {"Bearer " + s.token}, "Origin": {"https://evil.example"}}, 403},
		{"foreign origin attach", r.ID, "attach", nil, http.Header{"Authorization": {"Bearer " + s.token}, "Origin": {"http://localhost:1"}}, 403},
		{"not a uuid", "not-a-uuid", "pane", nil, bearer, 404},
		{"unknown run", "00000000-0000-4000-8000-000000000000", "attach", nil, bearer, 404},
		{"bad size", r.ID, "attach", url.Values{"rows": {"0"}}, bearer, 400},
		{"token param", r.ID, "pane", url.Values{"token": {s.token}}, http.Header{}, 401},
		{"same origin", r.ID, "pane", nil, http.Header{"Authorization": {"Bearer " + s.token}, "Origin": {s.url}}, 101},
	}
	for _, c := range cases {
		conn, code, _ := s.dialWS(c.run, c.kind, c.q, c.hdr)
		if code != c.want {
			t.Errorf("%s: status %d, want %d", c.name, code, c.want)
		}
		if conn != nil {
			conn.CloseNow()
		}
	}

	ticket := func(run, purpose string, want int) string {
		t.Helper()
		code, body := s.call("POST", "/api/v1/ws-tickets", map[string]any{"run_id": run, "purpose": purpose})
		if code != want {
			t.Fatalf("ticket %s %s: %d %s", run, purpose, code, body)
		}
		var tk wire.WSTicket
		_ = json.Unmarshal(body, &tk)
		if want == 201 && (len(tk.Ticket) != 32 || time.Until(tk.ExpiresAt) > 31*time.Second || time.Until(tk.ExpiresAt) < 25*time.Second) {
			t.Fatalf("ticket %s", body)
		}
		return tk.Ticket
	}
	ticket(r.ID, "shell", 400)
	ticket("00000000-0000-4000-8000-000000000000", "pane", 404)
	tk := ticket(r.ID, "pane", 201)
	if _, code, _ := s.dialWS(r.ID, "pane", url.Values{"ticket": {tk}}, http.Header{}); code != 101 {
		t.Fatalf("pane with its ticket: %d", code)
	}
	if _, code, _ := s.dialWS(r.ID, "pane", url.Values{"ticket": {tk}}, http.Header{}); code != 401 {
		t.Fatalf("a ticket used twice: %d", code)
	}
	tk = ticket(r.ID, "pane", 201)
	if _, code, _ := s.dialWS(r.ID, "attach", url.Values{"ticket": {tk}}, http.Header{}); code != 401 {
		t.Fatalf("a pane ticket on the attach socket: %d", code)
	}
	other := s.startRun(s.task(), "sleep 300")
	tk = ticket(other.ID, "attach", 201)
	if _, code, _ := s.dialWS(r.ID, "attach", url.Values{"ticket": {tk}}, http.Header{}); code != 401 {
		t.Fatalf("another run's ticket: %d", code)
	}
}

// A viewer gets the current screen at once, then one pane_snapshot per
// change, seq by seq.
func TestPaneViewerGetsScreenThenChanges(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.worker("term-pane")
	r := s.startRun(s.task(), ticker)
	cur := s.waitPane(r.ID, "tick-2")
	c := s.mustWS(r.ID, "pane", nil)
	read := func() wire.PaneSnapshot {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		_, b, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var p wire.PaneSnapshot
		if err := json.Unmarshal(b, &p); err != nil || p.Type != "pane_snapshot" || p.RunID != r.ID || p.Timestamp == nil {
			t.Fatalf("frame %s (%v)", b, err)
		}
		return p
	}
	first := read()
	if first.Seq < cur.Seq || !strings.Contains(first.Capture, "tick-") {
		t.Fatalf("first frame seq %d (pane was at %d): %q", first.Seq, cur.Seq, first.Capture)
	}
	prev := first
	for range 5 {
		p := read()
		if p.Seq != prev.Seq+1 || p.Capture == prev.Capture {
			t.Fatalf("after seq %d came seq %d (same screen: %v)", prev.Seq, p.Seq, p.Capture == prev.Capture)
		}
		prev = p
	}
	// Read-only: a data frame from the viewer closes its socket.
	_ = c.Write(t.Context(), websocket.MessageText, []byte(`{"type":"input"}`))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		if _, _, err := c.Read(ctx); err != nil {
			if websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
				t.Fatalf("viewer that wrote closed with %v", err)
			}
			break
		}
	}
}

// fanout is a run whose big screen (50 lines of 150 columns, all
// changing) changes every 0.25 s, one pane viewer that never reads (a
// 4 KiB receive buffer, so its socket stalls within a few frames) and
// viewers that read everything, recording what they got.
type fanout struct {
	s       *system
	run     wire.Run
	stalled *websocket.Conn

	mu  sync.Mutex
	got [][]delivery // per reading viewer, in arrival order

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// delivery is one pane_snapshot a viewer read, and how long after its
// capture it arrived.
type delivery struct {
	seq     int64
	latency time.Duration
}

func startFanout(tb testing.TB, viewers int) *fanout {
	tb.Helper()
	s := newSystem(tb)
	s.worker("term-fanout")
	f := &fanout{s: s, got: make([][]delivery, viewers)}
	f.run = s.startRun(s.task(), `i=0; while :; do i=$((i+1)); j=0; while [ $j -lt 50 ]; do j=$((j+1)); printf 'tick-%06d-%02d-%0130d\n' $i $j $i; done; sleep 0.25; done`)
	s.waitPane(f.run.ID, "tick-000002")
	stalled, code, err := s.dialWSWith(tinyReceiveBuffer(), f.run.ID, "pane", nil, nil)
	if err != nil {
		tb.Fatalf("stalled viewer: %d %v", code, err)
	}
	f.stalled = stalled // never read
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	for i := range viewers {
		c := s.mustWS(f.run.ID, "pane", nil)
		f.wg.Go(func() {
			for {
				_, b, err := c.Read(ctx)
				if err != nil {
					return
				}
				now := time.Now()
				var p wire.PaneSnapshot
				if json.Unmarshal(b, &p) != nil || p.Timestamp == nil {
					continue
				}
				f.mu.Lock()
				f.got[i] = append(f.got[i], delivery{p.Seq, now.Sub(*p.Timestamp)})
				f.mu.Unlock()
			}
		})
	}
	tb.Cleanup(f.stop)
	return f
}

// stop ends the reading viewers (idempotent).
func (f *fanout) stop() {
	f.cancel()
	f.wg.Wait()
}

// paneSeq is the seq of the run's newest snapshot on the server.
func (f *fanout) paneSeq() int64 {
	var p wire.Pane
	f.s.must(200, "GET", "/api/v1/runs/"+f.run.ID+"/pane", nil, &p)
	return p.Seq
}

// allReached reports whether every reading viewer has read seq or later.
func (f *fanout) allReached(seq int64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ds := range f.got {
		if len(ds) == 0 || ds[len(ds)-1].seq < seq {
			return false
		}
	}
	return true
}

// deliveries is a copy of what each reading viewer read.
func (f *fanout) deliveries() [][]delivery {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([][]delivery, len(f.got))
	for i, ds := range f.got {
		out[i] = slices.Clone(ds)
	}
	return out
}

// Fifty viewers and one that never reads: every viewer that reads keeps
// getting the newest screen, in order, while the stalled one holds; and
// the server holds at most one pending snapshot per viewer, whatever the
// stall. These are the properties; how fast and how much memory is
// BenchmarkPaneFanoutWithStalledViewer's to report (and fleet's
// TestPaneSubPendingBounded checks the bound on the subscription itself).
func TestPaneFanoutWithStalledViewer(t *testing.T) {
	t.Parallel()
	const viewers = 50
	f := startFanout(t, viewers)
	// Ten changes after the stalled viewer connected: its socket has long
	// stopped taking frames.
	from := f.paneSeq()
	eventually.Wait(t, 60*time.Second, "ten more screen changes", func() bool { return f.paneSeq() >= from+10 })
	v, pending := f.s.metric("pam_pane_viewers"), f.s.metric("pam_pane_pending_snapshots")
	if v < viewers || pending > v {
		t.Errorf("%.0f pane viewers hold %.0f pending snapshots: at most one each", v, pending)
	}
	newest := f.paneSeq()
	eventually.Wait(t, eventually.Long, fmt.Sprintf("every reading viewer to read seq %d", newest), func() bool { return f.allReached(newest) })
	f.stop()
	for i, ds := range f.deliveries() {
		// A slow viewer may skip to the newest snapshot (docs/api.md#websockets),
		// never back nor to one it already had.
		for k := 1; k < len(ds); k++ {
			if ds[k].seq <= ds[k-1].seq {
				t.Fatalf("viewer %d read seq %d after seq %d", i, ds[k].seq, ds[k-1].seq)
			}
		}
		if len(ds) < 2 {
			t.Errorf("viewer %d read %d snapshots", i, len(ds))
		}
	}
}

// BenchmarkPaneFanoutWithStalledViewer is the pane fan-out figure of docs/bench.md#figures-and-goals
// end to end, through real serve, worker and tmux: fifty viewers and one
// that never reads on a run whose 50x150 screen changes every 0.25 s. One
// iteration is one screen change read by every reading viewer. Reports
// capture-to-viewer delivery p50, p99 and max (ms; the goal is two capture
// intervals, 400 ms) and how much serve's heap in use and RSS grew (MiB;
// the goal is well under 32).
func BenchmarkPaneFanoutWithStalledViewer(b *testing.B) {
	f := startFanout(b, 50)
	heapBefore, rssBefore := f.s.metric("go_memstats_heap_inuse_bytes"), f.s.metric("process_resident_memory_bytes")
	from := f.paneSeq()
	b.ResetTimer()
	eventually.Wait(b, time.Duration(b.N)*time.Second+time.Minute, "the reading viewers to read every change", func() bool { return f.allReached(from + int64(b.N)) })
	b.StopTimer()
	heapAfter, rssAfter := f.s.metric("go_memstats_heap_inuse_bytes"), f.s.metric("process_resident_memory_bytes")
	f.stop()
	var lat []time.Duration
	for _, ds := range f.deliveries() {
		for _, d := range ds {
			if d.seq > from { // the first frame is the cached screen: its capture is old
				lat = append(lat, d.latency)
			}
		}
	}
	if len(lat) == 0 {
		b.Fatal("no deliveries")
	}
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
	b.ReportMetric((heapAfter-heapBefore)/(1<<20), "heap-MiB")
	b.ReportMetric((rssAfter-rssBefore)/(1<<20), "rss-MiB")
}
