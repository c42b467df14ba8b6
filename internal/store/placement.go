package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"pam/internal/lifecycle"
	"pam/internal/placement"
	"pam/internal/wire"
)

// Offer is a run just offered to a host: what the dispatcher pushes down
// that host's uplink as run_dispatch after the claim commits.
type Offer struct {
	Run       wire.Run
	HostID    string
	TaskTitle string
}

// DispatchFrame builds the run_dispatch frame of an offer, but for its
// signal token, which the caller mints (package signaltoken).
func (s *Store) DispatchFrame(ctx context.Context, o Offer) (wire.Frame, error) {
	f := wire.Frame{Type: wire.FrameRunDispatch, RunID: o.Run.ID, TaskID: o.Run.TaskID, Provider: o.Run.Provider,
		SessionName: o.Run.SessionName, Attempt: wire.IntPtr(o.Run.Attempt), Cwd: o.Run.Cwd, Prompt: o.Run.Prompt,
		Args: o.Run.Args, TaskTitle: o.TaskTitle}
	if err := s.dispatchWorkspace(ctx, &f, o); err != nil {
		return wire.Frame{}, fmt.Errorf("dispatch run %s: %w", o.Run.ID, err)
	}
	if err := s.dispatchResume(ctx, &f, o); err != nil {
		return wire.Frame{}, fmt.Errorf("dispatch run %s: %w", o.Run.ID, err)
	}
	return f, nil
}

// ClaimAndOffer is one dispatch pass (docs/architecture.md#central-duties): due pending runs, claimed with
// FOR UPDATE SKIP LOCKED so that several dispatchers never take the same
// run, are offered to the least loaded eligible host. Candidate hosts are
// locked for the pass so that capacity is counted once across dispatchers.
// connected reports whether a host's uplink is up in this process. A host
// that refused a run's current attempt less than refusalHold ago
// (PAM_DISPATCH_ACK_TIMEOUT) is not offered it again: the run goes to
// another host or waits, instead of being offered back and refused in a
// loop. Such a host still counts as eligible but for capacity (it was
// offered the run), so the dispatch timeout fails the run
// dispatch_timeout as before.
func (s *Store) ClaimAndOffer(ctx context.Context, connected func(hostID string) bool, limit int, refusalHold time.Duration) ([]Offer, error) {
	var offers []Offer
	err := s.InTx(ctx, func(tx *Tx) error {
		offers = nil
		rows, err := tx.Query(ctx, `SELECT `+runColumns+` FROM runs
			WHERE status = 'pending' AND host_id IS NULL AND (next_attempt_at IS NULL OR next_attempt_at <= now())
			ORDER BY pending_since, id LIMIT $1 FOR UPDATE SKIP LOCKED`, limit)
		if err != nil {
			return fmt.Errorf("claim due runs: %w", err)
		}
		due, err := pgx.CollectRows(rows, rowTo(scanRun))
		if err != nil {
			return fmt.Errorf("claim due runs: %w", err)
		}
		if len(due) == 0 {
			return nil
		}
		hosts, err := candidateHosts(ctx, tx, connected)
		if err != nil {
			return err
		}
		refused, err := recentRefusals(ctx, tx, due, refusalHold)
		if err != nil {
			return err
		}
		runs := make([]placement.Run, len(due))
		for i, r := range due {
			runs[i] = placement.Run{ID: r.ID, Provider: r.Provider}
			if r.TargetHostID != nil {
				runs[i].TargetHostID = *r.TargetHostID
			}
		}
		var matchedIDs []string
		for i, c := range placement.Place(runs, hosts, func(run, host string) bool { return refused[run+"/"+host] }) {
			r := due[i]
			if c.Matched {
				matchedIDs = append(matchedIDs, r.ID)
			}
			if c.HostID == "" {
				continue
			}
			out, err := s.apply(ctx, tx, r, lifecycle.Offered(lifecycle.FromWire(r), c.HostID))
			if err != nil {
				return err
			}
			var title string
			if err := tx.QueryRow(ctx, `SELECT title FROM work_items WHERE id = $1`, r.TaskID).Scan(&title); err != nil {
				return fmt.Errorf("read title of task %s: %w", r.TaskID, err)
			}
			offers = append(offers, Offer{Run: out, HostID: c.HostID, TaskTitle: title})
		}
		if len(matchedIDs) > 0 {
			if _, err := tx.Exec(ctx, `UPDATE runs SET ever_matched = true WHERE id = ANY($1::uuid[]) AND NOT ever_matched`, matchedIDs); err != nil {
				return fmt.Errorf("mark runs matched: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return offers, fmt.Errorf("offer due runs: %w", err) // as before: a failed commit may have made them
	}
	return offers, nil
}

// candidateHosts returns the hosts a run may be offered to: online,
// enabled, not suspect and connected to this process, locked for the
// pass so that capacity is counted once across dispatchers.
func candidateHosts(ctx context.Context, tx *Tx, connected func(hostID string) bool) ([]placement.Host, error) {
	rows, err := tx.Query(ctx, `SELECT h.id::text, h.providers, least(h.max_runs, coalesce(h.reported_max_runs, h.max_runs)),
		(SELECT count(*) FROM runs r WHERE r.host_id = h.id AND r.status IN ('pending', 'spawning', 'running'))
		FROM hosts h WHERE h.status = 'online' AND NOT h.disabled AND NOT h.instance_suspect
		ORDER BY h.id FOR NO KEY UPDATE OF h`)
	if err != nil {
		return nil, fmt.Errorf("read candidate hosts: %w", err)
	}
	all, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (placement.Host, error) {
		var h placement.Host
		err := row.Scan(&h.ID, &h.Providers, &h.Capacity, &h.Active)
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("read candidate hosts: %w", err)
	}
	var hosts []placement.Host
	for _, h := range all {
		if connected(h.ID) {
			hosts = append(hosts, h)
		}
	}
	return hosts, nil
}

// recentRefusals returns the (run, host) pairs, keyed "run/host", whose
// host refused the run's current attempt within hold.
func recentRefusals(ctx context.Context, tx *Tx, due []wire.Run, hold time.Duration) (map[string]bool, error) {
	ids := make([]string, len(due))
	for i, r := range due {
		ids[i] = r.ID
	}
	rows, err := tx.Query(ctx, `SELECT o.run_id::text || '/' || o.host_id::text FROM run_offers o
		JOIN runs r ON r.id = o.run_id AND r.attempt = o.attempt
		WHERE o.run_id = ANY($1::uuid[]) AND o.refused_at > now() - $2::interval`, ids, hold)
	if err != nil {
		return nil, fmt.Errorf("read refused offers: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read refused offers: %w", err)
	}
	out := make(map[string]bool, len(keys))
	for _, k := range keys {
		out[k] = true
	}
	return out, nil
}

// OfferedTo reports whether runID was ever offered to hostID (at any
// attempt): the scope of every frame and request a worker sends about a
// run (docs/architecture.md#security-model).
func (s *Store) OfferedTo(ctx context.Context, hostID, runID string) (bool, error) {
	ok, err := offeredTo(ctx, s.Pool, hostID, runID)
	return ok, translate(err) // offeredTo names the run
}

// PlacedOn reports whether runID's current attempt is attempt and is
// placed on (or offered to) hostID: the only incarnation whose pane the
// server takes (docs/architecture.md#bounded-journal). A host whose
// offer was withdrawn, or an older attempt, is not.
func (s *Store) PlacedOn(ctx context.Context, hostID, runID string, attempt int) (bool, error) {
	var ok bool
	err := s.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM runs WHERE id = $1 AND host_id = $2 AND attempt = $3)`, runID, hostID, attempt).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("read the placement of run %s: %w", runID, translate(err))
	}
	return ok, nil
}

func offeredTo(ctx context.Context, q querier, hostID, runID string) (bool, error) {
	var ok bool
	err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM run_offers WHERE run_id = $1 AND host_id = $2)`, runID, hostID).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("read offers of run %s: %w", runID, err)
	}
	return ok, nil
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
func (s *Store) AckOffer(ctx context.Context, hostID string, f wire.Frame) (AckOutcome, error) {
	var res AckOutcome
	if f.Attempt == nil || f.Accepted == nil {
		return res, wire.Invalid("attempt", "run_dispatch_ack needs run_id, attempt and accepted")
	}
	err := s.InTx(ctx, func(tx *Tx) error {
		r, err := runByID(ctx, tx, f.RunID, true)
		if err != nil {
			return err
		}
		res.Run = r
		var offered bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM run_offers WHERE run_id = $1 AND attempt = $2 AND host_id = $3)`,
			r.ID, *f.Attempt, hostID).Scan(&offered); err != nil {
			return fmt.Errorf("read offers of run %s: %w", r.ID, err)
		}
		d, err := lifecycle.Ack(lifecycle.FromWire(r), hostID, *f.Attempt, *f.Accepted, f.Reason, offered)
		if err != nil {
			return err
		}
		if !*f.Accepted {
			if _, err := tx.Exec(ctx, `UPDATE run_offers SET refused_at = now() WHERE run_id = $1 AND attempt = $2 AND host_id = $3`,
				r.ID, *f.Attempt, hostID); err != nil {
				return fmt.Errorf("record the refusal of run %s by host %s: %w", r.ID, hostID, err)
			}
		}
		res.StopSender = d.StopSender
		res.Changed = d.Changed()
		res.Run, err = s.apply(ctx, tx, r, d)
		return err
	})
	if err != nil {
		return AckOutcome{}, fmt.Errorf("apply the dispatch ack of run %s: %w", f.RunID, err)
	}
	return res, nil
}

// Sweep applies the central timeouts (docs/architecture.md#run-status-machine, docs/architecture.md#central-duties) and returns how many runs
// changed: offers not acked within ackTimeout are withdrawn; pending runs
// past dispatchTimeout from pending_since fail no_eligible_host or
// dispatch_timeout; spawning runs past spawnTimeout fail spawn_failed.
// Each goes through the guarded write and the restart policy.
func (s *Store) Sweep(ctx context.Context, ackTimeout, dispatchTimeout, spawnTimeout time.Duration) (int, error) {
	changed := 0
	type due struct {
		ID    string
		Timer lifecycle.Timer
	}
	rows, err := s.Pool.Query(ctx, `
		SELECT id::text, $4::int FROM runs WHERE status = 'pending' AND host_id IS NOT NULL AND offered_at < now() - $1::interval
		UNION ALL
		SELECT id::text, $5::int FROM runs WHERE status = 'pending' AND pending_since < now() - $2::interval
		UNION ALL
		SELECT id::text, $6::int FROM runs WHERE status = 'spawning' AND spawning_at < now() - $3::interval
		LIMIT 500`, ackTimeout, dispatchTimeout, spawnTimeout, lifecycle.AckTimeout, lifecycle.DispatchTimeout, lifecycle.SpawnTimeout)
	if err != nil {
		return 0, fmt.Errorf("find due runs: %w", translate(err))
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByPos[due])
	if err != nil {
		return 0, fmt.Errorf("scan due runs: %w", translate(err))
	}
	for _, d := range list {
		err := s.InTx(ctx, func(tx *Tx) error {
			r, err := runByID(ctx, tx, d.ID, true)
			if err != nil {
				return err
			}
			var ever bool
			if err := tx.QueryRow(ctx, `SELECT ever_matched FROM runs WHERE id = $1`, r.ID).Scan(&ever); err != nil {
				return fmt.Errorf("read ever_matched of run %s: %w", r.ID, err)
			}
			// Decided again on the run as it is now: it may have moved on
			// since the scan, and then nothing is decided.
			dec := lifecycle.Expired(lifecycle.FromWire(r), d.Timer, ever, "", s.Policy, s.now())
			if !dec.Changed() {
				return nil
			}
			if _, err := s.apply(ctx, tx, r, dec); err != nil {
				return err
			}
			changed++
			return nil
		})
		if err != nil && !errors.Is(err, errGuardLost) {
			return changed, fmt.Errorf("apply the timers of run %s: %w", d.ID, err)
		}
	}
	return changed, nil
}

// NextDue is when the earliest backed-off pending run becomes due (zero
// when none is waiting).
func (s *Store) NextDue(ctx context.Context) (time.Time, error) {
	var t *time.Time
	err := s.Pool.QueryRow(ctx, `SELECT min(next_attempt_at) FROM runs WHERE status = 'pending' AND host_id IS NULL AND next_attempt_at > now()`).Scan(&t)
	if err != nil {
		return time.Time{}, fmt.Errorf("read when the next run is due: %w", translate(err))
	}
	if t == nil {
		return time.Time{}, nil
	}
	return *t, nil
}

// SignalSecret returns the server's signal-token secret (the key of
// package signaltoken), read once.
func (s *Store) SignalSecret(ctx context.Context) ([]byte, error) {
	s.secretMu.Lock()
	defer s.secretMu.Unlock()
	if s.signalSecret != nil {
		return s.signalSecret, nil
	}
	var b []byte
	if err := s.Pool.QueryRow(ctx, `SELECT signal_secret FROM server_state`).Scan(&b); err != nil {
		return nil, fmt.Errorf("read the signal secret: %w", translate(err))
	}
	s.signalSecret = b
	return b, nil
}
