package runs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"pam/internal/lifecycle"
	"pam/internal/store"
	"pam/internal/wire"
)

// MarkHostsLost fails, with failure_reason host_lost and through the
// restart policy, the non-terminal runs of every host that is not online
// and has been silent for lostAfter, counted from the latest of its
// last_seen_at, its last online transition and serveStart. It journals
// worker.lost once per host it acted on and returns how many runs failed.
func (s *Service) MarkHostsLost(ctx context.Context, lostAfter time.Duration, serveStart time.Time) (int, error) {
	hosts, err := s.st.LostHosts(ctx, lostAfter, serveStart)
	if err != nil {
		return 0, err
	}
	failed := 0
	for _, host := range hosts {
		n, err := s.loseHost(ctx, host, lostAfter, serveStart)
		if err != nil {
			return failed, err // loseHost names the host
		}
		failed += n
	}
	return failed, nil
}

// loseHost is MarkHostsLost for one host, in one transaction with the
// host row locked, so that a heartbeat racing it either comes first (and
// the host is not lost) or after (and finds the runs already failed).
func (s *Service) loseHost(ctx context.Context, hostID string, lostAfter time.Duration, serveStart time.Time) (int, error) {
	failed := 0
	err := s.st.InTx(ctx, func(tx *store.Tx) error {
		failed = 0
		lost, seen, err := tx.LockLostHost(ctx, hostID, lostAfter, serveStart)
		if err != nil || !lost {
			return err
		}
		ids, err := tx.LiveRunsOn(ctx, hostID)
		if err != nil {
			return err
		}
		var runs []string
		for _, id := range ids {
			r, err := tx.LockRun(ctx, id)
			if err != nil {
				return err
			}
			d := lifecycle.Expired(lifecycle.FromWire(r), lifecycle.HostLost, false, hostID, s.st.Policy, s.st.Now())
			if !d.Changed() {
				continue
			}
			if _, err := s.st.Apply(ctx, tx, r, d); err != nil {
				return err
			}
			runs = append(runs, r.ID)
		}
		failed = len(runs)
		if failed == 0 {
			return nil
		}
		return tx.Journal(ctx, store.NewEvent{Topic: wire.TopicWorkerLost, HostID: hostID,
			Payload: map[string]any{"host_id": hostID, "last_seen_at": seen, "lost_after": lostAfter.String(), "run_ids": runs}})
	})
	if err != nil {
		return failed, fmt.Errorf("fail the runs of lost host %s: %w", hostID, err)
	}
	return failed, nil
}

// FailHungRuns fails, with failure_reason cli_hang and through the restart
// policy, every working running run (docs/architecture.md#working-waiting-hung:
// not waiting for a person, its limit or its next input) whose pane and
// input have been quiet for hangTimeout while its host is online (an
// online host, or a disabled one whose heartbeat is within offlineAfter).
// The timer counts from the latest of the run's last output, its last
// input (its start at the earliest), its host's last online transition
// and serveStart. It returns the runs whose sessions must be stopped.
func (s *Service) FailHungRuns(ctx context.Context, hangTimeout, offlineAfter time.Duration, serveStart time.Time) ([]store.Hang, error) {
	ids, err := s.st.MaybeHung(ctx, hangTimeout, offlineAfter, serveStart)
	if err != nil {
		return nil, err
	}
	return s.quietRuns(ctx, ids, lifecycle.PaneTimers{Hang: hangTimeout}, offlineAfter, serveStart)
}

// StopCompletedRuns stops (run.stopped, source completed_idle; no requeue,
// the work item keeps its status) every running run whose agent completed
// its turn after the last input into it and that has since had no input
// and no pane change for stopAfter while its host is online, counted from
// the latest of the completion, the last input, the last output, its
// host's last online transition and serveStart; a rate-limited run waits
// for its limit instead (docs/architecture.md#working-waiting-hung).
// stopAfter 0 (or less) stops nothing. It returns the runs whose sessions
// must be stopped.
func (s *Service) StopCompletedRuns(ctx context.Context, stopAfter, offlineAfter time.Duration, serveStart time.Time) ([]store.IdleStop, error) {
	if stopAfter <= 0 {
		return nil, nil
	}
	ids, err := s.st.MaybeIdleCompleted(ctx, stopAfter, offlineAfter, serveStart)
	if err != nil {
		return nil, err
	}
	ended, err := s.quietRuns(ctx, ids, lifecycle.PaneTimers{CompletedStop: stopAfter}, offlineAfter, serveStart)
	stops := make([]store.IdleStop, 0, len(ended))
	for _, h := range ended {
		stops = append(stops, store.IdleStop(h))
	}
	return stops, err // quietRuns names the run
}

// quietRuns decides each of the running runs a pane timer's scan found
// with lifecycle.Quiet, in a transaction of its own with the run row
// locked: output, input, a completion or a signal may have come since the
// scan. The clocks are the database's, and so is the time they are
// judged at. It returns the runs it ended.
func (s *Service) quietRuns(ctx context.Context, ids []string, t lifecycle.PaneTimers, offlineAfter time.Duration, serveStart time.Time) ([]store.Hang, error) {
	var ended []store.Hang
	for _, id := range ids {
		var h *store.Hang
		err := s.st.InTx(ctx, func(tx *store.Tx) error {
			h = nil
			r, err := tx.LockRun(ctx, id)
			if err != nil || r.HostID == nil {
				return err
			}
			p, err := tx.PaneOf(ctx, r, offlineAfter, serveStart)
			if err != nil {
				return err
			}
			pane := lifecycle.Pane{HostOnline: p.HostOnline, LastOutput: p.LastOutput, Floor: p.Floor}
			d := lifecycle.Quiet(lifecycle.FromWire(r), pane, t, s.st.Policy, p.Now)
			if !d.Changed() {
				return nil
			}
			if _, err := s.st.Apply(ctx, tx, r, d); err != nil {
				return err
			}
			h = &store.Hang{RunID: r.ID, Attempt: r.Attempt, HostID: *r.HostID}
			return nil
		})
		if errors.Is(err, store.ErrGuardLost) || wire.HasCode(err, wire.CodeNotFound) {
			continue
		}
		if err != nil {
			return ended, fmt.Errorf("check the pane timers of run %s: %w", id, err)
		}
		if h != nil {
			ended = append(ended, *h)
		}
	}
	return ended, nil
}
