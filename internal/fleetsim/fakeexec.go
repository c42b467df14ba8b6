package fleetsim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"pam/internal/spool"
	"pam/internal/tmux"
	"pam/internal/wire"
	"pam/internal/worker"
	"pam/internal/wrap"
)

// fakeSessions is the executor of a simulated host (worker.Options.
// Sessions): a session is a goroutine standing for `pam exec run` and
// its CLI, with no tmux and no process. Its "wrapper" reads the dispatch
// file the worker wrote and posts started, and later finished, with the
// real wrapper's sender (its retries, and the spool the worker replays
// when serve could not be reached). Its screen changes every
// SnapshotInterval, so the worker's capture loop uplinks snapshots.
type fakeSessions struct {
	sim       *sim
	workerDir string // <data>/worker: the dispatch files and the spool
	http      *http.Client

	ctx    context.Context // ends with the host: wrappers stop
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	sessions map[tmux.SessionName]*fakeSession
}

// fakeSession is one fake session.
type fakeSession struct {
	spawn tmux.Spawn
	born  time.Time
	phase time.Duration // where in SnapshotInterval its screen changes
	// end takes the exit code of the CLI's end (once: finished guards
	// it); gone is closed when the session is killed; done when its
	// wrapper is over (its finished posted, or nothing more to post).
	end      chan int
	gone     chan struct{}
	done     chan struct{}
	finished bool
	screen   int // the last screen captured, -1 before the first
}

var _ worker.Executor = (*fakeSessions)(nil)

func newFakeSessions(s *sim, workerDir string) *fakeSessions {
	tr := &http.Transport{
		Proxy:               nil, // loopback only, whatever the environment says
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     90 * time.Second,
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &fakeSessions{sim: s, workerDir: workerDir, http: &http.Client{Transport: tr},
		ctx: ctx, cancel: cancel, sessions: map[tmux.SessionName]*fakeSession{}}
}

// close stops the wrappers still running and lets their connections go.
func (e *fakeSessions) close() {
	e.cancel()
	e.wg.Wait()
	e.http.CloseIdleConnections()
}

func (e *fakeSessions) Harden(context.Context) error { return nil }

// NewSession starts a fake session and its wrapper.
func (e *fakeSessions) NewSession(_ context.Context, sp tmux.Spawn) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.sessions[sp.Name]; ok {
		return tmux.ErrSessionExists
	}
	s := &fakeSession{spawn: sp, born: time.Now(), end: make(chan int, 1), gone: make(chan struct{}),
		done: make(chan struct{}), screen: -1}
	if d := e.sim.o.SnapshotInterval; d > 0 {
		s.phase = rand.N(d)
	}
	e.sessions[sp.Name] = s
	e.wg.Go(func() { e.wrapper(s) })
	return nil
}

// wrapper posts started at once and finished with the exit code the
// session ends with; a killed session posts nothing more (its wrapper
// was hung up, as tmux's kill-session does to `pam exec run`).
func (e *fakeSessions) wrapper(s *fakeSession) {
	defer close(s.done)
	d, err := wrap.ReadDispatch(e.workerDir, s.spawn.RunID)
	if err != nil {
		e.sim.count("dispatch file unreadable")
		e.sim.noteErr("fake wrapper", err.Error())
		return
	}
	sender := &wrap.Sender{Client: e.http, APIURL: d.APIURL, Token: d.SignalToken, RunID: d.RunID, SpoolDir: spool.Dir(e.workerDir)}
	e.post(sender, d.Attempt, wire.SignalStarted, nil)
	select {
	case code := <-s.end:
		e.post(sender, d.Attempt, wire.SignalFinished, map[string]int{"exit_code": code})
	case <-s.gone:
	case <-e.ctx.Done():
	}
}

// post sends one signal as the wrapper does and counts what became of
// it; a spooled one is counted when the worker replays it.
func (e *fakeSessions) post(sender *wrap.Sender, attempt int, kind string, payload any) {
	now := time.Now().UTC()
	sig := wire.Signal{Kind: kind, Attempt: &attempt, Source: wire.SourceWrapper, Timestamp: &now}
	if payload != nil {
		sig.Payload, _ = json.Marshal(payload)
	}
	out := sender.Send(e.ctx, sig)
	switch {
	case out.Delivered():
		e.sim.signalResult(kind, out.Result, "")
	case out.Refused != nil:
		e.sim.signalResult(kind, "", "refused "+out.Refused.Code)
		e.sim.noteErr("signal "+kind, out.Refused.Error())
	case out.Spooled != "":
		e.sim.count("signal " + kind + " spooled")
	default:
		e.sim.signalResult(kind, "", "lost")
		e.sim.noteErr("signal "+kind, fmt.Sprint(out.Err))
	}
}

func (e *fakeSessions) ListSessions(context.Context) ([]tmux.Session, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]tmux.Session, 0, len(e.sessions))
	for _, s := range e.sessions {
		out = append(out, tmux.Session{Name: s.spawn.Name, RunID: s.spawn.RunID, Attempt: s.spawn.Attempt, Instance: s.spawn.Instance})
	}
	return out, nil
}

// Capture is the session's screen, which moves on every
// SnapshotInterval; a screen that changed is counted as the snapshot the
// worker sends of it.
func (e *fakeSessions) Capture(_ context.Context, name tmux.SessionName) (string, error) {
	e.mu.Lock()
	s, ok := e.sessions[name]
	if !ok {
		e.mu.Unlock()
		return "", tmux.ErrNoSession
	}
	n := 0
	if d := e.sim.o.SnapshotInterval; d > 0 && !s.finished {
		n = int((time.Since(s.born) + s.phase) / d)
	}
	changed := n != s.screen
	s.screen = n
	e.mu.Unlock()
	if changed {
		e.sim.snapshotsSent.Add(1)
	}
	return fmt.Sprintf("simulated session of run %s\nattempt %d, screen %d\n$ ", s.spawn.RunID, s.spawn.Attempt, n), nil
}

// SendKeys: nothing types into a simulated session.
func (e *fakeSessions) SendKeys(context.Context, tmux.SessionName, []wire.Key) error { return nil }

// KillSession ends a session at once: its wrapper posts nothing more.
func (e *fakeSessions) KillSession(_ context.Context, name tmux.SessionName) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.sessions[name]
	if !ok {
		return tmux.ErrNoSession
	}
	delete(e.sessions, name)
	close(s.gone)
	return nil
}

// Stop ends a session as the stop ladder's SIGTERM ends a CLI: its
// wrapper posts finished with 143 and the session closes. force kills.
func (e *fakeSessions) Stop(ctx context.Context, name tmux.SessionName, _ time.Duration, force bool) error {
	e.mu.Lock()
	s, ok := e.sessions[name]
	if ok && !force && !s.finished {
		s.finished = true
		s.end <- 143
	}
	e.mu.Unlock()
	if !ok {
		return nil
	}
	if !force {
		select {
		case <-s.done:
		case <-ctx.Done():
		}
	}
	if err := e.KillSession(ctx, name); err != nil && !errors.Is(err, tmux.ErrNoSession) {
		return err
	}
	return nil
}

// Attach: nobody attaches to a simulated session.
func (e *fakeSessions) Attach(tmux.SessionName, int, int) (worker.Attachment, error) {
	return nil, errors.New("a simulated session has no terminal")
}

// finishAll ends every live session's CLI with exit code 0: each wrapper
// posts finished, and the session stays (hold-open) until the worker
// removes it.
func (e *fakeSessions) finishAll() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.sessions {
		if !s.finished {
			s.finished = true
			s.end <- 0
		}
	}
}

// live is how many sessions run a CLI here.
func (e *fakeSessions) live() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, s := range e.sessions {
		if !s.finished {
			n++
		}
	}
	return n
}
