package runs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"pam/internal/lifecycle"
	"pam/internal/placement"
	"pam/internal/store"
	"pam/internal/wire"
)

// ClaimAndOffer is one dispatch pass (docs/architecture.md#central-duties): due pending runs, claimed with
// FOR UPDATE SKIP LOCKED so that several dispatchers never take the same
// run, are offered to the least loaded eligible host (placement.Place).
// Candidate hosts are locked for the pass so that capacity is counted
// once across dispatchers. connected reports whether a host's uplink is
// up in this process. A host that refused a run's current attempt less
// than refusalHold ago (PAM_DISPATCH_ACK_TIMEOUT) is not offered it
// again: the run goes to another host or waits, instead of being offered
// back and refused in a loop. Such a host still counts as eligible but
// for capacity (it was offered the run), so the dispatch timeout fails
// the run dispatch_timeout as before.
func (s *Service) ClaimAndOffer(ctx context.Context, connected func(hostID string) bool, limit int, refusalHold time.Duration) ([]store.Offer, error) {
	var offers []store.Offer
	err := s.st.InTx(ctx, func(tx *store.Tx) error {
		offers = nil
		due, err := tx.ClaimDueRuns(ctx, limit)
		if err != nil || len(due) == 0 {
			return err
		}
		hosts, err := tx.CandidateHosts(ctx, connected)
		if err != nil {
			return err
		}
		refused, err := tx.RecentRefusals(ctx, due, refusalHold)
		if err != nil {
			return err
		}
		choices := placement.Place(placementRuns(due), placementHosts(hosts), func(run, host string) bool { return refused[run+"/"+host] })
		var matchedIDs []string
		for i, c := range choices {
			r := due[i]
			if c.Matched {
				matchedIDs = append(matchedIDs, r.ID)
			}
			if c.HostID == "" {
				continue
			}
			out, err := s.st.Apply(ctx, tx, r, lifecycle.Offered(lifecycle.FromWire(r), c.HostID))
			if err != nil {
				return err
			}
			title, err := tx.TaskTitle(ctx, r.TaskID)
			if err != nil {
				return err
			}
			offers = append(offers, store.Offer{Run: out, HostID: c.HostID, TaskTitle: title})
		}
		return tx.MarkMatched(ctx, matchedIDs)
	})
	if err != nil {
		return offers, fmt.Errorf("offer due runs: %w", err) // as before: a failed commit may have made them
	}
	return offers, nil
}

func placementRuns(due []wire.Run) []placement.Run {
	runs := make([]placement.Run, len(due))
	for i, r := range due {
		runs[i] = placement.Run{ID: r.ID, Provider: r.Provider}
		if r.TargetHostID != nil {
			runs[i].TargetHostID = *r.TargetHostID
		}
	}
	return runs
}

func placementHosts(hs []store.HostLoad) []placement.Host {
	out := make([]placement.Host, len(hs))
	for i, h := range hs {
		out[i] = placement.Host{ID: h.ID, Providers: h.Providers, Capacity: h.Capacity, Active: h.Active}
	}
	return out
}

// AckOutcome says what a run_dispatch_ack did.
type AckOutcome struct {
	Run        wire.Run
	Changed    bool // spawning now, or the offer withdrawn
	StopSender bool // the sender accepted an offer that is no longer its own
}

// AckOffer applies run_dispatch_ack from hostID (docs/architecture.md#central-duties): accepted → spawning;
// refused → the offer is withdrawn and the run may go elsewhere, and the
// refusal is recorded so that ClaimAndOffer does not offer that attempt
// to hostID again for PAM_DISPATCH_ACK_TIMEOUT. An ack
// for an offer that was withdrawn meanwhile tells the sender to stop: that
// incarnation must not run twice.
func (s *Service) AckOffer(ctx context.Context, hostID string, f wire.RunDispatchAckFrame) (AckOutcome, error) {
	var res AckOutcome
	if f.Attempt == nil || f.Accepted == nil {
		return res, wire.Invalid("attempt", "run_dispatch_ack needs run_id, attempt and accepted")
	}
	err := s.st.InTx(ctx, func(tx *store.Tx) error {
		r, err := tx.LockRun(ctx, f.RunID)
		if err != nil {
			return err
		}
		res.Run = r
		offered, err := tx.OfferedAttempt(ctx, r.ID, *f.Attempt, hostID)
		if err != nil {
			return err
		}
		d, err := lifecycle.Ack(lifecycle.FromWire(r), hostID, *f.Attempt, *f.Accepted, f.Reason, offered)
		if err != nil {
			return err
		}
		if !*f.Accepted {
			if err := tx.RecordRefusal(ctx, r.ID, *f.Attempt, hostID); err != nil {
				return err
			}
		}
		res.StopSender = d.StopSender
		res.Changed = d.Changed()
		res.Run, err = s.st.Apply(ctx, tx, r, d)
		return err
	})
	if err != nil {
		return AckOutcome{}, fmt.Errorf("apply the dispatch ack of run %s: %w", f.RunID, err)
	}
	return res, nil
}

// timers maps the store's due timers to lifecycle's.
var timers = map[store.DueTimer]lifecycle.Timer{
	store.AckTimerDue:      lifecycle.AckTimeout,
	store.DispatchTimerDue: lifecycle.DispatchTimeout,
	store.SpawnTimerDue:    lifecycle.SpawnTimeout,
}

// Sweep applies the central timeouts (docs/architecture.md#run-status-machine, docs/architecture.md#central-duties) and returns how many runs
// changed: offers not acked within ackTimeout are withdrawn; pending runs
// past dispatchTimeout from pending_since fail no_eligible_host or
// dispatch_timeout; spawning runs past spawnTimeout fail spawn_failed.
// Each goes through the guarded write and the restart policy.
func (s *Service) Sweep(ctx context.Context, ackTimeout, dispatchTimeout, spawnTimeout time.Duration) (int, error) {
	list, err := s.st.TimedOut(ctx, ackTimeout, dispatchTimeout, spawnTimeout)
	if err != nil {
		return 0, err
	}
	changed := 0
	for _, d := range list {
		err := s.st.InTx(ctx, func(tx *store.Tx) error {
			r, err := tx.LockRun(ctx, d.ID)
			if err != nil {
				return err
			}
			ever, err := tx.EverMatched(ctx, r.ID)
			if err != nil {
				return err
			}
			// Decided again on the run as it is now: it may have moved on
			// since the scan, and then nothing is decided.
			dec := lifecycle.Expired(lifecycle.FromWire(r), timers[d.Timer], ever, "", s.st.Policy, s.st.Now())
			if !dec.Changed() {
				return nil
			}
			if _, err := s.st.Apply(ctx, tx, r, dec); err != nil {
				return err
			}
			changed++
			return nil
		})
		if err != nil && !errors.Is(err, store.ErrGuardLost) {
			return changed, fmt.Errorf("apply the timers of run %s: %w", d.ID, err)
		}
	}
	return changed, nil
}
