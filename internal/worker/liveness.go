package worker

import (
	"context"
	"time"

	"pam/internal/tmux"
	"pam/internal/wire"
)

// livenessLoop is the cheap timer of docs/architecture.md#liveness: every LivenessInterval (and
// at once when a capture finds its session gone) one list-sessions call
// tells which live runs lost their session or their pane. It asks the
// orchestrator only when something vanished.
func (w *agent) livenessLoop(ctx context.Context) {
	t := time.NewTicker(w.o.LivenessInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.rs.livenessWake:
		}
		w.checkLiveness(ctx)
		w.o.hooks.pass(func(h *hooks) func() { return h.livenessPass })
	}
}

// checkLiveness forgets the live runs whose session vanished and reports
// each, once the orchestrator confirms the run is still running here
// (the session of a run that finished normally ends by itself after its
// hold-open). When every live session vanished at once with the tmux
// server, and there were several, the server crashed: tmux_crash. One
// session alone cannot be told apart from a kill-session: session_lost,
// as is every vanished PTY holder (each session has its own).
func (w *agent) checkLiveness(ctx context.Context) {
	w.rs.judge.Lock()
	defer w.rs.judge.Unlock()
	// Which runs are live is read before the sessions are listed: a run
	// whose spawn completes while the list is taken has a session the list
	// may not show, and judging it from that list would report a healthy
	// session lost (and have it run twice). A run live before the list
	// started had its session before it, so its absence is real.
	before := w.runMarks()
	// A session of another instance holding a run's name is not the
	// run's session.
	list, err := w.ownSessions(ctx)
	if err != nil {
		if ctx.Err() == nil { // not a failure when the worker is stopping
			w.log.Warn("liveness: list sessions", "err", err)
		}
		return
	}
	w.o.hooks.pass(func(h *hooks) func() { return h.livenessListed })
	present := map[tmux.SessionName]tmux.Session{}
	for _, s := range list {
		present[s.Name] = s
	}
	var vanished []runMark
	var dead []tmux.Session
	live := 0
	for _, m := range before {
		if m.state != stateLive {
			continue
		}
		live++
		s, ok := present[m.r.name]
		switch {
		case !ok || s.RunID != m.r.id || s.Attempt != m.attempt:
			vanished = append(vanished, m)
		case s.PaneDead:
			dead = append(dead, s)
		}
	}
	if len(vanished) == 0 && len(dead) == 0 {
		return
	}
	state := wire.StateSessionLost
	// Only tmux has a server whose death takes every session with it; PTY
	// holders are one per session, and each lost one is a session lost.
	if s, ok := w.tm.(interface{ sharedServer() bool }); ok && s.sharedServer() && len(list) == 0 && len(vanished) >= 2 && len(vanished) == live {
		state = wire.StateTmuxCrash
		w.report("tmux server gone with every session", "sessions", len(vanished))
	}
	for _, g := range vanished {
		w.log.Info("session vanished", "run_id", g.r.id, "attempt", g.attempt, "session", g.r.name.String())
		w.forget(g.r, g.gen, false)
	}
	hostID := w.currentHostID()
	for _, g := range vanished {
		detail := "session " + g.r.name.String() + " vanished"
		if state == wire.StateTmuxCrash {
			detail += " with the tmux server and every other session"
		}
		w.confirmLost(ctx, g.r.id, g.attempt, hostID, state, detail, false)
	}
	for _, s := range dead {
		w.zombie(ctx, s, hostID)
	}
}

// runMark is a run as it stood at one moment: the incarnation (gen),
// attempt and state a judgement is made from.
type runMark struct {
	r       *run
	gen     uint64
	attempt int
	state   runState
}

// runMarks reads every run's incarnation at once, by run id.
func (w *agent) runMarks() map[string]runMark {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := make(map[string]runMark, len(w.runs))
	for id, r := range w.runs {
		m[id] = runMark{r: r, gen: r.gen, attempt: r.attempt, state: r.state}
	}
	return m
}
