package server

import (
	"context"
	"sync"
	"time"

	"pam/internal/wire"
)

// Answers: keys and attach input given to a run that waits for a person
// clear its attention only once they were seen to land
// (docs/architecture.md#attention).

// answerSet counts the answers being checked, by run. While a run has
// one, a pane change does not clear its attention (outputs.write): the
// answer that made the change clears it, journaled with its own source,
// whichever of the two writes would come first.
type answerSet struct {
	mu      sync.Mutex
	n       map[string]int
	checked map[string]int // answers checked to the end, by run (tests)
}

// begin notes an answer to runID; done ends it.
func (a *answerSet) begin(runID string) (done func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.n == nil {
		a.n = map[string]int{}
	}
	a.n[runID]++
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.n[runID]--; a.n[runID] <= 0 {
			delete(a.n, runID)
		}
		if a.checked == nil {
			a.checked = map[string]int{}
		}
		a.checked[runID]++
	}
}

// done reports how many answers to runID were checked to the end.
func (a *answerSet) done(runID string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.checked[runID]
}

// busy reports whether an answer to runID is being checked.
func (a *answerSet) busy(runID string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n[runID] > 0
}

// panePoll is how often an answer looks whether the pane changed.
const panePoll = 20 * time.Millisecond

// paneChangedSince waits up to two capture intervals for the run's pane
// to move past seq before (a snapshot the server had not seen when the
// answer went in): whether the answer was observed. False when ctx ends.
func (s *Server) paneChangedSince(ctx context.Context, runID string, before int64) bool {
	deadline := time.Now().Add(2 * s.opts.CaptureInterval)
	for {
		if s.opts.Fleet.Pane(runID).Seq > before {
			return true
		}
		if !time.Now().Before(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(panePoll):
		}
	}
}

// answered clears the attention a person answered, from, once it is
// known what came of the answer (keys or attach input, journaled as
// source): idle whatever it was — any input ends a quiet spell —,
// needs_input and rate_limited only when the pane changed after it
// (observed), so that an answer that did not land leaves the run in the
// inbox. Whatever attention or question was set since the answer stays
// (store.ClearAnswered): the next question of an agent that took the
// answer is often the same attention with another text.
func (s *Server) answered(ctx context.Context, run wire.Run, observed bool, source string) {
	from := run.Attention
	switch {
	case from == wire.AttentionNone, from != wire.AttentionIdle && !observed:
		return
	}
	if _, _, err := s.runs.ClearAnswered(ctx, run.ID, run.Attempt, from, questionOf(run), source); err != nil && ctx.Err() == nil {
		s.log.Warn("clear attention after an answer", "run_id", run.ID, "source", source, "err", err)
	}
}

// questionOf is the question a run is asked, "" when none is known.
func questionOf(r wire.Run) string {
	if r.AttentionDetail == nil {
		return ""
	}
	return r.AttentionDetail.Text
}
