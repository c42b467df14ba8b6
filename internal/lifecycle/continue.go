package lifecycle

import (
	"time"

	"pam/internal/wire"
)

// LimitReset is what ContinueDue reads of a run stopped at a usage limit
// (docs/architecture.md#continue-when-a-limit-resets).
type LimitReset struct {
	Status    string     // the run's status
	Attention string     // the run's attention
	ResetsAt  *time.Time // attention_detail.resets_at, nil when not read
	// AutoContinue is the project's auto_continue.
	AutoContinue bool
	// Continued is the resets_at of the last limit pam sent this attempt
	// its continue message for, nil when it sent none.
	Continued *time.Time
}

// ContinueDue reports whether pam sends a run its provider's continue
// message now: the run is running, rate_limited with a known resets_at
// that has passed, its project's auto_continue is on, and pam has not
// already continued it for this reset (a later limit, with a later
// resets_at, is continued again).
func ContinueDue(l LimitReset, now time.Time) bool {
	switch {
	case l.Status != wire.RunRunning, l.Attention != wire.AttentionRateLimited, !l.AutoContinue:
		return false
	case l.ResetsAt == nil || now.Before(*l.ResetsAt):
		return false
	case l.Continued != nil && !l.Continued.Before(*l.ResetsAt):
		return false
	}
	return true
}
