package fleet

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"pam/internal/eventually"
	"pam/internal/wire"
)

// A viewer that never takes anything holds one snapshot, the newest,
// however many are published; a viewer that keeps up sees every one; the
// publisher never waits for either. How fast is BenchmarkPaneFanout's.
func TestPaneSubLatestWins(t *testing.T) {
	f := New(10)
	f.PutSnapshot("r", "first", time.Now())
	stalled, err := f.SubscribePane("r")
	if err != nil {
		t.Fatal(err)
	}
	live, _ := f.SubscribePane("r")
	if p := live.Next(); p == nil || p.Seq != 1 || p.Capture != "first" {
		t.Fatalf("a new viewer's pending snapshot: %+v", p)
	}
	<-live.Ready()
	// The live viewer takes each snapshot and says so; the publisher
	// waits for that (as time between captures would), never for the
	// stalled one.
	seen := make(chan int64)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(seen)
		for {
			<-live.Ready()
			p := live.Next()
			if p == nil {
				continue
			}
			if q := live.Next(); q != nil {
				t.Errorf("a second pending snapshot after taking one: %d", q.Seq)
			}
			seen <- p.Seq
			if p.Seq == 1001 {
				return
			}
		}
	})
	var got []int64
	for i := range 1000 {
		f.PutSnapshot("r", fmt.Sprint("screen ", i), time.Now())
		select {
		case seq := <-seen:
			got = append(got, seq)
		case <-time.After(eventually.Medium):
			t.Fatalf("the live viewer did not take snapshot %d within %s", i+2, eventually.Medium)
		}
	}
	wg.Wait()
	if n := f.PanePending(); n != 1 {
		t.Errorf("%d snapshots pending after the live viewer took its last, want the stalled viewer's one", n)
	}
	for i, seq := range got {
		if seq != int64(i)+2 {
			t.Fatalf("the live viewer got seq %d as its %dth change", seq, i)
		}
	}
	if got[len(got)-1] != 1001 {
		t.Errorf("the live viewer ended at seq %d, want 1001", got[len(got)-1])
	}
	p := stalled.Next()
	if p == nil || p.Seq != 1001 || p.Capture != "screen 999" || stalled.Next() != nil {
		t.Fatalf("the stalled viewer holds %+v, want only the newest", p)
	}
	var frame wire.PaneSnapshot
	if err := json.Unmarshal(p.Frame(), &frame); err != nil || frame.Type != "pane_snapshot" || frame.Seq != 1001 || frame.RunID != "r" || frame.Timestamp == nil {
		t.Fatalf("frame %s: %v", p.Frame(), err)
	}
	if f.PaneViewers() != 2 {
		t.Fatalf("viewers %d", f.PaneViewers())
	}
	stalled.Close()
	stalled.Close()
	live.Close()
	if f.PaneViewers() != 0 || len(f.subs) != 0 {
		t.Fatalf("subscriptions left: %d %v", f.PaneViewers(), f.subs)
	}
}

// Memory is bounded by construction, not by timing: a hundred viewers that
// never read, a thousand snapshots published, and each holds exactly one,
// the newest.
func TestPaneSubPendingBounded(t *testing.T) {
	t.Parallel()
	f := New(10)
	subs := make([]*PaneSub, 100)
	for i := range subs {
		s, err := f.SubscribePane("r")
		if err != nil {
			t.Fatal(err)
		}
		subs[i] = s
	}
	if n := f.PanePending(); n != 0 {
		t.Fatalf("%d pending before any snapshot", n)
	}
	for i := range 1000 {
		f.PutSnapshot("r", fmt.Sprint("screen ", i), time.Now())
		if n := f.PanePending(); n > len(subs) {
			t.Fatalf("after snapshot %d: %d pending for %d viewers", i+1, n, len(subs))
		}
	}
	if n := f.PanePending(); n != len(subs) {
		t.Fatalf("%d pending, want one per viewer (%d)", n, len(subs))
	}
	for i, s := range subs {
		if p := s.Next(); p == nil || p.Seq != 1000 || s.Next() != nil {
			t.Fatalf("viewer %d holds %+v, want only seq 1000", i, p)
		}
	}
	if n := f.PanePending(); n != 0 {
		t.Fatalf("%d pending after every viewer took its snapshot", n)
	}
}

// Subscriptions are bounded: past MaxPaneViewers they are refused.
func TestPaneSubBound(t *testing.T) {
	f := New(10)
	subs := make([]*PaneSub, 0, MaxPaneViewers)
	for range MaxPaneViewers {
		s, err := f.SubscribePane("r")
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
	}
	if _, err := f.SubscribePane("other"); err != ErrTooManyViewers {
		t.Fatalf("past the bound: %v", err)
	}
	subs[0].Close()
	if _, err := f.SubscribePane("other"); err != nil {
		t.Fatalf("after one left: %v", err)
	}
}

// Relay frames reach the relay the host opened, only from that host; an
// attach_closed ends the route; a route dies with its connection; relay
// frames never reset an uplink, even when its queue is full.
func TestAttachRoutes(t *testing.T) {
	f := New(10)
	if _, err := f.OpenAttach("h1", wire.AttachOpenFrame{AttachID: "a"}, func(wire.Frame) {}); err != ErrNotConnected {
		t.Fatalf("open on an absent host: %v", err)
	}
	c1 := f.Attach("h1")
	f.Attach("h2")
	var mu sync.Mutex
	var got []wire.Frame
	sink := func(fr wire.Frame) { mu.Lock(); got = append(got, fr); mu.Unlock() }
	r, err := f.OpenAttach("h1", wire.AttachOpenFrame{AttachID: "a", RunID: "run"}, sink)
	if err != nil {
		t.Fatal(err)
	}
	if open, ok := (<-c1.Out).(wire.AttachOpenFrame); !ok || open.AttachID != "a" {
		t.Fatalf("queued %+v", open)
	}
	if f.DeliverAttach("h2", wire.AttachOutputFrame{AttachID: "a", Bytes: []byte("forged")}) {
		t.Fatal("another host's frame was delivered")
	}
	if !f.DeliverAttach("h1", wire.AttachOutputFrame{AttachID: "a", Bytes: []byte("ok")}) {
		t.Fatal("the host's own frame was not delivered")
	}
	if err := r.Input([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if in, ok := (<-c1.Out).(wire.AttachInputFrame); !ok || in.AttachID != "a" || string(in.Bytes) != "x" {
		t.Fatalf("input %+v", in)
	}
	// Fill the queue: relay frames are refused, the uplink stays.
	for len(c1.Out) < cap(c1.Out) {
		c1.Out <- wire.HeartbeatAckFrame{}
	}
	if err := r.Input(nil); err != ErrUplinkBusy {
		t.Fatalf("send on a full queue: %v", err)
	}
	select {
	case <-c1.Done:
		t.Fatal("a relay frame reset the uplink")
	default:
	}
	if r.Backlog() != cap(c1.Out) {
		t.Fatalf("backlog %d", r.Backlog())
	}
	for len(c1.Out) > 0 {
		<-c1.Out
	}
	if !f.DeliverAttach("h1", wire.AttachClosedFrame{AttachID: "a", Reason: "bye"}) || f.Attaches() != 0 {
		t.Fatal("attach_closed did not end the route")
	}
	if f.DeliverAttach("h1", wire.AttachOutputFrame{AttachID: "a"}) {
		t.Fatal("output after attach_closed was delivered")
	}
	// Close asks the worker to tear down, once.
	r2, _ := f.OpenAttach("h1", wire.AttachOpenFrame{AttachID: "b"}, sink)
	<-c1.Out
	r2.Close()
	r2.Close()
	if cl, ok := (<-c1.Out).(wire.AttachCloseFrame); !ok || cl.AttachID != "b" || len(c1.Out) != 0 {
		t.Fatalf("close frames %+v (+%d)", cl, len(c1.Out))
	}
	// The connection goes: its routes end with an attach_closed each.
	if _, err := f.OpenAttach("h1", wire.AttachOpenFrame{AttachID: "c"}, sink); err != nil {
		t.Fatal(err)
	}
	f.Detach(c1)
	mu.Lock()
	defer mu.Unlock()
	var kinds []string
	for _, fr := range got {
		switch fr := fr.(type) {
		case wire.AttachOutputFrame:
			kinds = append(kinds, fr.Type()+":"+fr.AttachID)
		case wire.AttachClosedFrame:
			kinds = append(kinds, fr.Type()+":"+fr.AttachID)
		}
	}
	if strings.Join(kinds, " ") != "attach_output:a attach_closed:a attach_closed:c" {
		t.Fatalf("sink got %v", kinds)
	}
	if f.Attaches() != 0 {
		t.Fatalf("routes left: %d", f.Attaches())
	}
}

// BenchmarkPaneFanout publishes snapshots to 50 viewers that keep up and
// one that never reads, and reports snapshots delivered per second (docs/bench.md#figures-and-goals
// pane fan-out, the cache's side of it) and the heap the viewers hold.
func BenchmarkPaneFanout(b *testing.B) {
	f := New(10)
	screen := strings.Repeat("\x1b[32m"+strings.Repeat("x", 200)+"\x1b[0m\n", 50)
	_, _ = f.SubscribePane("r") // stalled
	var wg sync.WaitGroup
	done := make(chan struct{})
	counts := make([]int, 50)
	for i := range counts {
		s, _ := f.SubscribePane("r")
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				case <-s.Ready():
				}
				if p := s.Next(); p != nil {
					_ = p.Frame()
					counts[i]++
				}
			}
		})
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		f.PutSnapshot("r", screen+fmt.Sprint(i), time.Now())
	}
	elapsed := time.Since(start)
	close(done)
	wg.Wait()
	b.StopTimer()
	runtime.ReadMemStats(&after)
	total := 0
	for _, n := range counts {
		total += n
	}
	b.ReportMetric(float64(total)/elapsed.Seconds(), "deliveries/s")
	b.ReportMetric(float64(int64(after.HeapInuse)-int64(before.HeapInuse))/(1<<20), "MiB-heap-delta")
}
