// Package cli is the pam command line: it is the only package that reads
// flags and PAM_* variables (flags over environment over defaults,
// docs/architecture.md#configuration-and-files-on-disk), and it turns them into Options structs for the packages
// that do the work, or into calls of the typed API client.
//
// Exit status: 0 success, 1 the operation failed (the error envelope's
// message goes to stderr), 2 usage error.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"pam/internal/apiclient"
	"pam/internal/wire"
)

// command is a node of the command tree: a group with subcommands, or a
// leaf that registers its flags and returns the function that runs it.
type command struct {
	name    string
	args    string // synopsis of the positional arguments, e.g. "REF"
	summary string
	// nargs is the exact number of positional arguments a leaf takes
	// (the least, when variadic).
	nargs    int
	variadic bool
	// names is the kind of object the first positional argument names:
	// x.client() turns an id prefix there into the whole id.
	names *idKind
	// group names the settings the leaf registers (see settings.Uses);
	// empty registers none.
	group string
	reg   registerOpts
	setup func(fs *flag.FlagSet) func(x *invocation) error
	subs  []*command
}

// invocation is what a running leaf command gets.
type invocation struct {
	ctx    context.Context
	env    Env // resolved: no zero fields
	stdout io.Writer
	stderr io.Writer
	cfg    *config
	args   []string
	path   string // "pam project create"
	names  *idKind
	api    *apiclient.Client // built by the first client()
}

// root is the command table. Every entry is reachable by Main, listed in
// help and covered by the help tests.
var root = &command{
	name:    "pam",
	summary: "orchestrate AI coding agents over a fleet of hosts",
	subs: []*command{
		upCmd,
		serveCmd,
		projectCmd,
		itemCmd,
		runCmd,
		hostCmd,
		tokenCmd,
		notifyCmd,
		eventsCmd,
		doctorCmd,
		versionCmd,
	},
}

// usageError is a mistake in how pam was called: exit 2 with usage.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// errSilent is a failure already reported on stdout/stderr: exit 1.
var errSilent = errors.New("failed")

// Main runs pam with args (without the program name) in this process's
// environment and returns the exit status.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return Env{}.Main(ctx, args, stdout, stderr)
}

// Main runs pam with args (without the program name) in the environment
// e and returns the exit status.
func (e Env) Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	e = e.resolved()
	err := dispatch(ctx, e, root, args, "pam", stdout, stderr)
	var ue *usageError
	var ce *cmdUsageError
	var xs exitStatus
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ce):
		fmt.Fprintf(stderr, "%s: %s\n", ce.path, ce.msg)
		if ce.cmd.subs != nil && ce.cmd.setup == nil {
			fmt.Fprintln(stderr)
			printUsage(stderr, e, ce.cmd, ce.path, nil)
		} else {
			fmt.Fprintf(stderr, "Usage: %s\nRun '%s --help' for the flags.\n", synopsis(ce.cmd, ce.path, ce.fs), ce.path)
		}
		return 2
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "pam: %s\n", ue.msg)
		return 2
	case errors.Is(err, errSilent):
		return 1
	case errors.As(err, &xs):
		return int(xs) // already reported (pam exec run: its CLI's code)
	default:
		fmt.Fprintf(stderr, "pam: %s\n", describe(err))
		return 1
	}
}

// cmdUsageError is a usage error with the command to show the usage of.
type cmdUsageError struct {
	cmd  *command
	path string
	fs   *flag.FlagSet
	msg  string
}

func (e *cmdUsageError) Error() string { return e.msg }

// describe renders an operation failure: the envelope's message for API
// errors, plus the field a validation failure names.
func describe(err error) string {
	we, ok := wire.AsError(err)
	if !ok {
		return err.Error()
	}
	msg := we.Message
	if msg == "" {
		msg = we.Code
	}
	if f, ok := we.Details["field"].(string); ok && f != "" && !strings.Contains(msg, f) {
		msg += " (field " + f + ")"
	}
	return msg
}

func isHelp(arg string) bool {
	return arg == "help" || arg == "-h" || arg == "--help" || arg == "-help"
}

func dispatch(ctx context.Context, e Env, cmd *command, args []string, path string, stdout, stderr io.Writer) error {
	if cmd.subs == nil || cmd.setup != nil && (len(args) == 0 || sub(cmd, args[0]) == nil) {
		// A leaf, or a command that runs itself unless its first argument
		// names one of its subcommands (pam worker, pam worker install).
		return runLeaf(ctx, e, cmd, args, path, stdout, stderr)
	}
	if len(args) == 0 {
		return &cmdUsageError{cmd: cmd, path: path, msg: "missing command"}
	}
	if isHelp(args[0]) {
		// "pam help project create" is "pam project create --help".
		if args[0] == "help" && len(args) > 1 {
			return dispatch(ctx, e, cmd, append(slices.Clone(args[1:]), "--help"), path, stdout, stderr)
		}
		printUsage(stdout, e, cmd, path, nil)
		return nil
	}
	if s := sub(cmd, args[0]); s != nil {
		return dispatch(ctx, e, s, args[1:], path+" "+s.name, stdout, stderr)
	}
	return &cmdUsageError{cmd: cmd, path: path, msg: fmt.Sprintf("unknown command %q", args[0])}
}

// sub is cmd's subcommand called name, or nil.
func sub(cmd *command, name string) *command {
	for _, s := range cmd.subs {
		if s.name == name {
			return s
		}
	}
	return nil
}

func runLeaf(ctx context.Context, e Env, cmd *command, args []string, path string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(path, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var cfg *config
	if cmd.group != "" {
		cfg = register(fs, cmd.group, e, cmd.reg)
	}
	run := cmd.setup(fs)
	if len(args) > 0 && args[0] == "help" {
		printUsage(stdout, e, cmd, path, fs)
		return nil
	}
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		printUsage(stdout, e, cmd, path, fs)
		return nil
	}
	if err != nil {
		return &cmdUsageError{cmd: cmd, path: path, fs: fs, msg: flagMessage(err.Error())}
	}
	if cfg != nil {
		if err := cfg.check(); err != nil {
			return &cmdUsageError{cmd: cmd, path: path, fs: fs, msg: err.Error()}
		}
	}
	if len(pos) < cmd.nargs {
		return &cmdUsageError{cmd: cmd, path: path, fs: fs, msg: "missing " + cmd.args}
	}
	if len(pos) > cmd.nargs && !cmd.variadic {
		return &cmdUsageError{cmd: cmd, path: path, fs: fs, msg: fmt.Sprintf("unexpected argument %q", pos[cmd.nargs])}
	}
	err = run(&invocation{ctx: ctx, env: e, stdout: stdout, stderr: stderr, cfg: cfg, args: pos, path: path, names: cmd.names})
	var ue *usageError
	if errors.As(err, &ue) {
		return &cmdUsageError{cmd: cmd, path: path, fs: fs, msg: ue.msg}
	}
	return err
}

// flagMessage spells the flag package's errors with the double dashes
// pam's help uses: "invalid value "x" for flag --lease-ttl: …".
var flagMessage = strings.NewReplacer(
	"for flag -", "for flag --",
	"not defined: -", "not defined: --",
	"needs an argument: -", "needs an argument: --",
).Replace

// parseInterspersed parses flags wherever they appear among the
// positional arguments ("pam project show REF --json"); everything after
// "--" is positional.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// printUsage writes the help of cmd. For a leaf, fs holds its flags: the
// command's own first, then the PAM_* settings with their variables (as
// set in e, which are shown as the defaults).
func printUsage(w io.Writer, e Env, cmd *command, path string, fs *flag.FlagSet) {
	if cmd.subs != nil && cmd.setup == nil {
		fmt.Fprintf(w, "Usage: %s <command> [flags] [arguments]\n\n", path)
		fmt.Fprintf(w, "%s\n\nCommands:\n", capitalize(cmd.summary))
		printCommands(w, cmd)
		fmt.Fprintf(w, "\nRun '%s <command> --help' for the flags of a command.\n", path)
		return
	}
	if fs == nil {
		fs = flag.NewFlagSet(path, flag.ContinueOnError)
		if cmd.group != "" {
			register(fs, cmd.group, e, cmd.reg)
		}
		cmd.setup(fs)
	}
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", synopsis(cmd, path, fs), capitalize(cmd.summary))
	var own, env []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := settingOf(f); ok {
			env = append(env, f)
		} else {
			own = append(own, f)
		}
	})
	if len(own) > 0 {
		fmt.Fprintf(w, "\nFlags:\n")
		printFlags(w, own)
	}
	if len(env) > 0 {
		fmt.Fprintf(w, "\nSettings (flag, else environment variable, else default):\n")
		printFlags(w, env)
	}
	if cmd.subs != nil {
		fmt.Fprintf(w, "\nCommands:\n")
		printCommands(w, cmd)
		fmt.Fprintf(w, "\nRun '%s <command> --help' for the flags of a command.\n", path)
	}
}

func printCommands(w io.Writer, cmd *command) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, s := range cmd.subs {
		fmt.Fprintf(tw, "  %s\t%s\n", s.name, s.summary)
	}
	tw.Flush()
}

// synopsis is the one-line usage of a leaf: "pam project show [flags] REF".
func synopsis(cmd *command, path string, fs *flag.FlagSet) string {
	s := path
	if fs == nil || hasOwnFlags(fs) || cmd.group != "" {
		s += " [flags]"
	}
	if cmd.args != "" {
		s += " " + cmd.args
	}
	return s
}

func hasOwnFlags(fs *flag.FlagSet) bool {
	own := false
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := settingOf(f); !ok {
			own = true
		}
	})
	return own
}

// settingOf reports whether a flag was registered from the settings
// table (by its value, not its name: a command's own flag may share a
// setting's name, as run start's --max-attempts does PAM_MAX_ATTEMPTS').
func settingOf(f *flag.Flag) (setting, bool) {
	if v, ok := f.Value.(*value); ok {
		return v.s, true
	}
	return setting{}, false
}

func printFlags(w io.Writer, flags []*flag.Flag) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, f := range flags {
		typ, help := flag.UnquoteUsage(f)
		if v, ok := f.Value.(*value); ok {
			typ = [...]string{kindString: "string", kindInt: "int", kindBool: "", kindDuration: "duration", kindSize: "size"}[v.s.Kind]
			if v.s.Secret {
				typ = "file"
			}
		}
		name := "--" + f.Name
		if typ != "" {
			name += " " + typ
		}
		var notes []string
		s, isEnv := settingOf(f)
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && !(isEnv && s.Secret) {
			notes = append(notes, "default "+f.DefValue)
		}
		if isEnv {
			notes = append(notes, "$"+s.Env)
		}
		if len(notes) > 0 {
			help += " (" + strings.Join(notes, ", ") + ")"
		}
		fmt.Fprintf(tw, "  %s\t%s\n", name, help)
	}
	tw.Flush()
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:] + "."
}

// client builds the API client of a client command from PAM_URL,
// PAM_TOKEN (or the token file) and PAM_CA_FILE. The first call also
// resolves the command's first argument when it names an object (see
// command.names): from then on x.args[0] is the whole id (or a slug or a
// name the API takes), so every command that talks to the server takes
// id prefixes, and none before its own checks of its flags.
func (x *invocation) client() (*apiclient.Client, error) {
	if x.api != nil {
		return x.api, nil
	}
	base := x.cfg.str("PAM_URL")
	if err := checkURL(base, x.cfg.bool("PAM_ALLOW_INSECURE")); err != nil {
		return nil, err
	}
	tok, err := x.cfg.token()
	if err != nil {
		return nil, err
	}
	c, err := apiclient.New(base, tok, x.cfg.str("PAM_CA_FILE"))
	if err != nil {
		return nil, err
	}
	if x.names != nil && len(x.args) > 0 {
		if x.args[0], err = x.ref(c, x.names, x.args[0]); err != nil {
			return nil, err
		}
	}
	x.api = c
	return c, nil
}

// printJSON writes v as indented JSON, the --json output of read commands.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// table returns a tabwriter for aligned columns; Flush it when done.
func table(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// shortID is the first 8 characters of an id, enough to tell items apart
// in a listing.
func shortID(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// ago renders t relative to now ("5m ago"), or as a date past a month.
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return t.UTC().Format(time.RFC3339)
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	case d < 30*24*time.Hour:
		return fmt.Sprintf("%dd ago", int(d.Hours()/24))
	default:
		return t.UTC().Format("2006-01-02")
	}
}

// rfc3339 renders an optional time; null is "-".
func rfc3339(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// optionalString renders a nullable string; null is "-".
func optionalString(s *string) string {
	if s == nil {
		return "-"
	}
	return *s
}

// showSetup is the setup of a `show ID|REF [--json]` leaf: fetch one
// object with get and print it as a table with print, or as the API's JSON.
func showSetup[T any](get func(*apiclient.Client, context.Context, string) (T, error), print func(io.Writer, T)) func(*flag.FlagSet) func(*invocation) error {
	return func(fs *flag.FlagSet) func(*invocation) error {
		asJSON := fs.Bool("json", false, "print the API's JSON")
		return func(x *invocation) error {
			c, err := x.client()
			if err != nil {
				return err
			}
			v, err := get(c, x.ctx, x.args[0])
			if err != nil {
				return err
			}
			if *asJSON {
				return printJSON(x.stdout, v)
			}
			print(x.stdout, v)
			return nil
		}
	}
}
