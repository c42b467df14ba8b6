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
// looking them up in the root table).
func hardenOptions() [][]string {
	return [][]string{
		{"set-option", "-g", "prefix", "None"},
		{"set-option", "-g", "prefix2", "None"},
		{"set-option", "-g", "mouse", "off"},
	}
}

// defaultKeyTables are the key tables a tmux server starts with.
var defaultKeyTables = []string{"root", "prefix", "copy-mode", "copy-mode-vi"}

// hardenCommands are hardenOptions, then the removal of every default key
// table, as commands that cannot fail on a running server, whether a
// fresh one (tables full) or one already hardened (tables gone). They
// lead the invocation that creates a session, so the server it starts
// has no binding before the session exists. unbind-key -a -T fails on a
// table that does not exist, and a failing command silently ends the rest
// of a sequence (with exit status 0): each table is first made to exist
// by binding a key in it, within the same sequence (the server runs it
// without taking client input in between), then removed whole.
func hardenCommands() [][]string {
	cmds := hardenOptions()
	for _, tb := range defaultKeyTables {
		cmds = append(cmds,
			[]string{"bind-key", "-T", tb, "F12", "refresh-client"},
			[]string{"unbind-key", "-a", "-T", tb})
	}
	return cmds
}

// Harden removes every key binding of pam's tmux server, in every key
// table list-keys shows (root, prefix, copy-mode, copy-mode-vi and any
// other), and sets the options of hardenOptions; it checks afterwards
// that no binding is left. It is idempotent. The worker calls it at start,
// so that a server started by an earlier pam (with tmux's default
// bindings, or a table of its own) is hardened before any of its sessions
// can be attached; NewSession hardens the server it starts itself
// (hardenCommands). No server running is nothing to harden.
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
