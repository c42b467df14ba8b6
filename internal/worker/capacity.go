package worker

import (
	"context"
	"net/http"
	"time"

	"pam/internal/wire"
)

// activeCount is how many runs count against MaxRuns: those being
// spawned or running, as the orchestrator counts them (spawning, running).
// A session in hold-open (its CLI ended) and one being stopped take no
// capacity. The caller holds w.mu.
func (w *agent) activeCount() int {
	n := 0
	for _, r := range w.runs {
		if (r.state == stateSpawning || r.state == stateLive) && !r.ended {
			n++
		}
	}
	return n
}

// capacityTimeout bounds settleCapacity: the ack it delays must reach the
// orchestrator within PAM_DISPATCH_ACK_TIMEOUT.
const capacityTimeout = 3 * time.Second

// settleCapacity is asked before a run is refused for capacity: this
// worker learns that a run is over (its CLI exited and its session is in
// hold-open, or it was stopped or moved on) only from the orchestrator, at
// the next reconciliation, and counting such a run would refuse an offer
// the orchestrator made because the host has room — again on every offer
// until then. So it asks now: each live session that is not among the
// host's desired runs is looked up, and one the orchestrator says is over
// at its attempt stops counting (it stays captured; reconciliation ends
// it when its hold-open does). Without an answer nothing changes.
func (w *agent) settleCapacity(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, capacityTimeout)
	defer cancel()
	type live struct {
		id      string
		attempt int
	}
	w.mu.Lock()
	var counted []live
	for _, r := range w.runs {
		if r.state == stateLive && !r.ended {
			counted = append(counted, live{r.id, r.attempt})
		}
	}
	w.mu.Unlock()
	if len(counted) == 0 {
		return
	}
	var list wire.WorkerRunList
	if err := w.client.Do(ctx, http.MethodGet, workerRunsPath, nil, nil, &list); err != nil {
		w.log.Warn("capacity: desired runs unavailable; counting every live session", "err", err)
		return
	}
	desired := map[string]int{}
	for _, d := range list.Runs {
		desired[d.RunID] = d.Attempt
	}
	for _, c := range counted {
		if a, ok := desired[c.id]; ok && a == c.attempt {
			continue
		}
		wr, err := w.lookupRun(ctx, c.id)
		if err != nil {
			if ctx.Err() != nil {
				return // the worker is stopping
			}
			w.log.Warn("capacity: look up a session's run", "run_id", c.id, "err", err)
			continue
		}
		if wr.Attempt == c.attempt && (wr.Status == wire.RunSpawning || wr.Status == wire.RunRunning || wr.Status == wire.RunPending) {
			continue // still this attempt's (pending: its ack not applied yet)
		}
		if wr.Attempt < c.attempt {
			continue // the orchestrator never made this attempt: not ours to judge
		}
		w.mu.Lock()
		if r := w.runs[c.id]; r != nil && r.attempt == c.attempt && r.state == stateLive {
			r.ended = true
		}
		w.mu.Unlock()
		w.log.Info("capacity: the run is over; its session no longer counts", "run_id", c.id, "attempt", c.attempt,
			"status", wr.Status, "run_attempt", wr.Attempt)
	}
}
