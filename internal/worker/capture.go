package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	screenread "pam/internal/screen"
	"pam/internal/tmux"
	"pam/internal/wire"
)

// idleFactor caps the adaptive slowdown: an idle pane is polled at most
// every idleFactor × CaptureInterval.
const idleFactor = 5

// maxLogChunk bounds the text of one log_chunk frame.
const maxLogChunk = wire.MaxLogChunk

// snapshot is the latest capture of a run, kept in the LRU for change
// detection and for the resend on reconnect.
type snapshot struct {
	attempt int
	hash    uint64
	capture string
	at      time.Time
	// reading is what the capture shows the agent waiting for
	// (screens.go); unsent, that its last change found no uplink.
	reading screenread.Reading
	unsent  bool
}

func (s snapshot) frame(runID string) wire.SnapshotFrame {
	at := s.at
	return wire.SnapshotFrame{RunID: runID, Attempt: wire.IntPtr(s.attempt), Capture: s.capture, Timestamp: &at}
}

// Watched panes (docs/architecture.md#capture-by-control-mode): while a
// viewer watches a run's pane (pane_watch), its change mark is read every
// hotInterval, and it is captured when it may have changed, at most once
// per hotGap: output is captured within hotGap + hotInterval (100 ms),
// and a watched pane costs at most 1/hotGap (13) captures a second.
const (
	hotInterval = 25 * time.Millisecond
	hotGap      = 75 * time.Millisecond
)

// captureLoop is the single ticker of every session's capture-pane poll.
// A pane is captured when due; a changed capture is stored, logged and
// uplinked. With tmux, the captures go through one control-mode client,
// and a pane whose change mark says it cannot have changed is not
// captured at all (docs/architecture.md#capture-by-control-mode). After
// IdleAfter without change a pane's interval doubles, up to idleFactor ×
// CaptureInterval; any change (or input) resets it. The same quiet spell
// marks the run idle (run_state idle, once per spell,
// docs/architecture.md#attention); the orchestrator clears it on the
// next change. A second ticker runs while some pane is watched.
func (w *agent) captureLoop(ctx context.Context) {
	base := w.o.CaptureInterval
	t := time.NewTicker(base)
	defer t.Stop()
	var hot *time.Ticker
	var hotC <-chan time.Time
	defer func() {
		if hot != nil {
			hot.Stop()
		}
	}()
	for {
		watching := false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.captureDue(ctx, base)
			continue
		case <-w.hotWake:
			watching = true
		case <-hotC:
			watching = w.captureWatched(ctx, base)
		}
		switch {
		case watching && hot == nil && base > hotGap:
			hot = time.NewTicker(hotInterval)
			hotC = hot.C
		case !watching && hot != nil:
			hot.Stop()
			hot, hotC = nil, nil
		}
	}
}

type due struct {
	r       *run
	gen     uint64
	attempt int
	name    tmux.SessionName
}

func (w *agent) captureDue(ctx context.Context, base time.Duration) {
	now := time.Now()
	var list []due
	var live []tmux.SessionName
	w.mu.Lock()
	for _, r := range w.runs {
		if r.state != stateLive {
			continue
		}
		live = append(live, r.name)
		// Half a tick of slack, so a pane due just after this tick is not
		// left for a whole extra one.
		if !r.next.After(now.Add(base / 2)) {
			list = append(list, due{r, r.gen, r.attempt, r.name})
		}
	}
	w.mu.Unlock()
	bc, batched := w.tm.(batchCapturer)
	if !batched {
		for _, d := range list {
			if ctx.Err() != nil {
				return
			}
			out, err := w.tm.Capture(ctx, d.name)
			w.captured(d, base, out, err)
		}
		return
	}
	if len(list) == 0 {
		return
	}
	// One round: the change marks of every live pane, then one batch of
	// captures of the due panes that may have changed. A pane that cannot
	// have changed counts as captured unchanged.
	bc.refresh(ctx, live)
	var todo []due
	var names []tmux.SessionName
	for _, d := range list {
		if bc.mayHaveChanged(d.name) {
			todo = append(todo, d)
			names = append(names, d.name)
			continue
		}
		w.schedule(d, base, false, time.Now())
	}
	if len(names) == 0 {
		return
	}
	for i, c := range bc.captureAll(ctx, names) {
		if ctx.Err() != nil {
			return
		}
		w.captured(todo[i], base, c.Text, c.Err)
	}
}

// captured takes one capture of a due pane: a changed screen is recorded
// and uplinked, and the pane's next capture scheduled.
func (w *agent) captured(d due, base time.Duration, out string, err error) {
	if errors.Is(err, tmux.ErrNoSession) {
		// The liveness check decides what it means (and reports it).
		w.pokeLiveness()
		return
	}
	if err != nil {
		w.log.Warn("capture", "run_id", d.r.id, "err", err)
		return
	}
	at := time.Now()
	w.schedule(d, base, w.record(d.r, d.attempt, out, at), at)
	w.setLastCapture(d, at)
}

// captureWatched is one round of the watched panes: the change marks of
// those watched now, then one batch of captures of those that may have
// changed and were not captured within hotGap. A changed screen counts
// as a change of the regular schedule; an unchanged one leaves it be.
// It reports whether any pane is still watched.
func (w *agent) captureWatched(ctx context.Context, base time.Duration) bool {
	bc, ok := w.tm.(batchCapturer)
	if !ok {
		return false
	}
	now := time.Now()
	var todo []due
	var names []tmux.SessionName
	watched := false
	w.mu.Lock()
	for _, r := range w.runs {
		if r.state != stateLive || !r.watchedUntil.After(now) {
			continue
		}
		watched = true
		if now.Sub(r.lastCapture) >= hotGap {
			todo = append(todo, due{r, r.gen, r.attempt, r.name})
			names = append(names, r.name)
		}
	}
	w.mu.Unlock()
	if len(todo) == 0 {
		return watched
	}
	if !bc.refreshPanes(ctx, names) {
		return true // no control client: the regular rounds go on alone
	}
	names = names[:0]
	list := todo[:0]
	for _, d := range todo {
		if bc.mayHaveChanged(d.name) {
			list = append(list, d)
			names = append(names, d.name)
		}
	}
	for i, c := range bc.captureAll(ctx, names) {
		if ctx.Err() != nil {
			return true
		}
		d := list[i]
		if errors.Is(c.Err, tmux.ErrNoSession) {
			w.pokeLiveness()
			continue
		}
		if c.Err != nil {
			w.log.Warn("capture", "run_id", d.r.id, "err", c.Err)
			continue
		}
		at := time.Now()
		if w.record(d.r, d.attempt, c.Text, at) {
			w.schedule(d, base, true, at)
		}
		w.setLastCapture(d, at)
	}
	return true
}

func (w *agent) setLastCapture(d due, at time.Time) {
	w.mu.Lock()
	if d.r.gen == d.gen {
		d.r.lastCapture = at
	}
	w.mu.Unlock()
}

// watchPane marks a run's pane watched for PaneWatchTTL (pane_watch),
// and wakes the capture loop to start its watched rounds.
func (w *agent) watchPane(f wire.PaneWatchFrame) {
	w.mu.Lock()
	r := w.runs[f.RunID]
	ok := r != nil && r.state == stateLive && f.Attempt != nil && *f.Attempt == r.attempt
	if ok {
		r.watchedUntil = time.Now().Add(wire.PaneWatchTTL)
	}
	w.mu.Unlock()
	if !ok {
		return
	}
	select {
	case w.hotWake <- struct{}{}:
	default:
	}
}

// schedule sets a pane's next capture after one at at: at full speed
// after a change, ever slower while it stays the same past IdleAfter,
// which also reports the run idle once per quiet spell.
func (w *agent) schedule(d due, base time.Duration, changed bool, at time.Time) {
	idle := false
	w.mu.Lock()
	if d.r.gen == d.gen {
		if changed {
			d.r.lastChange, d.r.interval, d.r.idleSent = at, base, false
		} else if quiet := at.Sub(d.r.lastChange); quiet >= w.o.IdleAfter {
			d.r.interval = min(d.r.interval*2, idleFactor*base)
			// A busy agent (its screen says working) is not idle.
			if !d.r.idleSent && !d.r.ended && !d.r.working {
				d.r.idleSent, idle = true, true
			}
		}
		d.r.next = at.Add(d.r.interval)
	}
	w.mu.Unlock()
	if idle {
		w.reportIdle(d, at)
	}
}

// reportIdle sends run_state idle for a pane quiet since its last change.
// It is not queued for a later uplink like other run_state frames: what
// the pane does meanwhile would make it stale. Without an uplink the
// spell is not marked reported, so the next capture tries again.
func (w *agent) reportIdle(d due, at time.Time) {
	w.mu.Lock()
	quiet := at.Sub(d.r.lastChange).Round(time.Second)
	w.mu.Unlock()
	f := wire.RunStateFrame{RunID: d.r.id, Attempt: wire.IntPtr(d.attempt), State: wire.StateIdle,
		Detail: fmt.Sprintf("pane unchanged for %s", quiet)}
	if err := w.send(f); err != nil {
		w.mu.Lock()
		if d.r.gen == d.gen {
			d.r.idleSent = false
		}
		w.mu.Unlock()
		if !errors.Is(err, errNotConnected) {
			w.log.Warn("idle not reported", "run_id", d.r.id, "err", err)
		}
	}
}

// inputArrived is input into a run's pane (keys or an attach relay): the
// screen will likely change, so it is looked at again soon at full speed,
// and the quiet spell that may have marked it idle ends.
func (w *agent) inputArrived(runID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.runs[runID]
	if r == nil || r.state != stateLive {
		return
	}
	now := time.Now()
	r.next, r.interval, r.lastChange, r.idleSent = now, w.o.CaptureInterval, now, false
}

// record compares a capture of run r with the cached one and, when it
// changed, caches it, appends it to the run log and uplinks it, and reads
// the screen: a reading that differs from the last one is uplinked too
// (screens.go). It reports whether the capture changed.
func (w *agent) record(r *run, attempt int, capture string, at time.Time) bool {
	runID := r.id
	h := fnv.New64a()
	_, _ = io.WriteString(h, capture)
	sum := h.Sum64()
	w.snapMu.Lock()
	defer w.snapMu.Unlock()
	prev, ok := w.snaps.Get(runID)
	if ok && prev.attempt == attempt && prev.hash == sum {
		return false
	}
	s := snapshot{attempt: attempt, hash: sum, capture: capture, at: at.UTC()}
	if err := w.appendLog(runID, s); err != nil {
		w.log.Warn("run log", "run_id", runID, "err", err)
	}
	if err := w.send(s.frame(runID)); err != nil && !errors.Is(err, errNotConnected) {
		w.log.Warn("snapshot not sent", "run_id", runID, "err", err)
	}
	w.readScreen(r, &s, prev, ok && prev.attempt == attempt)
	w.snaps.Add(runID, s)
	return true
}

func (w *agent) logPath(runID string) string {
	return filepath.Join(w.o.DataDir, "runs", runID+".log")
}

// appendLog appends a timestamp line and the pane text to the run's log,
// rotating it to <run_id>.log.1 first when it would pass LogMaxBytes.
func (w *agent) appendLog(runID string, s snapshot) error {
	entry := fmt.Sprintf("--- %s attempt %d ---\n%s", s.at.Format(time.RFC3339Nano), s.attempt, s.capture)
	if len(entry) > 0 && entry[len(entry)-1] != '\n' {
		entry += "\n"
	}
	path := w.logPath(runID)
	if st, err := os.Stat(path); err == nil && st.Size() > 0 && st.Size()+int64(len(entry)) > w.o.LogMaxBytes {
		if err := os.Rename(path, path+".1"); err != nil {
			return fmt.Errorf("rotate: %w", err)
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(entry); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// serveLog answers a log_request: the run log from offset to its current
// end, in log_chunk frames of at most 256 KiB of text, the last with eof.
// Chunks end on UTF-8 boundaries so each is valid text.
func (w *agent) serveLog(conn *websocket.Conn, req wire.LogRequestFrame) {
	chunk := func(text string, eof bool) error {
		now := time.Now().UTC()
		return w.sendLogChunk(conn, wire.LogChunkFrame{RunID: req.RunID, RequestID: req.RequestID, Text: text, EOF: eof, Timestamp: &now})
	}
	var offset int64 // req is valid: its run id can name a file
	if req.Offset != nil && *req.Offset > 0 {
		offset = *req.Offset
	}
	f, err := os.Open(w.logPath(req.RunID))
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			w.log.Warn("log_request", "run_id", req.RunID, "err", err)
		}
		_ = chunk("", true)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || offset >= st.Size() {
		_ = chunk("", true)
		return
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		_ = chunk("", true)
		return
	}
	// Up to the size seen now: what is appended meanwhile is for the
	// next request, from the offset this one ends at.
	r := io.LimitReader(f, st.Size()-offset)
	buf := make([]byte, maxLogChunk)
	have := 0 // bytes of a split rune carried from the previous chunk
	for {
		n, err := io.ReadFull(r, buf[have:])
		b := buf[:have+n]
		done := err != nil
		if done && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			w.log.Warn("log_request: read", "run_id", req.RunID, "err", err)
		}
		cut := len(b)
		if !done {
			cut = runeCut(b)
		}
		if err := chunk(string(b[:cut]), done); err != nil {
			w.log.Warn("log_chunk", "run_id", req.RunID, "err", err)
			return
		}
		if done {
			return
		}
		have = copy(buf, b[cut:])
	}
}

// runeCut is the largest prefix length of b that does not split a UTF-8
// sequence at its end.
func runeCut(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if utf8.FullRune(b[i:]) {
				return len(b)
			}
			return i
		}
	}
	return len(b)
}

// sendLogChunk sends f, halving its text (on a rune boundary) while the
// encoded frame is too big: JSON escapes control characters, so 256 KiB of
// ANSI-heavy text can encode past the 1 MiB frame bound.
func (w *agent) sendLogChunk(conn *websocket.Conn, f wire.LogChunkFrame) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	if len(b) <= wire.MaxFrame || len(f.Text) < 2 {
		return w.sendOn(conn, f)
	}
	half := runeCut([]byte(f.Text[:len(f.Text)/2]))
	if half == 0 {
		half = len(f.Text) / 2
	}
	first, second := f, f
	first.Text, first.EOF = f.Text[:half], false
	second.Text = f.Text[half:]
	if err := w.sendLogChunk(conn, first); err != nil {
		return err
	}
	return w.sendLogChunk(conn, second)
}
