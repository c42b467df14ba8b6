package worker

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"pam/internal/tmux"
	"pam/internal/wire"
)

// memExecutor is an Executor without processes: a session is a map
// entry whose screen says which run it holds.
type memExecutor struct {
	mu       sync.Mutex
	sessions map[tmux.SessionName]tmux.Spawn
	created  int
}

func (e *memExecutor) Harden(context.Context) error { return nil }

func (e *memExecutor) NewSession(_ context.Context, s tmux.Spawn) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.sessions[s.Name]; ok {
		return tmux.ErrSessionExists
	}
	e.sessions[s.Name] = s
	e.created++
	return nil
}

func (e *memExecutor) ListSessions(context.Context) ([]tmux.Session, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []tmux.Session
	for _, s := range e.sessions {
		out = append(out, tmux.Session{Name: s.Name, RunID: s.RunID, Attempt: s.Attempt, Instance: s.Instance})
	}
	return out, nil
}

func (e *memExecutor) Capture(_ context.Context, name tmux.SessionName) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.sessions[name]
	if !ok {
		return "", tmux.ErrNoSession
	}
	return "fake pam: in memory, run " + s.RunID, nil
}

func (e *memExecutor) SendKeys(context.Context, tmux.SessionName, []wire.Key) error { return nil }

func (e *memExecutor) KillSession(_ context.Context, name tmux.SessionName) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.sessions[name]; !ok {
		return tmux.ErrNoSession
	}
	delete(e.sessions, name)
	return nil
}

func (e *memExecutor) Stop(ctx context.Context, name tmux.SessionName, _ time.Duration, _ bool) error {
	if err := e.KillSession(ctx, name); err != nil && !errors.Is(err, tmux.ErrNoSession) {
		return err
	}
	return nil
}

func (e *memExecutor) Attach(tmux.SessionName, int, int) (Attachment, error) {
	return nil, errors.New("no terminal in memory")
}

// Options.Sessions runs the worker's sessions in place of tmux: a
// dispatch is acked, its session made by the given executor and its
// screen uplinked, and tmux is never called.
func TestOptionsSessions(t *testing.T) {
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	ex := &memExecutor{sessions: map[tmux.SessionName]tmux.Spawn{}}
	h.opts.Sessions = ex
	h.start()
	const runID = "5e551075-0000-4000-8000-000000000001"
	snap, _ := h.spawnRun(runID, 1)
	if snap.Capture != "fake pam: in memory, run "+runID {
		t.Errorf("snapshot %q, want the in-memory session's screen", snap.Capture)
	}
	ex.mu.Lock()
	created := ex.created
	ex.mu.Unlock()
	if created != 1 {
		t.Errorf("%d sessions made by Options.Sessions, want 1", created)
	}
	if calls := h.tmuxCalls(); len(calls) > 0 {
		t.Errorf("tmux was called with Options.Sessions set: %q", calls)
	}
}
