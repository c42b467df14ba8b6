package cli

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"slices"

	"pam/internal/datadir"
	"pam/internal/holder"
	"pam/internal/wrap"
)

// exitStatus is an exit code to end with, already explained on the
// terminal: `pam exec run` exits with its CLI's code.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

var execCmd = &command{
	name:    "exec",
	summary: "the wrapper the worker runs in each agent session (not for humans)",
	subs:    []*command{execRunCmd, execHoldCmd},
}

// execHoldCmd is the built-in PTY holder (executor pty,
// docs/architecture.md#the-pty-holder): the worker starts it detached,
// once per run, as `pam exec hold -- HOLDER_FLAGS -- PROGRAM ARGS…`. Its
// flags are package holder's own (holder.Start writes them), passed
// through after the first "--" so that this parser never reads them.
var execHoldCmd = &command{
	name:     "hold",
	args:     "-- HOLDER_FLAGS -- PROGRAM [ARGS…]",
	nargs:    1,
	variadic: true,
	summary: "hold a run's terminal (executor pty): own a PTY, run PROGRAM on it, serve readers on " +
		"<data>/worker/holders/NAME.sock; started detached by the worker",
	setup: func(fs *flag.FlagSet) func(*invocation) error {
		return func(x *invocation) error {
			if code := holder.Main(x.args, x.stderr); code != 0 {
				return exitStatus(code)
			}
			return nil
		}
	},
}

var execRunCmd = &command{
	name:  "run",
	args:  "RUN_ID",
	nargs: 1,
	summary: "run a run's provider CLI on this terminal: read <data>/worker/dispatch/RUN_ID.json, " +
		"start the CLI, post its started and finished signals (spooling what cannot be delivered), " +
		"then keep the session open for --hold-open; exits with the CLI's exit code",
	group: "exec",
	setup: func(fs *flag.FlagSet) func(*invocation) error {
		return func(x *invocation) error {
			logger, err := newLogger(x.cfg, x.stderr)
			if err != nil {
				return err
			}
			configDir := x.cfg.str("PAM_CONFIG_DIR")
			if configDir == "" {
				configDir = datadir.DefaultConfigDirIn(x.env.getenv)
			}
			code := wrap.Run(context.WithoutCancel(x.ctx), wrap.Options{
				WorkerDataDir: filepath.Join(x.cfg.str("PAM_DATA_DIR"), "worker"),
				ConfigDir:     configDir,
				RunID:         x.args[0],
				Stdin:         x.env.Stdin,
				Environ:       x.env.Environ,
				Stdout:        x.stdout,
				Stderr:        x.stderr,
				HoldOpen:      x.cfg.dur("PAM_HOLD_OPEN"),
				Logger:        logger,
				// The wrapper must outlive its CLI to report how it ended:
				// it takes the terminal's signals itself rather than through
				// the cancellation of x.ctx (see wrap.Options.HandleSignals).
				HandleSignals: true,
			})
			if code != 0 {
				return exitStatus(code)
			}
			return nil
		}
	},
}

// The exec group sits with the operator's commands in help, before the
// diagnostics (doctor, version).
func init() {
	i := slices.Index(root.subs, doctorCmd)
	if i < 0 {
		i = len(root.subs)
	}
	root.subs = slices.Insert(root.subs, i, execCmd)
}
