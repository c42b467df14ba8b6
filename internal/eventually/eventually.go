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
