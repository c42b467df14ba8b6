// Package clock is the one notion of "now" that decides things: timers
// that expire, cutoffs, "older than". Everything that decides by time
// takes a Func (nil meaning the real time) instead of calling time.Now, so
// a test can hold time still and move it past a timeout at once rather
// than sleep through a real one (docs/architecture.md#time).
//
// Tickers and timers that only pace a loop ("look again in a second")
// stay real: they decide when to look, the clock decides what is due.
package clock

import (
	"sync"
	"time"
)

// Func returns the current time; nil means time.Now.
type Func = func() time.Time

// Or returns f, or time.Now when f is nil.
func Or(f Func) Func {
	if f == nil {
		return time.Now
	}
	return f
}

// Manual is a clock that moves only when told; safe for concurrent use.
// Its Now method is the Func to inject.
type Manual struct {
	mu  sync.Mutex
	now time.Time
}

// NewManual returns a clock stopped at t.
func NewManual(t time.Time) *Manual { return &Manual{now: t} }

// Now is the clock's time.
func (m *Manual) Now() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// Advance moves the clock d forward and returns the new time.
func (m *Manual) Advance(d time.Duration) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now = m.now.Add(d)
	return m.now
}

// Set moves the clock to t (forward or back).
func (m *Manual) Set(t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now = t
}
