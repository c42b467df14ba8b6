package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"pam/internal/benchtable"
	"pam/internal/loadtest"
)

var loadCmd = &command{
	name: "load",
	summary: "start a real serve (embedded PostgreSQL) and worker on loopback, load them with live shell runs, SSE subscribers, " +
		"pane viewers and a stream of events, and print dispatch latency (idle and under load), SSE delivery latency, " +
		"memory and CPU; checks that every subscriber saw every event exactly once (exit 1 if not); " +
		"everything it starts is ended before it exits, also on Ctrl-C",
	setup: func(fs *flag.FlagSet) func(context.Context, env, []string) error {
		pam := fs.String("pam", "", "the pam binary to start (default: the pam next to pam-bench, else on PATH)")
		runs := fs.Int("runs", 200, "live shell runs on the worker, each printing a line a second")
		subs := fs.Int("subscribers", 100, "SSE clients of /api/v1/events/stream")
		viewers := fs.Int("viewers", 50, "pane WebSockets (/api/v1/runs/{id}/pane/ws), spread over the runs")
		duration := fs.Duration("duration", 30*time.Second, "how long the full load lasts")
		rate := fs.Int("event-rate", 1000, "events per second written during the load (work-item updates)")
		cached := fs.Int("cached-runs", 1000, "runs dispatched one at a time before the load: the idle dispatch baseline; each leaves a full screen in serve's pane cache")
		dispatchRate := fs.Int("dispatch-rate", 50, "runs per second dispatched during the load, each a dispatch latency sample")
		executor := fs.String("executor", "", "the worker's executor: tmux or pty (default $PAM_EXECUTOR, else tmux)")
		keep := fs.Bool("keep", false, "keep the temporary folder (the processes' logs, the database) and say where")
		profile := fs.String("profile", "", "write a CPU profile of serve during the load to this file (go tool pprof reads it)")
		asJSON := fs.Bool("json", false, `print {"figures":[...]} instead of a table`)
		return func(ctx context.Context, e env, _ []string) error {
			o := loadtest.Options{Environ: e.environ, Executor: *executor, Runs: *runs, Subscribers: *subs,
				Viewers: *viewers, Duration: *duration, EventRate: *rate, CachedRuns: *cached, DispatchRate: *dispatchRate,
				Keep: *keep, Profile: *profile, Logger: slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))}
			if o.Executor == "" {
				o.Executor = e.getenv("PAM_EXECUTOR")
			}
			if o.Executor == "" {
				o.Executor = "tmux"
			}
			// The load is checked before the binary is looked for: a
			// mistake in it is a usage error wherever pam is.
			check := o
			check.Pam = "pam"
			if err := check.Check(); err != nil {
				return usagef("%v", err)
			}
			var err error
			if o.Pam, err = findPam(*pam); err != nil {
				return err
			}
			res, err := loadtest.Run(ctx, o)
			if err != nil {
				if errors.Is(err, context.Canceled) && ctx.Err() != nil {
					return fmt.Errorf("interrupted; every process the load started has ended: %w", err)
				}
				return err
			}
			if *asJSON {
				if err := printJSON(e.stdout, benchtable.Report{Figures: res.Rows}); err != nil {
					return err
				}
				fmt.Fprintln(e.stderr, res.Summary())
			} else {
				if err := benchtable.WriteRows(e.stdout, "pam-bench load", res.Rows); err != nil {
					return err
				}
				fmt.Fprintln(e.stdout, "\n"+res.Summary())
			}
			if !res.Clean() {
				return errSilent
			}
			return nil
		}
	},
}
