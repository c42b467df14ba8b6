package tmux

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// pam's tmux server has no prefix and no key bindings (docs/architecture.md#tmux-safety):
// the attach relay is a real tmux client, and with tmux's defaults whoever
// holds an attach lease could type C-b : and run any tmux command on the
// server — type into another run's pane, or kill-server every run of the
// host. Without a prefix, with mouse off and with every key table empty,
// every byte a client types goes to its own pane and nowhere else.

// hardenOptions are the server options that make every key binding
// unreachable: no prefix key (so the prefix table is never entered) and
// mouse off (tmux then forwards mouse events to the pane instead of
// looking them up in the root table). They never fail on a running server,
// so they can lead the command sequence that creates a session: the
// server that sequence starts is hardened before the session exists.
func hardenOptions() [][]string {
	return [][]string{
		{"set-option", "-g", "prefix", "None"},
		{"set-option", "-g", "prefix2", "None"},
		{"set-option", "-g", "mouse", "off"},
	}
}

// Harden removes every key binding of pam's tmux server, in every key
// table list-keys shows (root, prefix, copy-mode, copy-mode-vi and any
// other), and sets the options of hardenOptions; it checks afterwards
// that no binding is left. It is idempotent. The worker calls it at start,
// so that a server started by an earlier pam (with tmux's default
// bindings) is hardened before any of its sessions can be attached, and
// NewSession calls it after each creation. No server running is nothing
// to harden.
func (t *Tmux) Harden(ctx context.Context) error {
	if _, err := t.run(ctx, hardenOptions()...); errors.Is(err, errNoServer) {
		return nil
	} else if err != nil {
		return fmt.Errorf("harden tmux server: %w", err)
	}
	// unbind-key -a -T removes a whole table, and fails on a table that
	// does not exist, which would end the rest of a command sequence: only
	// the tables list-keys shows are removed, and the result is checked.
	// A few rounds cover a table appearing meanwhile.
	for range 3 {
		tables, err := t.keyTables(ctx)
		if err != nil {
			return fmt.Errorf("harden tmux server: %w", err)
		}
		if len(tables) == 0 {
			return nil
		}
		cmds := make([][]string, 0, len(tables))
		for _, tb := range tables {
			cmds = append(cmds, []string{"unbind-key", "-a", "-T", tb})
		}
		if _, err := t.run(ctx, cmds...); err != nil && !errors.Is(err, errNoServer) {
			return fmt.Errorf("harden tmux server: unbind keys: %w", err)
		}
	}
	tables, err := t.keyTables(ctx)
	if err != nil {
		return fmt.Errorf("harden tmux server: %w", err)
	}
	if len(tables) > 0 {
		return fmt.Errorf("harden tmux server: key tables %q still have bindings", tables)
	}
	return nil
}

// keyTables lists the key tables that hold at least one binding.
func (t *Tmux) keyTables(ctx context.Context) ([]string, error) {
	out, err := t.run(ctx, []string{"list-keys"})
	if errors.Is(err, errNoServer) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", err)
	}
	return parseKeyTables(out), nil
}

// parseKeyTables reads the table names of list-keys output, whose lines
// are "bind-key [-r] -T TABLE KEY COMMAND…", each table once in order.
func parseKeyTables(out string) []string {
	var tables []string
	seen := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "-T" {
				if tb := f[i+1]; !seen[tb] {
					seen[tb] = true
					tables = append(tables, tb)
				}
				break
			}
		}
	}
	return tables
}
