package server

import (
	"context"
	"sync"
	"time"

	"pam/internal/lifecycle"
	"pam/internal/provider"
	"pam/internal/store"
	"pam/internal/wire"
)

// Continue when a limit resets (docs/architecture.md#continue-when-a-limit-resets):
// a running agent stopped at a usage limit (rate_limited with a
// resets_at) whose project has auto_continue is sent its provider's
// continue message once the limit resets, through a message's delivery,
// once per reset.

// defaultContinueTick is how often the active server looks for limits
// that have reset.
const defaultContinueTick = 5 * time.Second

// continuer makes the passes of ContinueLimited one at a time, so that a
// run is never continued twice for a reset by two passes at once.
type continuer struct{ mu sync.Mutex }

// closeLimitMenu closes a usage limit's menu that is still open on the
// run's screen (the latest reading is the limit with choices): Claude
// Code, as a subscriber, shows "What do you want to do? 1. Stop and wait
// for limit to reset / 2. Upgrade your plan", which would take the
// continue message's keys as its own and its Enter as a choice. Escape
// cancels it (the menus say "Esc to cancel") and leaves the agent at its
// prompt; the pane is given two capture intervals to show that. Nothing
// is pressed when no menu shows: an Escape typed into a plain prompt
// could change what follows it. An error is the host's going away.
func (s *Server) closeLimitMenu(ctx context.Context, r wire.Run) error {
	sc, ok := s.opts.Fleet.Screen(r.ID)
	if !ok || sc.HostID != *r.HostID || sc.Attempt != r.Attempt || sc.Attention != wire.AttentionRateLimited ||
		sc.Detail == nil || len(sc.Detail.Choices) == 0 {
		return nil
	}
	before := s.opts.Fleet.Pane(r.ID).Seq
	if err := s.opts.Fleet.Send(*r.HostID, wire.SendKeysFrame{RunID: r.ID, Attempt: wire.IntPtr(r.Attempt),
		Keys: []wire.Key{{Key: "Escape"}}}); err != nil {
		return err
	}
	deadline := time.Now().Add(2 * s.opts.CaptureInterval)
	for s.opts.Fleet.Pane(r.ID).Seq <= before && time.Now().Before(deadline) && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(panePoll):
		}
	}
	return nil
}

// RunContinue runs ContinueLimited every ContinueTick until ctx ends
// (then it returns nil): the duty of the active server, which serve runs
// beside the dispatcher.
func (s *Server) RunContinue(ctx context.Context) error {
	t := time.NewTicker(s.opts.ContinueTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.ContinueLimited(ctx)
		}
	}
}

// ContinueLimited sends every run whose limit has reset
// (lifecycle.ContinueDue at the server's clock) its provider's continue
// message (the one of the catalog of the run's host, as its worker
// reported it, else the built-in's), journaled as run.message by actor
// pam with the resets_at it answers; it returns how many it sent. A run whose host is not
// connected waits for a later pass.
func (s *Server) ContinueLimited(ctx context.Context) int {
	s.continuer.mu.Lock()
	defer s.continuer.mu.Unlock()
	limited, err := s.store.LimitedRuns(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("look for limits that reset", "err", err)
		}
		return 0
	}
	now := s.opts.Clock()
	sent := 0
	for _, l := range limited {
		r := l.Run
		var resets *time.Time
		if r.AttentionDetail != nil {
			resets = r.AttentionDetail.ResetsAt
		}
		due := lifecycle.ContinueDue(lifecycle.LimitReset{Status: r.Status, Attention: r.Attention, ResetsAt: resets,
			AutoContinue: l.AutoContinue, Continued: l.Continued}, now)
		if !due || r.HostID == nil || !s.opts.Fleet.Connected(*r.HostID) {
			continue
		}
		// The message of the host's own catalog, else the built-in's.
		text := provider.BuiltinContinueMessage(r.Provider)
		if l.ContinueMessage != nil && *l.ContinueMessage != "" {
			text = *l.ContinueMessage
		}
		if err := s.closeLimitMenu(ctx, r); err != nil {
			s.log.Warn("continue after a limit reset", "run_id", r.ID, "err", err)
			continue
		}
		delivery, err := s.deliver(ctx, r, text, store.ActorPam, map[string]any{"resets_at": resets.UTC().Format(time.RFC3339Nano)})
		if err != nil || ctx.Err() != nil {
			s.log.Warn("continue after a limit reset", "run_id", r.ID, "err", err)
			continue
		}
		s.log.Info("continued after a limit reset", "run_id", r.ID, "attempt", r.Attempt, "resets_at", resets, "delivery", delivery)
		sent++
	}
	return sent
}
