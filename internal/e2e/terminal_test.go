package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"pam/internal/wire"
)

// captureInterval is PAM_CAPTURE_INTERVAL of the e2e workers.
const captureInterval = 200 * time.Millisecond

// ticker is a shell agent whose screen changes every 0.3 s.
const ticker = `i=0; while [ $i -lt 100000 ]; do i=$((i+1)); echo tick-$i; sleep 0.3; done`

// Socket auth happens before the upgrade: 401 without a credential, 403
// from a foreign Origin, 404 for a run that is not a UUID or does not
// exist; tickets are single use and bound to run and purpose; ?token=
// works for non-browser clients.
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
		{"foreign origin attach", r.ID, "attach", url.Values{"token": {s.token}}, http.Header{"Origin": {"http://localhost:1"}}, 403},
		{"not a uuid", "not-a-uuid", "pane", nil, bearer, 404},
		{"unknown run", "00000000-0000-4000-8000-000000000000", "attach", nil, bearer, 404},
		{"bad size", r.ID, "attach", url.Values{"rows": {"0"}}, bearer, 400},
		{"token param", r.ID, "pane", url.Values{"token": {s.token}}, http.Header{}, 101},
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

// Fifty viewers and one that never reads: the fifty see every change,
// each within two capture intervals of the capture, and the server's
// heap stays bounded.
func TestPaneFanoutWithStalledViewer(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.worker("term-fanout")
	// Big screens (50 lines of 150 columns, all changing) so that the
	// stalled viewer's buffers fill within the test.
	r := s.startRun(s.task(), `i=0; while :; do i=$((i+1)); j=0; while [ $j -lt 50 ]; do j=$((j+1)); printf 'tick-%06d-%02d-%0130d\n' $i $j $i; done; sleep 0.25; done`)
	s.waitPane(r.ID, "tick-000002")
	heapBefore, rssBefore := s.metric("go_memstats_heap_inuse_bytes"), s.metric("process_resident_memory_bytes")

	stalled, code, err := s.dialWSWith(tinyReceiveBuffer(), r.ID, "pane", nil, nil)
	if err != nil {
		t.Fatalf("stalled viewer: %d %v", code, err)
	}
	_ = stalled // never read

	type got struct {
		seq     int64
		latency time.Duration
	}
	const viewers = 50
	var wg sync.WaitGroup
	results := make([][]got, viewers)
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Second)
	defer cancel()
	for i := range viewers {
		c := s.mustWS(r.ID, "pane", nil)
		wg.Go(func() {
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
				results[i] = append(results[i], got{p.Seq, now.Sub(*p.Timestamp)})
			}
		})
	}
	wg.Wait()
	heapAfter, rssAfter := s.metric("go_memstats_heap_inuse_bytes"), s.metric("process_resident_memory_bytes")

	var lat []time.Duration
	for i, rs := range results {
		if len(rs) < 10 {
			t.Fatalf("viewer %d got %d snapshots in 6s", i, len(rs))
		}
		// The first frame is the cached screen (its capture time is old);
		// after it every change must come, in order, none skipped.
		for k := 1; k < len(rs); k++ {
			if rs[k].seq != rs[k-1].seq+1 {
				t.Fatalf("viewer %d skipped from seq %d to %d", i, rs[k-1].seq, rs[k].seq)
			}
			lat = append(lat, rs[k].latency)
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p50, p99, worst := lat[len(lat)/2], lat[len(lat)*99/100], lat[len(lat)-1]
	t.Logf("%d viewers + 1 stalled: %d deliveries, capture→viewer latency p50 %s p99 %s max %s; serve heap in use %.1f → %.1f MiB, RSS %.1f → %.1f MiB",
		viewers, len(lat), p50, p99, worst, heapBefore/(1<<20), heapAfter/(1<<20), rssBefore/(1<<20), rssAfter/(1<<20))
	if worst > 2*captureInterval {
		t.Errorf("a change reached a viewer %s after its capture, more than two capture intervals", worst)
	}
	if heapAfter-heapBefore > 32<<20 {
		t.Errorf("serve's heap grew by %.1f MiB with %d viewers and one stalled", (heapAfter-heapBefore)/(1<<20), viewers)
	}
}
