package holder

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestEventsTornLastLine: a journal whose last line was cut short (the
// holder died while writing it) reads as every complete line before it.
func TestEventsTornLastLine(t *testing.T) {
	dir := t.TempDir()
	j, err := openJournal(dir, "pam-00000001")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []string{"started", "reader_attached", "resize"} {
		if err := j.add(Event{Event: e}); err != nil {
			t.Fatal(err)
		}
	}
	j.close()
	path := EventsPath(dir, "pam-00000001")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"time":"2026-01-01T00:00:00Z","event":"exi`)
	f.Close()
	ev, err := ReadEvents(path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ev {
		names = append(names, e.Event)
	}
	if strings.Join(names, ",") != "started,reader_attached,resize" {
		t.Fatalf("events = %v, want the three complete lines", names)
	}
	// A torn line that happens to be valid JSON is still torn: no newline.
	os.WriteFile(path, []byte("{\"event\":\"started\"}\n{\"event\":\"x\"}"), 0o600)
	if ev, _ := ReadEvents(path); len(ev) != 1 {
		t.Fatalf("events = %+v, want only the line with its newline", ev)
	}
}

// TestNoteNeverHalfWritten: while the note is replaced again and again
// with notes of very different lengths, a reader only ever sees a
// complete note.
func TestNoteNeverHalfWritten(t *testing.T) {
	dir := t.TempDir()
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			n := Note{Name: "pam-00000002", PID: i, Cwd: "/" + strings.Repeat("x", (i%7)*3000), StartedAt: time.Now()}
			if err := writeNote(dir, n); err != nil {
				t.Error(err)
				return
			}
		}
	})
	reads, missing := 0, 0
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(NotePath(dir, "pam-00000002"))
		if os.IsNotExist(err) {
			missing++
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var n Note
		if err := json.Unmarshal(b, &n); err != nil {
			t.Fatalf("read a half-written note (%d bytes): %v", len(b), err)
		}
		reads++
	}
	stop.Store(true)
	wg.Wait()
	if reads < 10 {
		t.Fatalf("only %d reads", reads)
	}
	// Only whole notes and their temp files are in the folder.
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Name() != "pam-00000002.json" {
			t.Errorf("left behind: %s", e.Name())
		}
	}
	t.Logf("%d complete reads, %d before the first note", reads, missing)
}

// FuzzReadFrame: any bytes either decode to frames that encode back to
// the same bytes, or fail with an error; never a panic or a payload over
// the bound.
func FuzzReadFrame(f *testing.F) {
	f.Add(AppendFrame(nil, FrameOutput, []byte("hello")))
	f.Add(AppendFrame(AppendFrame(nil, FrameResize, SizePayload(50, 220)), FrameControl, []byte(ControlStop)))
	f.Add(jsonFrame(FrameHello, Hello{Rows: 24, Cols: 80, Write: true}))
	f.Add([]byte{'o', 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{'z', 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		var again []byte
		for {
			fr, err := ReadFrame(r)
			if err != nil {
				break
			}
			limit, ok := payloadLimit(fr.Type)
			if !ok || len(fr.Payload) > limit {
				t.Fatalf("frame %q with %d bytes accepted", byte(fr.Type), len(fr.Payload))
			}
			if fr.Type == FrameResize || fr.Type == FrameSize {
				if rows, cols, err := ParseSize(fr.Payload); err == nil && (rows < 1 || cols < 1 || rows > MaxDim || cols > MaxDim) {
					t.Fatalf("size %dx%d accepted", rows, cols)
				}
			}
			again = AppendFrame(again, fr.Type, fr.Payload)
		}
		if !bytes.HasPrefix(b, again) {
			t.Fatalf("decoded frames do not encode back to the input")
		}
	})
}

// TestSocketPathTooLong: a holders folder whose socket path would not
// fit a Unix socket is refused with a message that says so, before
// anything is locked or started.
func TestSocketPathTooLong(t *testing.T) {
	dir := "/" + strings.Repeat("d", 100)
	err := Serve(t.Context(), Options{Dir: dir, Name: "pam-00000003", Cwd: "/", Command: []string{"/bin/true"}})
	if err == nil || !strings.Contains(err.Error(), "shorter PAM_DATA_DIR") {
		t.Fatalf("err = %v", err)
	}
}
