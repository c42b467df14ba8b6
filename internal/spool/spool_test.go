package spool

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"pam/internal/wire"
)

func entry(runID string, attempt int, kind string) Entry {
	ts := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	return Entry{
		RunID:  runID,
		Signal: wire.Signal{Kind: kind, Attempt: &attempt, Source: wire.SourceWrapper, Payload: json.RawMessage(`{"exit_code":3}`), Timestamp: &ts},
		Token:  "sigtok",
		APIURL: "http://127.0.0.1:7898",
	}
}

func TestWriteAndList(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "worker", "spool")
	run := uuid.NewString()
	var paths []string
	for _, kind := range []string{wire.SignalStarted, wire.SignalProgress, wire.SignalFinished} {
		p, err := Write(dir, entry(run, 2, kind))
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	want := []string{
		fmt.Sprintf("00000000000000000001-%s-2-started.json", run),
		fmt.Sprintf("00000000000000000002-%s-2-progress.json", run),
		fmt.Sprintf("00000000000000000003-%s-2-finished.json", run),
	}
	for i, p := range paths {
		if filepath.Base(p) != want[i] || filepath.Dir(p) != dir {
			t.Errorf("path %d = %s, want %s", i, p, want[i])
		}
		st, err := os.Stat(p)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v", p, st.Mode(), err)
		}
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("spool dir mode %v, %v", st.Mode(), err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Errorf("temp file left behind: %s", e.Name())
		}
	}
	files, bad, err := List(dir)
	if err != nil || len(bad) != 0 {
		t.Fatalf("List: %v %v", err, bad)
	}
	if len(files) != 3 {
		t.Fatalf("List = %d files", len(files))
	}
	for i, f := range files {
		if f.Seq != uint64(i+1) || f.Path != paths[i] || f.RunID != run || f.Token != "sigtok" || f.APIURL == "" || f.SpooledAt.IsZero() {
			t.Errorf("file %d = %+v", i, f)
		}
		if *f.Signal.Attempt != 2 || string(f.Signal.Payload) != `{"exit_code":3}` || f.Signal.Source != wire.SourceWrapper || f.Signal.Timestamp == nil {
			t.Errorf("signal %d not verbatim: %+v", i, f.Signal)
		}
	}
	if !HasPending(dir, run, 2) || HasPending(dir, run, 1) || HasPending(dir, uuid.NewString(), 2) || HasPending(dir, "nope", 2) {
		t.Error("HasPending wrong")
	}
	if HasPending(filepath.Join(t.TempDir(), "absent"), run, 2) {
		t.Error("HasPending on a missing spool")
	}
	// An upper-case run id is the same run.
	if !HasPending(dir, strings.ToUpper(run), 2) {
		t.Error("HasPending is case-sensitive on the run id")
	}
}

func TestRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	run := uuid.NewString()
	noAttempt := entry(run, 1, wire.SignalStarted)
	noAttempt.Signal.Attempt = nil
	for name, e := range map[string]Entry{
		"empty run id":   entry("", 1, wire.SignalStarted),
		"path run id":    entry("../../etc/passwd", 1, wire.SignalStarted),
		"short run id":   entry("1234", 1, wire.SignalStarted),
		"urn run id":     entry("urn:uuid:"+run, 1, wire.SignalStarted),
		"bad kind":       entry(run, 1, "exploded"),
		"empty kind":     entry(run, 1, ""),
		"no attempt":     noAttempt,
		"attempt zero":   entry(run, 0, wire.SignalStarted),
		"attempt neg":    entry(run, -1, wire.SignalStarted),
		"kind with path": entry(run, 1, "started/../x"),
	} {
		if p, err := Write(dir, e); err == nil {
			t.Errorf("%s: written to %s", name, p)
		}
	}
	files, bad, err := List(dir)
	if len(files)+len(bad) != 0 || err != nil {
		t.Errorf("spool not empty: %v %v %v", files, bad, err)
	}
}

func TestBadFilesReported(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	run := uuid.NewString()
	if _, err := Write(dir, entry(run, 1, wire.SignalStarted)); err != nil {
		t.Fatal(err)
	}
	torn := filepath.Join(dir, fmt.Sprintf("%020d-%s-1-finished.json", 2, run))
	if err := os.WriteFile(torn, []byte(`{"run_id":"`+run+`","signal":{"ki`), 0o600); err != nil {
		t.Fatal(err)
	}
	other := uuid.NewString()
	mismatch := filepath.Join(dir, fmt.Sprintf("%020d-%s-1-completed.json", 3, other))
	b, _ := json.Marshal(entry(run, 1, wire.SignalCompleted))
	if err := os.WriteFile(mismatch, b, 0o600); err != nil {
		t.Fatal(err)
	}
	// Strays that are not signal files are not listed at all.
	for _, n := range []string{"README", ".tmp-123", "1-x-1-started.json"} {
		os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o600)
	}
	p, err := Write(dir, entry(run, 1, wire.SignalFinished))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(p), "00000000000000000004-") {
		t.Errorf("seq did not continue past the files on disk: %s", p)
	}
	files, bad, err := List(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || files[0].Seq != 1 || files[1].Seq != 4 {
		t.Errorf("files = %+v", files)
	}
	if len(bad) != 2 || bad[0].Path != torn || bad[1].Path != mismatch {
		t.Fatalf("bad = %+v", bad)
	}
	if !strings.Contains(bad[1].Err.Error(), "disagrees") {
		t.Errorf("mismatch error = %v", bad[1].Err)
	}
}

func TestCounterRecovers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	run := uuid.NewString()
	for range 3 {
		if _, err := Write(dir, entry(run, 1, wire.SignalProgress)); err != nil {
			t.Fatal(err)
		}
	}
	// A damaged or rewound counter never lets a new file sort before the
	// ones already spooled.
	for _, content := range []string{"garbage", "1\n"} {
		if err := os.WriteFile(filepath.Join(dir, ".seq"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		p, err := Write(dir, entry(run, 1, wire.SignalProgress))
		if err != nil {
			t.Fatal(err)
		}
		files, _, _ := List(dir)
		if files[len(files)-1].Path != p {
			t.Errorf("counter %q: new file %s does not sort last", content, p)
		}
	}
	os.Remove(filepath.Join(dir, ".seq"))
	p, err := Write(dir, entry(run, 1, wire.SignalFinished))
	if err != nil || !strings.HasPrefix(filepath.Base(p), "00000000000000000006-") {
		t.Errorf("after losing the counter: %s %v", p, err)
	}
}

func TestCap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	run := uuid.NewString()
	write := func(kind string) (string, error) { return WriteCap(dir, entry(run, 1, kind), 3) }
	for _, k := range []string{wire.SignalStarted, wire.SignalProgress, wire.SignalProgress} {
		if _, err := write(k); err != nil {
			t.Fatal(err)
		}
	}
	// Full: the oldest progress (seq 2) goes.
	if _, err := write(wire.SignalFinished); err != nil {
		t.Fatal(err)
	}
	kinds := func() (out []string) {
		files, _, _ := List(dir)
		for _, f := range files {
			out = append(out, strconv.FormatUint(f.Seq, 10)+f.Signal.Kind)
		}
		return out
	}
	if got, want := kinds(), []string{"1started", "3progress", "4finished"}; !slices.Equal(got, want) {
		t.Errorf("after cap: %v, want %v", got, want)
	}
	if _, err := write(wire.SignalCompleted); err != nil {
		t.Fatal(err)
	}
	// Only one-shot signals left: a new progress is refused, a one-shot
	// kind is kept beyond the cap.
	if _, err := write(wire.SignalProgress); !errors.Is(err, ErrFull) {
		t.Errorf("progress into a full spool: %v", err)
	}
	if _, err := write(wire.SignalFailed); err != nil {
		t.Errorf("one-shot into a full spool: %v", err)
	}
	if got, want := kinds(), []string{"1started", "4finished", "5completed", "6failed"}; !slices.Equal(got, want) {
		t.Errorf("after cap: %v, want %v", got, want)
	}
}

// TestConcurrentWriters: 20 goroutines and 3 other processes write at
// once; every seq is used exactly once.
func TestConcurrentWriters(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const goroutines, perWriter, procs = 20, 5, 3
	var cmds []*exec.Cmd
	for i := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperWriter$")
		cmd.Env = append(os.Environ(), "PAM_SPOOL_HELPER_DIR="+dir, "PAM_SPOOL_HELPER_N="+strconv.Itoa(perWriter))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatalf("helper %d: %v", i, err)
		}
		cmds = append(cmds, cmd)
	}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*perWriter)
	for range goroutines {
		wg.Go(func() {
			run := uuid.NewString()
			for range perWriter {
				if _, err := Write(dir, entry(run, 1, wire.SignalProgress)); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("helper %d: %v", i, err)
		}
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	files, bad, err := List(dir)
	if err != nil || len(bad) != 0 {
		t.Fatalf("List: %v %v", err, bad)
	}
	total := (goroutines + procs) * perWriter
	if len(files) != total {
		t.Fatalf("%d files, want %d", len(files), total)
	}
	for i, f := range files {
		if f.Seq != uint64(i+1) {
			t.Fatalf("file %d has seq %d: seqs are not 1..%d", i, f.Seq, total)
		}
	}
	// Per writer, the order of its own signals holds.
	last := map[string]uint64{}
	for _, f := range files {
		if f.Seq <= last[f.RunID] {
			t.Errorf("run %s out of order", f.RunID)
		}
		last[f.RunID] = f.Seq
	}
}

// TestHelperWriter is the other process of TestConcurrentWriters.
func TestHelperWriter(t *testing.T) {
	dir := os.Getenv("PAM_SPOOL_HELPER_DIR")
	if dir == "" {
		t.Skip("helper process only")
	}
	n, _ := strconv.Atoi(os.Getenv("PAM_SPOOL_HELPER_N"))
	run := uuid.NewString()
	for range n {
		if _, err := Write(dir, entry(run, 1, wire.SignalProgress)); err != nil {
			t.Fatal(err)
		}
	}
}

// A needs_input signal (`pam hook needs-input` with the orchestrator
// away) is spooled and listed back like any other kind: its name holds
// an underscore.
func TestNeedsInputSpooled(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "worker", "spool")
	run := uuid.NewString()
	p, err := Write(dir, entry(run, 1, wire.SignalNeedsInput))
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("00000000000000000001-%s-1-needs_input.json", run); filepath.Base(p) != want {
		t.Errorf("path %s, want %s", p, want)
	}
	files, bad, err := List(dir)
	if err != nil || len(bad) != 0 || len(files) != 1 || files[0].Signal.Kind != wire.SignalNeedsInput {
		t.Fatalf("list: %+v, bad %+v, %v", files, bad, err)
	}
}
