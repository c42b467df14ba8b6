package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"pam/internal/benchtable"
)

var tableCmd = &command{
	name: "table",
	args: "[REPORT.json...]",
	summary: "print the table of make bench: the output of go test -bench read on stdin, and load drivers' reports " +
		"(REPORT.json, named by file: load.json is pam-bench load's)",
	setup: func(fs *flag.FlagSet) func(context.Context, env, []string) error {
		benchtime := fs.String("benchtime", "", "the -benchtime the benchmarks ran with, shown in the header")
		var skips stringList
		fs.Var(&skips, "skipped", "NAME=REASON: a driver that did not run, listed with its reason (repeatable)")
		asJSON := fs.Bool("json", false, `print every row as {"figures":[...]} instead of a table`)
		return func(_ context.Context, e env, args []string) error {
			g, err := benchtable.ParseGoBench(e.stdin)
			if err != nil {
				return err
			}
			var sources []benchtable.Source
			for _, path := range args {
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
				return printJSON(e.stdout, benchtable.Report{Figures: rows})
			}
			header := "pam figures (docs/bench.md)"
			if *benchtime != "" {
				header += "; Go benchmarks at -benchtime=" + *benchtime
			}
			header += "; SAMPLES: the measurements behind a percentile or a rate"
			return t.Write(e.stdout, header)
		}
	},
}

// readReport reads one driver's report, named after its file (load.json
// is pam-bench load's); one that cannot be read is listed as not run,
// with why.
func readReport(path string) benchtable.Source {
	name := "pam-bench " + strings.TrimSuffix(filepath.Base(path), ".json")
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
