package lifecycle_test

import (
	"testing"
	"time"

	"pam/internal/lifecycle"
	"pam/internal/wire"
)

func TestContinueDue(t *testing.T) {
	t.Parallel()
	resets := now.Add(-time.Minute)
	later := now.Add(time.Minute)
	earlier := resets.Add(-time.Hour)
	due := lifecycle.LimitReset{Status: wire.RunRunning, Attention: wire.AttentionRateLimited, ResetsAt: &resets, AutoContinue: true}
	with := func(f func(*lifecycle.LimitReset)) lifecycle.LimitReset { l := due; f(&l); return l }
	for _, tc := range []struct {
		name string
		l    lifecycle.LimitReset
		now  time.Time
		want bool
	}{
		{"due once resets_at passed", due, now, true},
		{"due at resets_at", due, resets, true},
		{"not before resets_at", with(func(l *lifecycle.LimitReset) { l.ResetsAt = &later }), now, false},
		{"not with auto_continue off", with(func(l *lifecycle.LimitReset) { l.AutoContinue = false }), now, false},
		{"not without a resets_at", with(func(l *lifecycle.LimitReset) { l.ResetsAt = nil }), now, false},
		{"not when needs_input", with(func(l *lifecycle.LimitReset) { l.Attention = wire.AttentionNeedsInput }), now, false},
		{"not when no attention", with(func(l *lifecycle.LimitReset) { l.Attention = wire.AttentionNone }), now, false},
		{"not when not running", with(func(l *lifecycle.LimitReset) { l.Status = wire.RunStopped }), now, false},
		{"not twice for the same reset", with(func(l *lifecycle.LimitReset) { l.Continued = &resets }), now, false},
		{"again for a later limit", with(func(l *lifecycle.LimitReset) { l.Continued = &earlier }), now, true},
	} {
		if got := lifecycle.ContinueDue(tc.l, tc.now); got != tc.want {
			t.Errorf("%s: ContinueDue = %t, want %t", tc.name, got, tc.want)
		}
	}
}
