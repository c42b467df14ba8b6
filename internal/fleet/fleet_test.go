package fleet

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"pam/internal/wire"
)

func TestPaneSeqCountsDistinctSnapshots(t *testing.T) {
	f := New(2)
	if p := f.Pane("r1"); p.Seq != 0 || p.Capture != "" || p.Timestamp != nil {
		t.Fatalf("before any snapshot: %+v", p)
	}
	now := time.Now()
	for i, c := range []string{"a", "a", "b", "b", "a"} {
		seq, changed := f.PutSnapshot("r1", c, now)
		want := map[int]int64{0: 1, 1: 1, 2: 2, 3: 2, 4: 3}[i]
		if seq != want || changed != (i == 0 || i == 2 || i == 4) {
			t.Fatalf("snapshot %d (%q): seq %d changed %v", i, c, seq, changed)
		}
	}
	// LRU bound: a third run evicts the least recently used.
	f.PutSnapshot("r2", "x", now)
	f.Pane("r1")
	f.PutSnapshot("r3", "y", now)
	if f.Pane("r2").Seq != 0 || f.Pane("r1").Seq != 3 {
		t.Fatalf("LRU did not evict r2: r1=%+v r2=%+v", f.Pane("r1"), f.Pane("r2"))
	}
}

func TestSendToMissingOrFullConnection(t *testing.T) {
	f := New(10)
	if err := f.Send("h", wire.RunStopFrame{}); err != ErrNotConnected {
		t.Fatalf("send to an absent host: %v", err)
	}
	c := f.Attach("h")
	for i := 0; i < sendQueue; i++ {
		if err := f.Send("h", wire.RunStopFrame{}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	if err := f.Send("h", wire.RunStopFrame{}); err == nil {
		t.Fatal("a full queue accepted another frame")
	}
	select {
	case <-c.Done:
	default:
		t.Fatal("a full queue did not reset the connection")
	}
	// A newer connection replaces (and closes) the older one.
	c2 := f.Attach("h")
	f.Detach(c) // the old one going away must not remove the new one
	if !f.Connected("h") {
		t.Fatal("detaching a replaced connection removed its successor")
	}
	f.Detach(c2)
	if f.Connected("h") {
		t.Fatal("still connected after detach")
	}
}

// BenchmarkPaneCache1000 fills the central cache with 1,000 runs of full
// 220×50 colour screens and reports the heap they hold (docs/bench.md#figures-and-goals: memory of
// serve with 1,000 runs cached).
func BenchmarkPaneCache1000(b *testing.B) {
	line := "\x1b[32m" + strings.Repeat("x", 200) + "\x1b[0m\n"
	screen := strings.Repeat(line, 50)
	for i := 0; i < b.N; i++ {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f := New(1000)
		for r := 0; r < 1000; r++ {
			// Distinct strings, as snapshots arriving from workers are.
			f.PutSnapshot(fmt.Sprintf("run-%d", r), screen[:len(screen)-1]+fmt.Sprint(r), time.Now())
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "MiB-held")
		runtime.KeepAlive(f)
	}
}

// The admission rules of docs/architecture.md#security-model, in memory:
// only the pinned instance is admitted, never replacing another instance;
// a revocation closes the connection, forgets the pin and refuses an
// admission that read the generation before it.
func TestAdmitPinRevoke(t *testing.T) {
	f := New(10)
	if _, gen := f.Pinned("h"); gen != 0 {
		t.Fatalf("fresh generation %d", gen)
	}
	if _, err := f.Admit("h", "a", 0); err != ErrNotRegistered {
		t.Fatalf("admit before a register: %v", err)
	}
	f.Pin("h", "a")
	inst, gen := f.Pinned("h")
	if inst != "a" {
		t.Fatalf("pinned %q", inst)
	}
	if _, err := f.Admit("h", "b", gen); err != ErrNotRegistered {
		t.Fatalf("admit of another instance: %v", err)
	}
	c, err := f.Admit("h", "a", gen)
	if err != nil || !f.Current(c) {
		t.Fatalf("admit: %v current %v", err, f.Current(c))
	}
	// The same instance reconnecting replaces its older connection.
	c2, err := f.Admit("h", "a", gen)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done:
	default:
		t.Fatal("the older connection of the same instance stayed open")
	}
	// A revocation between Pinned and Admit refuses the admission.
	_, gen = f.Pinned("h")
	f.Revoke("h", "token rotated")
	select {
	case <-c2.Done:
		if c2.Reason() != "token rotated" {
			t.Fatalf("reason %q", c2.Reason())
		}
	default:
		t.Fatal("revoke left the connection open")
	}
	if f.Connected("h") || f.Current(c2) {
		t.Fatal("still connected after revoke")
	}
	f.Pin("h", "a")
	if _, err := f.Admit("h", "a", gen); err != ErrRevoked {
		t.Fatalf("admit with a generation from before the revocation: %v", err)
	}
	if inst, _ := f.Pinned("h"); inst != "a" {
		t.Fatalf("pin after re-register %q", inst)
	}
	// A reinstall (another instance pinned) closes the old instance's
	// connection.
	_, gen = f.Pinned("h")
	c3, err := f.Admit("h", "a", gen)
	if err != nil {
		t.Fatal(err)
	}
	f.Pin("h", "b")
	select {
	case <-c3.Done:
	default:
		t.Fatal("pinning another instance left the old one connected")
	}
}
