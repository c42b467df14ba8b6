// Package defaults is the one table of pam's default settings: the value
// each PAM_* setting has when nobody sets it (docs/architecture.md,
// "Configuration"). The CLI's settings table shows them in --help and
// fills Options from them; each package that takes an Options falls back to
// the same constants when a field is left zero, so that a test or an
// embedding caller gets the documented behaviour and no value exists in two
// places.
package defaults

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Central (pam serve) timers and limits.
const (
	HostOfflineAfter    = 90 * time.Second // PAM_HOST_OFFLINE_AFTER
	HostLostAfter       = 24 * time.Hour   // PAM_HOST_LOST_AFTER
	DispatchTimeout     = 5 * time.Minute  // PAM_DISPATCH_TIMEOUT
	DispatchAckTimeout  = 10 * time.Second // PAM_DISPATCH_ACK_TIMEOUT
	CLIHangTimeout      = 30 * time.Minute // PAM_CLI_HANG_TIMEOUT
	CompletedStopAfter  = time.Hour        // PAM_COMPLETED_STOP_AFTER
	RestartInitialDelay = 10 * time.Second // PAM_RESTART_INITIAL_DELAY
	RestartMaxDelay     = 60 * time.Second // PAM_RESTART_MAX_DELAY
	MaxAttempts         = 3                // PAM_MAX_ATTEMPTS
	EventRetention      = 720 * time.Hour  // PAM_EVENT_RETENTION
	LeaseTTL            = 5 * time.Minute  // PAM_LEASE_TTL
	SpawnTimeout        = 60 * time.Second // PAM_SPAWN_TIMEOUT
)

// Never, as the value of an Options timer whose variable allows 0 for
// "never" (PAM_COMPLETED_STOP_AFTER), turns the timer off: a zero field
// means the default there, like every other.
const Never time.Duration = -1

// Worker timers and limits.
const (
	MaxRuns           = 8                // PAM_MAX_RUNS
	HeartbeatInterval = 30 * time.Second // PAM_HEARTBEAT_INTERVAL
	CaptureInterval   = time.Second      // PAM_CAPTURE_INTERVAL
	IdleAfter         = 30 * time.Second // PAM_IDLE_AFTER
	LivenessInterval  = 10 * time.Second // PAM_LIVENESS_INTERVAL
	ReconcileInterval = 30 * time.Second // PAM_RECONCILE_INTERVAL
	OrphanHold        = time.Hour        // PAM_ORPHAN_HOLD
	StopGrace         = 10 * time.Second // PAM_STOP_GRACE
	HoldOpen          = 5 * time.Minute  // PAM_HOLD_OPEN
	// WorktreeRetention: a finished run's worktree is removed this long
	// after it ended (PAM_WORKTREE_RETENTION).
	WorktreeRetention = 168 * time.Hour
	// WorktreeBudget: past this many bytes of worktrees, finished runs'
	// are removed oldest first, those with unpushed or uncommitted work
	// never (PAM_WORKTREE_BUDGET, "20GB").
	WorktreeBudget = 20 * 1000 * 1000 * 1000
)

// ParseSize reads a size such as "20GB", "512MiB", "1.5G" or "1000":
// decimal units (KB, MB, GB, TB; K, M, G, T) and binary ones (KiB, MiB,
// GiB, TiB), bytes without a unit.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.TrimSpace(t[i:])
	}
	units := map[string]float64{
		"": 1, "B": 1,
		"K": 1e3, "KB": 1e3, "M": 1e6, "MB": 1e6, "G": 1e9, "GB": 1e9, "T": 1e12, "TB": 1e12,
		"KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40,
	}
	mult, ok := units[strings.ToUpper(unit)]
	f, err := strconv.ParseFloat(num, 64)
	if !ok || err != nil || f < 0 || f*mult > 1<<62 {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional unit (KB, MB, GB, TB, KiB, MiB, GiB, TiB)", s)
	}
	return int64(f * mult), nil
}

// Duration writes d the way the documentation and --help show it: the
// largest whole unit, in Go syntax ("90s", "5m", "24h").
func Duration(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	}
	return d.String()
}
