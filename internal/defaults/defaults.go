// Package defaults is the one table of pam's default settings: the value
// each PAM_* setting has when nobody sets it (docs/architecture.md,
// "Configuration"). The CLI's settings table shows them in --help and
// fills Options from them; each package that takes an Options falls back to
// the same constants when a field is left zero, so that a test or an
// embedding caller gets the documented behaviour and no value exists in two
// places.
package defaults

import (
	"strconv"
	"time"
)

// Central (pam serve) timers and limits.
const (
	HostOfflineAfter    = 90 * time.Second // PAM_HOST_OFFLINE_AFTER
	HostLostAfter       = 24 * time.Hour   // PAM_HOST_LOST_AFTER
	DispatchTimeout     = 5 * time.Minute  // PAM_DISPATCH_TIMEOUT
	DispatchAckTimeout  = 10 * time.Second // PAM_DISPATCH_ACK_TIMEOUT
	CLIHangTimeout      = 30 * time.Minute // PAM_CLI_HANG_TIMEOUT
	RestartInitialDelay = 10 * time.Second // PAM_RESTART_INITIAL_DELAY
	RestartMaxDelay     = 60 * time.Second // PAM_RESTART_MAX_DELAY
	MaxAttempts         = 3                // PAM_MAX_ATTEMPTS
	EventRetention      = 720 * time.Hour  // PAM_EVENT_RETENTION
	LeaseTTL            = 5 * time.Minute  // PAM_LEASE_TTL
	SpawnTimeout        = 60 * time.Second // PAM_SPAWN_TIMEOUT
)

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
)

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
