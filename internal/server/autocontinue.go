package server

import (
	"context"
	"sync"
	"time"

	"pam/internal/lifecycle"
	"pam/internal/provider"
	"pam/internal/store"
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
// message, journaled as run.message by actor pam with the resets_at it
// answers; it returns how many it sent. A run whose host is not
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
		text := provider.BuiltinContinueMessage(r.Provider)
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
