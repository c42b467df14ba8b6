// Package eventually is how pam's tests wait: for a condition to hold,
// checked on a short tick, failing the test at a deadline. One helper
// instead of a hand-written poll loop (and a sleep) in every package.
package eventually

import (
	"testing"
	"time"
)

// Tick is how often conditions are checked.
const Tick = 10 * time.Millisecond

// The named waits: how long a test waits for a condition before it fails.
// They are deadlines, not delays: a condition that holds sooner ends the
// wait sooner, so they are generous enough for a loaded two-core CI
// machine running the race detector. A test uses a literal duration when
// the duration is itself what is tested (a timeout, a grace period), or
// for the rare wait none of these fits (an agent CLI's whole turn).
const (
	// Short is for what happens inside the test's own process or one
	// query away: a write becoming visible, a goroutine settling, a
	// local server answering.
	Short = 5 * time.Second
	// Medium is for one hop through real processes: serve or a worker
	// acting on a request, tmux or a browser showing a change.
	Medium = 10 * time.Second
	// Long is for a chain of real processes: a run going through its
	// life, a worker or serve starting, stopping or reconnecting.
	Long = 30 * time.Second
)

// Wait checks cond until it holds, failing t with what it waited for once
// d has passed.
func Wait(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Within(d, cond) {
		t.Fatalf("timed out after %s waiting for %s", d, what)
	}
}

// Within checks cond until it holds or d passes, and reports which.
func Within(d time.Duration, cond func() bool) bool {
	if cond() {
		return true
	}
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(Tick)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if cond() {
				return true
			}
		case <-deadline.C:
			return cond()
		}
	}
}
