package server

import (
	"context"
	"net/http"
	"sync"
	"time"

	"pam/internal/store"
	"pam/internal/wire"
)

// The attach lease (docs/api.md#websockets, docs/architecture.md#pane-logs-and-attach): at most one
// writer per run. It lives in the active server's memory; its history is
// journaled (run.lease_acquired / run.lease_released, with who held it,
// how they authenticated and for how long): the audit trail of who typed
// into which run.

// Release reasons, as journaled.
const (
	releaseReleased     = "released" // the holder sent release_lease
	releaseClosed       = "closed"   // the holder's socket went away
	releaseRevoked      = "revoked"  // DELETE /runs/{id}/lease
	releaseExpired      = "expired"  // silent past PAM_LEASE_TTL
	releaseRunEnded     = "run_ended"
	releaseRelay        = "relay_closed" // the worker's relay ended or could not open
	releaseStopping     = "server_stopping"
	releaseTokenRevoked = "token_revoked" // the holder's token was revoked or rotated
)

// runPollInterval is how often the watcher looks whether the runs with
// attach sockets still run (one query for all of them).
const runPollInterval = 500 * time.Millisecond

// lease is one held attach lease.
type lease struct {
	runID    string
	holder   *attachClient
	info     wire.LeaseHolder
	attachID string
}

// terminal is the live-terminal state of a server: the ticket book, the
// attach sockets by run, and the leases.
type terminal struct {
	s       *Server
	tickets ticketBook

	mu       sync.Mutex
	sockets  map[string]map[*attachClient]struct{} // by run id
	leases   map[string]*lease                     // by run id
	watching bool                                  // the watcher goroutine runs
}

func newTerminal(s *Server) *terminal {
	return &terminal{s: s, sockets: map[string]map[*attachClient]struct{}{}, leases: map[string]*lease{}}
}

// maxSocketsPerRun bounds the attach sockets of one run (one holder and
// those waiting for the lease).
const maxSocketsPerRun = 16

// join registers an attach socket; it reports false when the run has too
// many. The watcher runs while any socket is registered.
func (t *terminal) join(c *attachClient) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.sockets[c.runID]
	if len(m) >= maxSocketsPerRun {
		return false
	}
	if m == nil {
		m = map[*attachClient]struct{}{}
		t.sockets[c.runID] = m
	}
	m[c] = struct{}{}
	if !t.watching {
		// Refused only while the server shuts down, when the socket ends
		// anyway.
		t.watching = t.s.bg.goFunc(t.watch)
	}
	return true
}

func (t *terminal) leave(c *attachClient) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.sockets[c.runID]
	delete(m, c)
	if len(m) == 0 {
		delete(t.sockets, c.runID)
	}
}

// acquire gives c the run's lease if it is free; otherwise it returns the
// lease that holds it.
func (t *terminal) acquire(c *attachClient, info wire.LeaseHolder, attachID string) (mine, held *lease) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if le := t.leases[c.runID]; le != nil {
		return nil, le
	}
	le := &lease{runID: c.runID, holder: c, info: info, attachID: attachID}
	t.leases[c.runID] = le
	c.touch()
	return le, nil
}

// holderOf returns the run's lease, or nil.
func (t *terminal) holderOf(runID string) *lease {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.leases[runID]
}

// release frees le if it still holds its run, journaling why and for how
// long; a second release of the same lease does nothing, so whoever ends
// a lease first (holder, revoke, expiry) decides the journaled reason.
func (t *terminal) release(le *lease, reason string, extra map[string]any) bool {
	t.mu.Lock()
	if t.leases[le.runID] != le {
		t.mu.Unlock()
		return false
	}
	delete(t.leases, le.runID)
	t.mu.Unlock()
	now := time.Now().UTC()
	payload := map[string]any{"holder": le.info, "attach_id": le.attachID, "reason": reason,
		"released_at": now, "held_seconds": now.Sub(le.info.AttachedAt).Seconds()}
	for k, v := range extra {
		payload[k] = v
	}
	actor := le.info.Token
	if by, ok := extra["revoked_by"].(string); ok {
		actor = by
	}
	t.journal(wire.TopicRunLeaseReleased, le.runID, actor, payload)
	return true
}

// journal writes a lease event by actor (the token that holds, or that
// revoked, the lease); the lease itself does not wait on the database, so
// a failure is logged, not returned.
func (t *terminal) journal(topic wire.Topic, runID, actor string, payload map[string]any) {
	ctx, cancel := context.WithTimeout(store.WithActor(context.Background(), actor), 5*time.Second)
	defer cancel()
	if err := t.s.store.JournalLease(ctx, topic, runID, payload); err != nil {
		t.s.log.Warn("journal lease", "topic", topic, "run_id", runID, "err", err)
	}
}

// watch runs while attach sockets exist, in the server's bg group: it
// expires leases whose holder was silent past the TTL, and ends every
// socket of a run that left running, with one query for all runs.
func (t *terminal) watch() {
	ttl := t.s.opts.LeaseTTL
	tick := min(runPollInterval, max(ttl/4, 10*time.Millisecond))
	tk := time.NewTicker(tick)
	defer tk.Stop()
	var lastPoll time.Time
	for {
		select {
		case <-tk.C:
		case <-t.s.streamCtx.Done():
			t.mu.Lock()
			t.watching = false
			t.mu.Unlock()
			return
		}
		t.mu.Lock()
		if len(t.sockets) == 0 {
			t.watching = false
			t.mu.Unlock()
			return
		}
		var expired []*lease
		now := time.Now()
		for _, le := range t.leases {
			if now.Sub(le.holder.lastActive()) > ttl {
				expired = append(expired, le)
			}
		}
		var ids []string
		if now.Sub(lastPoll) >= runPollInterval {
			for id := range t.sockets {
				ids = append(ids, id)
			}
		}
		t.mu.Unlock()
		for _, le := range expired {
			if t.release(le, releaseExpired, nil) {
				le.holder.end(wire.CodeLeaseExpired, "the lease expired: nothing from this client for "+ttl.String())
			}
		}
		if len(ids) > 0 {
			lastPoll = now
			t.endStopped(ids)
		}
	}
}

// endStopped ends the sockets of those runs that are no longer running.
func (t *terminal) endStopped(ids []string) {
	ctx, cancel := context.WithTimeout(t.s.streamCtx, 5*time.Second)
	defer cancel()
	statuses, err := t.s.store.RunStatuses(ctx, ids)
	if err != nil {
		return // the database is away: try again next tick
	}
	for _, id := range ids {
		st, ok := statuses[id]
		if ok && st == wire.RunRunning {
			continue
		}
		if !ok {
			st = "gone"
		}
		t.endRun(id, st)
	}
}

// endRun ends every attach socket of a run that left running.
func (t *terminal) endRun(runID, status string) {
	t.mu.Lock()
	var cs []*attachClient
	for c := range t.sockets[runID] {
		cs = append(cs, c)
	}
	le := t.leases[runID]
	t.mu.Unlock()
	if le != nil {
		t.release(le, releaseRunEnded, map[string]any{"status": status})
	}
	for _, c := range cs {
		c.end(wire.CodeRunEnded, "the run is "+status)
	}
}

// revokeLease serves DELETE /runs/{id}/lease: the holder gets
// lease_revoked and is closed. A run without a lease answers 204 too.
func (s *Server) revokeLease(w http.ResponseWriter, r *http.Request) {
	run, err := s.store.GetRun(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if le := s.term.holderOf(run.ID); le != nil {
		if s.term.release(le, releaseRevoked, map[string]any{"revoked_by": tokenOf(r.Context()).Name, "revoked_from": r.RemoteAddr}) {
			le.holder.end(wire.CodeLeaseRevoked, "the lease was revoked by the operator")
		}
	}
	w.WriteHeader(http.StatusNoContent)
}
