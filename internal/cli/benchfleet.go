package cli

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"pam/internal/defaults"
	"pam/internal/fleetsim"
)

// benchFleetCmd is `pam bench fleet`: a real serve and a simulated fleet
// of in-process workers (internal/fleetsim, docs/scaling.md).
var benchFleetCmd = &command{
	name:    "fleet",
	summary: "simulate a fleet of workers against a real serve: hosts held, heartbeats, dispatch, reconnect storm",
	setup: func(fs *flag.FlagSet) func(*invocation) error {
		o := fleetsim.Options{}
		fs.IntVar(&o.Workers, "workers", 500, "simulated workers (hosts)")
		fs.IntVar(&o.RunsPerWorker, "runs-per-worker", 10, "max_runs of each worker, and runs created per worker")
		fs.DurationVar(&o.Hold, "duration", time.Minute, "how long the full fleet is held for the steady-state figures")
		fs.DurationVar(&o.HeartbeatInterval, "heartbeat", defaults.HeartbeatInterval, "each worker's heartbeat interval")
		fs.DurationVar(&o.SnapshotInterval, "snapshot-every", 0, "how often each fake session's screen changes (0: only the greeting's)")
		fs.BoolVar(&o.UplinkSignals, "uplink-signals", false, "send the fake wrappers' signals on the uplink, not over HTTP")
		fs.BoolVar(&o.NoRestart, "no-restart", false, "skip the reconnect storm (serve restart)")
		fs.DurationVar(&o.Down, "down", 0, "how long serve stays stopped in the reconnect storm")
		fs.DurationVar(&o.Timeout, "timeout", 15*time.Minute, "bound of the whole simulation")
		quiet := fs.Bool("quiet", false, "do not log progress to stderr")
		asJSON := fs.Bool("json", false, `print {"figures":[...]} for the make bench table`)
		return func(x *invocation) error {
			if o.Workers < 1 || o.RunsPerWorker < 1 {
				return usagef("--workers and --runs-per-worker must be 1 or more")
			}
			self, err := os.Executable()
			if err == nil {
				self, err = filepath.Abs(self)
			}
			if err != nil {
				return fmt.Errorf("find the pam binary: %w", err)
			}
			o.Pam, o.Environ = self, x.env.Environ
			if o.Environ == nil {
				o.Environ = os.Environ()
			}
			if !*quiet {
				o.Logger = slog.New(slog.NewTextHandler(x.stderr, nil))
			}
			res, err := fleetsim.Run(x.ctx, o)
			if err != nil {
				if res != nil && !errors.Is(err, x.ctx.Err()) {
					_ = res.WriteTable(x.stderr) // what was measured before it failed
				}
				return err
			}
			if *asJSON {
				return printJSON(x.stdout, map[string]any{"figures": res.Rows()})
			}
			return res.WriteTable(x.stdout)
		}
	},
}

func init() { benchCmd.subs = append(benchCmd.subs, benchFleetCmd) }
