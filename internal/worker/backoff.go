package worker

import "time"

// The uplink's reconnect backoff when Options leaves it zero. They and
// ReconnectDelay are exported so that the simulated fleet of `pam-bench
// fleet` (internal/fleetsim) comes back after a serve restart exactly as
// real workers do: a reconnect storm measured with another policy would
// say nothing about this one.
const (
	DefaultBackoffMin = time.Second
	DefaultBackoffMax = 30 * time.Second
)

// ReconnectDelay is how long a worker whose uplink failed with the
// backoff at backoff waits before it tries again: the worker's jitter
// within [lo, hi] (uplinkLoop doubles backoff after each failure and
// resets it to lo after a connection that was up).
func ReconnectDelay(backoff, lo, hi time.Duration) time.Duration { return jitter(backoff, lo, hi) }
