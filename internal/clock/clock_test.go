package clock_test

import (
	"testing"
	"time"

	"pam/internal/clock"
)

func TestManualMovesOnlyWhenTold(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	m := clock.NewManual(t0)
	var now clock.Func = m.Now
	if got := now(); !got.Equal(t0) {
		t.Fatalf("now %s, want %s", got, t0)
	}
	if got := m.Advance(time.Hour); !got.Equal(t0.Add(time.Hour)) || !now().Equal(got) {
		t.Fatalf("after Advance: %s / %s", got, now())
	}
	m.Set(t0)
	if !now().Equal(t0) {
		t.Fatalf("after Set: %s", now())
	}
}

func TestOrDefaultsToTheRealTime(t *testing.T) {
	before := time.Now()
	got := clock.Or(nil)()
	if got.Before(before) || got.After(time.Now()) {
		t.Fatalf("Or(nil)() = %s, not the real time", got)
	}
	t0 := time.Unix(0, 0)
	if got := clock.Or(func() time.Time { return t0 })(); !got.Equal(t0) {
		t.Fatalf("Or(f) did not use f: %s", got)
	}
}
