package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"time"

	"pam/internal/defaults"
	"pam/internal/fleetsim"
)

// fleetCmd is a real serve and a simulated fleet of real in-process
// workers on fake sessions (internal/fleetsim, docs/scaling.md).
var fleetCmd = &command{
	name:    "fleet",
	summary: "simulate a fleet of workers against a real serve: hosts held, heartbeats, dispatch, reconnect storm",
	setup: func(fs *flag.FlagSet) func(context.Context, env, []string) error {
		o := fleetsim.Options{}
		pam := fs.String("pam", "", "the pam binary to start as serve (default: the pam next to pam-bench, else on PATH)")
		fs.IntVar(&o.Workers, "workers", 500, "simulated workers (hosts)")
		fs.IntVar(&o.RunsPerWorker, "runs-per-worker", 10, "max_runs of each worker, and runs created per worker")
		fs.DurationVar(&o.Hold, "duration", time.Minute, "how long the full fleet is held for the steady-state figures")
		fs.DurationVar(&o.HeartbeatInterval, "heartbeat", defaults.HeartbeatInterval, "each worker's heartbeat interval")
		fs.DurationVar(&o.SnapshotInterval, "snapshot-every", 0, "how often each fake session's screen changes (0: only its first screen)")
		fs.BoolVar(&o.NoRestart, "no-restart", false, "skip the reconnect storm (serve restart)")
		fs.DurationVar(&o.Down, "down", 0, "how long serve stays stopped in the reconnect storm")
		fs.DurationVar(&o.Timeout, "timeout", 15*time.Minute, "bound of the whole simulation")
		quiet := fs.Bool("quiet", false, "do not log progress to stderr")
		asJSON := fs.Bool("json", false, `print {"figures":[...]} for the make bench table`)
		return func(ctx context.Context, e env, _ []string) error {
			if o.Workers < 1 || o.RunsPerWorker < 1 {
				return usagef("--workers and --runs-per-worker must be 1 or more")
			}
			var err error
			if o.Pam, err = findPam(*pam); err != nil {
				return err
			}
			o.Environ = e.environ
			if !*quiet {
				o.Logger = slog.New(slog.NewTextHandler(e.stderr, nil))
			}
			res, err := fleetsim.Run(ctx, o)
			if err != nil {
				if res != nil && !errors.Is(err, ctx.Err()) {
					_ = res.WriteTable(e.stderr) // what was measured before it failed
				}
				return err
			}
			if *asJSON {
				return printJSON(e.stdout, map[string]any{"figures": res.Rows()})
			}
			return res.WriteTable(e.stdout)
		}
	},
}
