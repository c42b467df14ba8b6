package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"pam/internal/benchtable"
	"pam/internal/loadtest"
)

// benchCmd groups what measures pam (docs/bench.md): the load drivers,
// each printing its figures as a table or as {"figures":[...]}, and the
// table of make bench.
var benchCmd = &command{
	name:    "bench",
	summary: "measure pam: load drivers against real processes on loopback, and the table make bench prints (docs/bench.md)",
	subs:    []*command{benchLoadCmd, benchTableCmd},
}

var benchLoadCmd = &command{
	name: "load",
	summary: "start a real serve (embedded PostgreSQL) and worker on loopback, load them with live shell runs, SSE subscribers, " +
		"pane viewers and a stream of events, and print dispatch latency (idle and under load), SSE delivery latency, " +
		"memory and CPU; checks that every subscriber saw every event exactly once (exit 1 if not); " +
		"everything it starts is ended before it exits, also on Ctrl-C",
	setup: func(fs *flag.FlagSet) func(*invocation) error {
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
		return func(x *invocation) error {
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("the pam binary: %w", err)
			}
			environ := x.env.Environ
			if environ == nil {
				environ = os.Environ()
			}
			o := loadtest.Options{Pam: exe, Environ: environ, Executor: *executor, Runs: *runs, Subscribers: *subs,
				Viewers: *viewers, Duration: *duration, EventRate: *rate, CachedRuns: *cached, DispatchRate: *dispatchRate,
				Keep: *keep, Profile: *profile, Logger: slog.New(slog.NewTextHandler(x.stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))}
			if o.Executor == "" {
				o.Executor = x.env.getenv("PAM_EXECUTOR")
			}
			if o.Executor == "" {
				o.Executor = "tmux"
			}
			if err := o.Check(); err != nil {
				return usagef("%v", err)
			}
			res, err := loadtest.Run(x.ctx, o)
			if err != nil {
				if errors.Is(err, context.Canceled) && x.ctx.Err() != nil {
					return fmt.Errorf("interrupted; every process the load started has ended: %w", err)
				}
				return err
			}
			if *asJSON {
				if err := printJSON(x.stdout, benchtable.Report{Figures: res.Rows}); err != nil {
					return err
				}
				fmt.Fprintln(x.stderr, res.Summary())
			} else {
				if err := benchtable.WriteRows(x.stdout, "pam bench load", res.Rows); err != nil {
					return err
				}
				fmt.Fprintln(x.stdout, "\n"+res.Summary())
			}
			if !res.Clean() {
				return errSilent
			}
			return nil
		}
	},
}

var benchTableCmd = &command{
	name:     "table",
	args:     "[REPORT.json...]",
	variadic: true,
	summary: "print the table of make bench: the output of go test -bench read on stdin, and load drivers' reports " +
		"(REPORT.json, named by file: load.json is pam bench load's)",
	setup: func(fs *flag.FlagSet) func(*invocation) error {
		benchtime := fs.String("benchtime", "", "the -benchtime the benchmarks ran with, shown in the header")
		var skips stringList
		fs.Var(&skips, "skipped", "NAME=REASON: a driver that did not run, listed with its reason (repeatable)")
		asJSON := fs.Bool("json", false, `print every row as {"figures":[...]} instead of a table`)
		return func(x *invocation) error {
			g, err := benchtable.ParseGoBench(x.env.Stdin)
			if err != nil {
				return err
			}
			var sources []benchtable.Source
			for _, path := range x.args {
				sources = append(sources, readReport(path))
			}
			for _, s := range skips {
				name, reason, ok := strings.Cut(s, "=")
				if !ok {
					return usagef("--skipped %q: want NAME=REASON", s)
				}
				sources = append(sources, benchtable.Source{Name: name, Skipped: reason})
			}
			t := benchtable.Build(g, sources)
			if *asJSON {
				var rows []benchtable.Row
				for _, s := range t.Sections {
					rows = append(rows, s.Rows...)
				}
				return printJSON(x.stdout, benchtable.Report{Figures: rows})
			}
			header := "pam figures (docs/bench.md)"
			if *benchtime != "" {
				header += "; Go benchmarks at -benchtime=" + *benchtime
			}
			header += "; SAMPLES: the measurements behind a percentile or a rate"
			return t.Write(x.stdout, header)
		}
	},
}

// readReport reads one driver's report; one that cannot be read is
// listed as not run, with why.
func readReport(path string) benchtable.Source {
	name := "pam bench " + strings.TrimSuffix(filepath.Base(path), ".json")
	f, err := os.Open(path)
	if err != nil {
		return benchtable.Source{Name: name, Skipped: err.Error()}
	}
	defer f.Close()
	rep, err := benchtable.DecodeReport(f)
	if err != nil {
		return benchtable.Source{Name: name, Skipped: fmt.Sprintf("no figures in %s: %v", path, err)}
	}
	return benchtable.Source{Name: name, Rows: rep.Figures}
}

// stringList is a flag that may be given several times.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ", ") }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }
