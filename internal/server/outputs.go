package server

import (
	"context"
	"sync"
	"time"

	"pam/internal/lifecycle"
	"pam/internal/store"
	"pam/internal/wire"
)

// outputFlush is how long a pane change may wait before it is written:
// last_output_at feeds the hang timer (minutes) and a pane change clears
// attention; neither needs it sooner, and one UPDATE per flush replaces
// one per snapshot on the uplink's read path.
const outputFlush = 250 * time.Millisecond

// outputWriteTimeout bounds one write of the coalescer: it serves every
// uplink, so no one request's context may cancel it.
const outputWriteTimeout = 10 * time.Second

// outputs coalesces the pane changes the uplinks report: the snapshot
// case of an uplink notes the run and goes on to its next frame, and a
// goroutine writes every run noted since the last flush in one statement
// (docs/architecture.md#pane-changes-off-the-read-path). A change that
// must be ordered before an attention change of the same run (an idle
// report, a needs_input signal) is written first by flushRun.
type outputs struct {
	s *Server

	// wmu orders the writes: flushRun returns only after every note
	// taken before it was written, by it or by a flush in flight.
	wmu sync.Mutex

	mu      sync.Mutex
	pending map[string]outputNote // by run id
	running bool                  // the flush loop is on
}

// outputNote is what waits for a run: the host and attempt that sent
// it, and whether the pane changed (a snapshot replaced another) or only
// the hang timer moves.
type outputNote struct {
	host    string
	attempt int
	changed bool
}

func newOutputs(s *Server) *outputs { return &outputs{s: s, pending: map[string]outputNote{}} }

// note records a snapshot of runID's attempt from host; changed says it
// replaced an earlier one.
func (o *outputs) note(runID, host string, attempt int, changed bool) {
	o.mu.Lock()
	n, ok := o.pending[runID]
	if !ok || n.attempt != attempt || n.host != host {
		n = outputNote{host: host, attempt: attempt}
	}
	n.changed = n.changed || changed
	o.pending[runID] = n
	start := !o.running
	o.running = true
	o.mu.Unlock()
	if start && !o.s.bg.goFunc(o.loop) {
		// Shutting down: nothing flushes any more; written at once.
		o.mu.Lock()
		o.running = false
		o.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), outputWriteTimeout)
		defer cancel()
		o.flushRun(ctx, runID)
	}
}

// loop flushes every outputFlush while notes come in, and stops when a
// flush found none (note starts it again), or the server stops.
func (o *outputs) loop() {
	t := time.NewTimer(outputFlush)
	defer t.Stop()
	for {
		stopping := false
		select {
		case <-t.C:
		case <-o.s.streamCtx.Done():
			stopping = true
		}
		o.wmu.Lock()
		o.mu.Lock()
		batch := o.pending
		o.pending = map[string]outputNote{}
		if len(batch) == 0 || stopping {
			o.running = false
		}
		o.mu.Unlock()
		if len(batch) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), outputWriteTimeout)
			o.write(ctx, batch)
			cancel()
		}
		o.wmu.Unlock()
		if len(batch) == 0 || stopping {
			return
		}
		t.Reset(outputFlush)
	}
}

// flushRun writes runID's note now, if it has one.
func (o *outputs) flushRun(ctx context.Context, runID string) {
	o.wmu.Lock()
	defer o.wmu.Unlock()
	o.mu.Lock()
	n, ok := o.pending[runID]
	delete(o.pending, runID)
	o.mu.Unlock()
	if ok {
		o.write(ctx, map[string]outputNote{runID: n})
	}
}

// write moves last_output_at of every run in batch in one statement,
// and ends the quiet spell (idle, and idle only) of the runs whose pane
// changed (docs/architecture.md#attention) — but for a run whose answer
// is being checked: the answer clears it, journaled as its own (answer.go).
func (o *outputs) write(ctx context.Context, batch map[string]outputNote) {
	outs := make([]store.Output, 0, len(batch))
	for id, n := range batch {
		outs = append(outs, store.Output{RunID: id, HostID: n.host, Attempt: n.attempt})
	}
	waiting, err := o.s.store.TouchOutputs(ctx, outs)
	if err != nil {
		o.s.log.Warn("record output", "runs", len(outs), "err", err)
		return
	}
	for id, attempt := range waiting {
		if n := batch[id]; n.changed && n.attempt == attempt && !o.s.answers.busy(id) {
			_, _, err := o.s.runs.ChangeAttention(ctx, id, func(r lifecycle.Run) lifecycle.Decision {
				return lifecycle.ChangeAttention(r, attempt, lifecycle.Change{To: wire.AttentionNone, Source: wire.AttentionSourcePane, Over: []string{wire.AttentionIdle}})
			})
			if err != nil {
				o.s.log.Warn("clear attention on a pane change", "run_id", id, "err", err)
			}
		}
	}
}
