package server

import (
	"testing"
	"time"

	"pam/internal/wire"
)

// TestCallWindow: at most wire.AgentCallsPerMinute calls of one run in any
// minute; a refused call is not counted, the wait names when the oldest
// counted call leaves the minute, and runs are counted apart.
func TestCallWindow(t *testing.T) {
	c := newCallWindow()
	t0 := time.Unix(1_700_000_000, 0)
	const run, other = "run-a", "run-b"
	// 60 calls at the start of the minute, 40 spread over its second half.
	for i := range wire.AgentCallsPerMinute {
		at := t0
		if i >= 60 {
			at = t0.Add(30*time.Second + time.Duration(i-60)*time.Second/2)
		}
		if ok, _ := c.take(run, at); !ok {
			t.Fatalf("call %d refused", i+1)
		}
	}
	now := t0.Add(50 * time.Second)
	ok, wait := c.take(run, now)
	if ok || wait != 10*time.Second {
		t.Fatalf("call 101: ok %v, wait %s; want refused for 10s", ok, wait)
	}
	if ok, _ := c.take(other, now); !ok {
		t.Error("another run was refused")
	}
	if ok, _ := c.take(run, t0.Add(time.Minute-time.Nanosecond)); ok {
		t.Error("taken just before the first calls left the minute")
	}
	// The 60 first calls leave the minute together: 60 more fit, not 61.
	at := t0.Add(time.Minute)
	for i := range 60 {
		if ok, _ := c.take(run, at); !ok {
			t.Fatalf("call %d after the first minute refused", i+1)
		}
	}
	if ok, wait := c.take(run, at); ok || wait <= 0 {
		t.Errorf("call 61 after the first minute: ok %v, wait %s", ok, wait)
	}
}
