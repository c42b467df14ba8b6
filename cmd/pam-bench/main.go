// Command pam-bench measures pam (docs/bench.md): the load driver
// (pam-bench load), the simulated fleet (pam-bench fleet) and the table
// make bench prints (pam-bench table). It is a tool of the repository,
// not part of the product: bin/pam does not link any of it. The drivers
// start the real pam binary (--pam, by default the pam next to this
// executable, else the one on PATH) as serve and worker processes.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal starts a clean shutdown, a second one gets
	// the default behaviour and ends the process at once.
	go func() { <-ctx.Done(); stop() }()
	os.Exit(run(ctx, os.Args[1:], env{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr,
		environ: os.Environ(), getenv: os.Getenv}))
}

// env is what a command reads and writes: the process's own in main, a
// test's in the tests.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	environ        []string
	getenv         func(string) string
}

// command is one subcommand: its flags, and what it does once they are
// parsed.
type command struct {
	name, args, summary string
	setup               func(fs *flag.FlagSet) func(ctx context.Context, e env, args []string) error
}

var commands = []*command{loadCmd, fleetCmd, tableCmd}

// usageError is a mistake in how pam-bench was called: exit 2 with usage.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

// errSilent is a failure already reported on stdout/stderr: exit 1.
var errSilent = errors.New("failed")

// run runs pam-bench with args (without the program name) and returns
// the exit status: 0, 1 when what it ran failed, 2 on a usage error.
func run(ctx context.Context, args []string, e env) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		w := e.stdout
		if len(args) == 0 {
			w = e.stderr
		}
		fmt.Fprintf(w, "Usage: pam-bench <command> [flags] [arguments]\n\nMeasure pam (docs/bench.md).\n\nCommands:\n")
		for _, c := range commands {
			fmt.Fprintf(w, "  %-6s %s\n", c.name, c.summary)
		}
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	var cmd *command
	for _, c := range commands {
		if c.name == args[0] {
			cmd = c
		}
	}
	if cmd == nil {
		fmt.Fprintf(e.stderr, "pam-bench: unknown command %q\nRun 'pam-bench --help' for the commands.\n", args[0])
		return 2
	}
	path := "pam-bench " + cmd.name
	synopsis := path + " [flags]"
	if cmd.args != "" {
		synopsis += " " + cmd.args
	}
	fs := flag.NewFlagSet(path, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	do := cmd.setup(fs)
	// Flags may follow the arguments, as with pam's commands.
	var pos []string
	rest := args[1:]
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fmt.Fprintf(e.stdout, "Usage: %s\n\n%s\n\nFlags:\n", synopsis, cmd.summary)
				fs.SetOutput(e.stdout)
				fs.PrintDefaults()
				return 0
			}
			fmt.Fprintf(e.stderr, "pam-bench: %v\nUsage: %s\nRun '%s --help' for the flags.\n", err, synopsis, path)
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if cmd.args == "" && len(pos) > 0 {
		fmt.Fprintf(e.stderr, "pam-bench: %s takes no arguments\nUsage: %s\n", path, synopsis)
		return 2
	}
	err := do(ctx, e, pos)
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(e.stderr, "pam-bench: %s\nUsage: %s\nRun '%s --help' for the flags.\n", ue.msg, synopsis, path)
		return 2
	case errors.Is(err, errSilent):
		return 1
	default:
		fmt.Fprintf(e.stderr, "pam-bench: %v\n", err)
		return 1
	}
}

// findPam is the pam binary the drivers start: flag when given, else the
// pam next to this executable (make bench builds both into bin/), else
// the one on PATH.
func findPam(flag string) (string, error) {
	if flag != "" {
		if _, err := os.Stat(flag); err != nil {
			return "", fmt.Errorf("--pam: %w", err)
		}
		return filepath.Abs(flag)
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "pam")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	p, err := exec.LookPath("pam")
	if err != nil {
		return "", usagef("no pam binary next to pam-bench nor on PATH: build it (go build -o bin/pam ./cmd/pam) or give --pam")
	}
	return filepath.Abs(p)
}

// printJSON writes v as indented JSON, as pam's --json does.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// stringList is a flag that may be given several times.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ", ") }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }
