package server

import (
	"context"
	"slices"
	"time"

	"pam/internal/fleet"
	"pam/internal/lifecycle"
	"pam/internal/wire"
)

// screen takes a worker's screen frame (docs/architecture.md#the-screen-is-read):
// the run's attention follows what its screen asks (lifecycle.Screen: from
// the run's current host and attempt only), and the reading is kept in
// memory for the hook's needs_input of the same attempt and for whoever
// asks whether the agent is busy.
func (u *uplinkSession) screen(ctx context.Context, f wire.ScreenFrame) {
	var detail *wire.AttentionDetail
	if f.Attention != wire.AttentionNone {
		detail = &wire.AttentionDetail{Source: wire.AttentionSourceScreen, Text: f.Text, Choices: slices.Clone(f.Choices), ResetsAt: f.ResetsAt}
		if detail.Choices == nil {
			detail.Choices = []wire.Choice{}
		}
	}
	attempt := *f.Attempt
	if f.Attention == wire.AttentionNone && u.answeredByLink(ctx, f, attempt) {
		return
	}
	current := false
	_, _, err := u.s.runs.ChangeAttention(ctx, f.RunID, func(r lifecycle.Run) lifecycle.Decision {
		current = r.HostID == u.host.ID && r.Attempt == attempt
		return lifecycle.Screen(r, u.host.ID, attempt, f.Attention, detail)
	})
	if err != nil {
		u.refuse(f, err)
		return
	}
	if current {
		u.s.opts.Fleet.PutScreen(f.RunID, fleet.Screen{HostID: u.host.ID, Attempt: attempt, Attention: f.Attention, Working: f.Working,
			Detail: detail, At: time.Now()})
	}
}

// screenQuestion is the question the server last read on a run's screen
// from host at attempt, for a needs_input signal to carry; nil when the
// screen asked none.
func (s *Server) screenQuestion(runID, host string, attempt *int) *wire.AttentionDetail {
	sc, ok := s.opts.Fleet.Screen(runID)
	if !ok || attempt == nil || sc.HostID != host || sc.Attempt != *attempt || sc.Attention != wire.AttentionNeedsInput {
		return nil
	}
	return sc.Detail
}

// answeredByLink: while an answer URL's key is being checked, the
// question leaving the screen is that answer's doing, journaled as such
// (source answer, the channel as actor) rather than as the screen's. It
// reports whether it cleared the question.
func (u *uplinkSession) answeredByLink(ctx context.Context, f wire.ScreenFrame, attempt int) bool {
	l, ok := u.s.linkAnswers.get(f.RunID)
	if !ok || l.attempt != attempt {
		return false
	}
	r, changed, err := u.s.runs.ClearAnsweredBy(ctx, f.RunID, attempt, wire.AttentionNeedsInput, l.question, wire.AttentionSourceAnswer, l.channel)
	if err != nil || !changed || r.HostID == nil || *r.HostID != u.host.ID {
		return false
	}
	u.s.opts.Fleet.PutScreen(f.RunID, fleet.Screen{HostID: u.host.ID, Attempt: attempt, Attention: f.Attention, Working: f.Working, At: time.Now()})
	return true
}

// askKeptScreen applies, once a run is running, the question its screen
// asked before: a CLI that asks as it starts draws the question while the
// run is still spawning, when attention is not taken (only a running run
// has one), and the worker sends a screen only when it changes. Without
// this the question would stay unseen until the screen changed again.
// It runs apart: it is called from the group commit's goroutine.
func (s *Server) askKeptScreen(runID, hostID string, attempt int) {
	sc, ok := s.opts.Fleet.Screen(runID)
	if !ok || sc.HostID != hostID || sc.Attempt != attempt ||
		(sc.Attention != wire.AttentionNeedsInput && sc.Attention != wire.AttentionRateLimited) {
		return
	}
	s.bg.goFunc(func() {
		ctx, cancel := context.WithTimeout(s.streamCtx, 10*time.Second)
		defer cancel()
		_, _, err := s.runs.ChangeAttention(ctx, runID, func(r lifecycle.Run) lifecycle.Decision {
			// The newest reading: a later screen frame may have come.
			now, ok := s.opts.Fleet.Screen(runID)
			if !ok || now.HostID != hostID || now.Attempt != attempt {
				return lifecycle.Decision{}
			}
			return lifecycle.Screen(r, hostID, attempt, now.Attention, now.Detail)
		})
		if err != nil {
			s.log.Warn("the question a run asked as it started", "run_id", runID, "err", err)
		}
	})
}
