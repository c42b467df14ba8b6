package worker

import (
	"encoding/json"
	"errors"
	"os"
	"time"

	screenread "pam/internal/screen"
	"pam/internal/wire"
)

// readScreen reads the screen of a changed capture s of run r with its
// provider's patterns (docs/architecture.md#the-screen-is-read) and, when
// the reading is not the same as the last one of this attempt (prev, if
// same), uplinks it as a screen frame: once when a question (or a usage
// limit, or a busy agent) appears, changes or leaves the screen. A
// reading whose frame found no uplink is marked unsent, and greet sends
// it on the next connection. Called under snapMu, which orders screen
// frames with the snapshots and with greet.
func (w *agent) readScreen(r *run, s *snapshot, prev snapshot, same bool) {
	patterns := w.patterns(r)
	s.reading = screenread.Read(s.capture, patterns, s.at, time.Local)
	last := screenread.Reading{Attention: wire.AttentionNone}
	if same {
		last = prev.reading
		s.unsent = prev.unsent
	}
	w.mu.Lock()
	r.working = s.reading.Working
	w.mu.Unlock()
	if s.reading.Same(last) {
		return
	}
	err := w.send(screenFrame(r.id, s.attempt, s.reading))
	s.unsent = err != nil
	if err != nil && !errors.Is(err, errNotConnected) {
		w.log.Warn("screen not sent", "run_id", r.id, "err", err)
	}
}

// resendScreen is what greet sends of a live run's reading on a new
// uplink, after its snapshot: a reading that asks or says busy (a
// restarted server knows it again at once), or one whose change found no
// uplink. A plain reading already sent is not resent: it would clear
// what a hook set while the screen asked nothing.
func (s snapshot) resendScreen(runID string) (wire.ScreenFrame, bool) {
	if !s.unsent && !s.reading.Asks() && !s.reading.Working {
		return wire.ScreenFrame{}, false
	}
	return screenFrame(runID, s.attempt, s.reading), true
}

// screenFrame is a reading as a screen frame.
func screenFrame(runID string, attempt int, r screenread.Reading) wire.ScreenFrame {
	f := wire.ScreenFrame{RunID: runID, Attempt: wire.IntPtr(attempt), Attention: r.Attention, Working: r.Working}
	if r.Asks() {
		f.Text, f.Choices, f.ResetsAt = r.Text, r.Choices, r.ResetsAt
	}
	return f
}

// patterns are the screen patterns of r's provider: from its dispatch,
// or for an adopted run from its dispatch file, read once.
func (w *agent) patterns(r *run) *screenread.Patterns {
	w.mu.Lock()
	provider, read := r.provider, r.providerRead
	w.mu.Unlock()
	if !read {
		provider = w.dispatchedProvider(r.id)
		w.mu.Lock()
		r.provider, r.providerRead = provider, true
		w.mu.Unlock()
	}
	if w.o.Screens == nil || provider == "" {
		return nil
	}
	return w.o.Screens(provider)
}

// dispatchedProvider is the provider named in a run's dispatch file;
// "" when it cannot be read.
func (w *agent) dispatchedProvider(runID string) string {
	b, err := os.ReadFile(w.dispatchPath(runID))
	if err != nil {
		return ""
	}
	var d wire.Dispatch
	if json.Unmarshal(b, &d) != nil {
		return ""
	}
	return d.Provider
}
