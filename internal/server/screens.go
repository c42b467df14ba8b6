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
func (u *uplinkSession) screen(ctx context.Context, f wire.Frame) {
	var detail *wire.AttentionDetail
	if f.Attention != wire.AttentionNone {
		detail = &wire.AttentionDetail{Source: wire.AttentionSourceScreen, Text: f.Text, Choices: slices.Clone(f.Choices), ResetsAt: f.ResetsAt}
		if detail.Choices == nil {
			detail.Choices = []wire.Choice{}
		}
	}
	attempt := *f.Attempt
	current := false
	_, _, err := u.s.store.ChangeAttention(ctx, f.RunID, func(r lifecycle.Run) lifecycle.Decision {
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
