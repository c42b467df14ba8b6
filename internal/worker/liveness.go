package worker

import (
	"context"
	"time"

	"pam/internal/tmux"
	"pam/internal/wire"
)

// livenessLoop is the cheap timer of seed 010: every LivenessInterval (and
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
	}
}

// checkLiveness forgets the live runs whose session vanished and reports
// each, once the orchestrator confirms the run is still running here
// (the session of a run that finished normally ends by itself after its
// hold-open). When every live session vanished at once with the tmux
// server, and there were several, the server crashed: tmux_crash. One
// session alone cannot be told apart from a kill-session: session_lost.
func (w *agent) checkLiveness(ctx context.Context) {
	w.rs.judge.Lock()
	defer w.rs.judge.Unlock()
	list, err := w.tm.ListSessions(ctx)
	if err != nil {
		w.log.Warn("liveness: list sessions", "err", err)
		return
	}
	present := map[tmux.SessionName]tmux.Session{}
	for _, s := range list {
		present[s.Name] = s
	}
	type gone struct {
		r       *run
		gen     uint64
		attempt int
	}
	var vanished []gone
	var dead []tmux.Session
	live := 0
	w.mu.Lock()
	for _, r := range w.runs {
		if r.state != stateLive {
			continue
		}
		live++
		s, ok := present[r.name]
		switch {
		case !ok || s.RunID != r.id || s.Attempt != r.attempt:
			vanished = append(vanished, gone{r, r.gen, r.attempt})
		case s.PaneDead:
			dead = append(dead, s)
		}
	}
	w.mu.Unlock()
	if len(vanished) == 0 && len(dead) == 0 {
		return
	}
	state := wire.StateSessionLost
	if len(list) == 0 && len(vanished) >= 2 && len(vanished) == live {
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
