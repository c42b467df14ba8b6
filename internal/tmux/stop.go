package tmux

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"
)

// stopPoll is how often Stop looks whether the session has gone.
const stopPoll = 50 * time.Millisecond

// Stop is the graceful stop ladder (docs/architecture.md#stop-ladder): SIGTERM to the pane's
// process groups, wait up to grace for the pane's process to exit and
// the groups to empty, SIGKILL whatever is left, then kill-session.
// force skips the SIGTERM and the wait. A session that does not exist is
// already stopped: Stop returns nil.
//
// The groups are the process group of the pane's process (tmux makes it
// a session leader, so that is the wrapper and everything it did not move
// elsewhere) and the terminal's foreground process group, which covers a
// CLI the wrapper put in a group of its own. pam's own process group and
// the groups 0 and 1 are never signalled.
func (t *Tmux) Stop(ctx context.Context, name SessionName, grace time.Duration, force bool) error {
	if err := name.check(); err != nil {
		return err
	}
	p, err := t.Pane(ctx, name)
	if errors.Is(err, ErrNoSession) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stop %s: %w", name, err)
	}
	groups := paneGroups(p)
	if !force && grace > 0 {
		signalGroups(groups, syscall.SIGTERM)
		if err := t.waitGone(ctx, name, groups, grace); err != nil {
			return fmt.Errorf("stop %s: %w", name, err)
		}
	}
	signalGroups(groups, syscall.SIGKILL)
	if err := t.KillSession(ctx, name); err != nil && !errors.Is(err, ErrNoSession) {
		return fmt.Errorf("stop %s: %w", name, err)
	}
	return nil
}

// waitGone polls until the session has gone and no live process is left
// in groups, or grace has passed. Only ctx ending is an error.
func (t *Tmux) waitGone(ctx context.Context, name SessionName, groups []int, grace time.Duration) error {
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(stopPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return nil
		case <-tick.C:
		}
		alive, err := t.Alive(ctx, name)
		if err != nil || alive {
			continue
		}
		empty := true
		for _, g := range groups {
			empty = empty && !groupAlive(g)
		}
		if empty {
			return nil
		}
	}
}

// paneGroups is the set of process groups to signal for a pane.
func paneGroups(p Pane) []int {
	var groups []int
	add := func(g int) {
		if g <= 1 || g == syscall.Getpgrp() {
			return
		}
		for _, h := range groups {
			if h == g {
				return
			}
		}
		groups = append(groups, g)
	}
	if p.PID > 1 && !p.Dead {
		if g, err := syscall.Getpgid(p.PID); err == nil {
			add(g)
		}
	}
	if p.PID > 1 && !p.Dead {
		add(foregroundGroup(p.PID))
	}
	return groups
}

func signalGroups(groups []int, sig syscall.Signal) {
	for _, g := range groups {
		_ = syscall.Kill(-g, sig) // ESRCH: already gone
	}
}
