package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"pam/internal/apiclient"
	"pam/internal/screen"
	"pam/internal/wire"
)

var runCmd = &command{
	name:    "run",
	summary: "start, list, show, stop, retry, continue and complete agent runs; send keys or a message; read logs; watch or attach a pane",
	subs: []*command{
		{
			name: "start", args: "[-- ARG...]", variadic: true, group: clientGroup,
			summary: "start a run of a provider CLI against a task (arguments after -- go to the CLI)",
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				task := fs.String("task", "", "id or id prefix of the task or subtask to work on (required)")
				provider := fs.String("provider", "", "provider: claude, codex, gemini, grok, shell or one from providers.toml (required)")
				host := fs.String("host", "", "pin the run to this host (name, id or id prefix; default: any eligible host)")
				cwd := fs.String("cwd", "", "working directory on the host")
				prompt := fs.String("prompt", "", "prompt for the agent")
				maxAttempts := fs.Int("max-attempts", 0, "attempts before the run stays failed, 1 to 20 (default: the server's)")
				workspace := fs.String("workspace", "", "worktree (a git worktree of the project's repo, the default when it has one and no --cwd is given) or none")
				asJSON := fs.Bool("json", false, "print the created run as JSON")
				return func(x *invocation) error {
					if *task == "" || *provider == "" {
						return usagef("--task and --provider are required")
					}
					body := wire.CreateRun{Provider: *provider, Args: x.args}
					given := givenFlags(fs)
					if given["cwd"] {
						body.Cwd = cwd
					}
					if given["prompt"] {
						body.Prompt = prompt
					}
					if given["max-attempts"] {
						body.MaxAttempts = maxAttempts
					}
					if given["workspace"] {
						body.Workspace = workspace
					}
					c, err := x.client()
					if err != nil {
						return err
					}
					if body.TaskID, err = x.id(c, itemIDs, *task); err != nil {
						return err
					}
					if given["host"] {
						id, err := x.id(c, hostIDs, *host)
						if err != nil {
							return err
						}
						body.HostID = &id
					}
					r, err := c.CreateRun(x.ctx, body)
					if err != nil {
						return err
					}
					if *asJSON {
						return printJSON(x.stdout, r)
					}
					fmt.Fprintf(x.stdout, "admitted run %s (%s, session %s)\n", r.ID, r.Status, r.SessionName)
					return nil
				}
			},
		},
		{
			name: "list", summary: "list runs, newest first", group: clientGroup,
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				status := fs.String("status", "", "only runs in this status (pending, spawning, running, exited, failed, stopped)")
				project := fs.String("project", "", "only runs of this project (slug, id or id prefix)")
				task := fs.String("task", "", "only runs of this task (id or id prefix)")
				host := fs.String("host", "", "only runs on this host (name, id or id prefix)")
				limit := fs.Int("limit", 0, "at most this many runs (default: the server's)")
				before := fs.String("before", "", "the page after this run (id or id prefix): what the last page ended with")
				var attention attentionFlag
				fs.Var(&attention, "attention", "only runs that wait for a person (needs_input, rate_limited or idle), with their question; --attention=needs_input for one kind")
				asJSON := fs.Bool("json", false, "print the API's JSON")
				return func(x *invocation) error {
					if *limit < 0 {
						return usagef("--limit cannot be negative")
					}
					c, err := x.client()
					if err != nil {
						return err
					}
					f := apiclient.RunFilter{Status: *status, Attention: attention.v, Limit: *limit}
					if *project != "" {
						if f.ProjectID, err = x.id(c, projectIDs, *project); err != nil {
							return err
						}
					}
					if *task != "" {
						if f.TaskID, err = x.id(c, itemIDs, *task); err != nil {
							return err
						}
					}
					if *host != "" {
						if f.HostID, err = x.id(c, hostIDs, *host); err != nil {
							return err
						}
					}
					if *before != "" {
						if f.Before, err = x.id(c, runIDs, *before); err != nil {
							return err
						}
					}
					page, err := c.ListRunsPage(x.ctx, f)
					if err != nil {
						return err
					}
					runs := page.Runs
					if *asJSON {
						return printJSON(x.stdout, wire.RunList{Runs: nonNil(runs), Next: page.Next})
					}
					var hosts hostNames
					if runsHaveHosts(runs...) {
						hosts = x.hostNames(c)
					}
					printRuns(x.stdout, runs, hosts, x.env.Now())
					if page.Next != nil {
						// On stderr: stdout stays the table.
						fmt.Fprintf(x.stderr, "more: pam run list --before %s\n", *page.Next)
					}
					return nil
				}
			},
		},
		{
			name: "show", args: "ID", nargs: 1, names: runIDs, summary: "show a run", group: clientGroup,
			setup: runShow,
		},
		{
			name: "stop", args: "ID", nargs: 1, names: runIDs, summary: "stop a run (the worker sends SIGTERM, then SIGKILL after the grace)", group: clientGroup,
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				force := fs.Bool("force", false, "skip the grace: kill at once")
				asJSON := fs.Bool("json", false, "print the run as JSON")
				return func(x *invocation) error {
					return runAction(x, *asJSON, "stopped", func(c *apiclient.Client) (*wire.Run, error) {
						return c.StopRun(x.ctx, x.args[0], *force)
					})
				}
			},
		},
		{
			name: "retry", args: "ID", nargs: 1, names: runIDs, group: clientGroup,
			summary: "requeue a failed run with one more attempt (it resumes the agent's conversation unless --fresh)",
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				fresh := fs.Bool("fresh", false, "start the agent afresh with the prompt instead of resuming its conversation")
				asJSON := fs.Bool("json", false, "print the run as JSON")
				return func(x *invocation) error {
					return runAction(x, *asJSON, "requeued", func(c *apiclient.Client) (*wire.Run, error) {
						return c.RetryRun(x.ctx, x.args[0], *fresh)
					})
				}
			},
		},
		{
			name: "complete", args: "ID", nargs: 1, names: runIDs, summary: "mark a run's work complete by hand (does not stop it)", group: clientGroup,
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				asJSON := fs.Bool("json", false, "print the run as JSON")
				return func(x *invocation) error {
					return runAction(x, *asJSON, "completed", func(c *apiclient.Client) (*wire.Run, error) {
						return c.CompleteRun(x.ctx, x.args[0])
					})
				}
			},
		},
		{
			name: "keys", args: "ID", nargs: 1, names: runIDs, group: clientGroup,
			summary: "answer a running run: press keys, type text or paste, in the order given " +
				"(e.g. --key 1 for a menu's first choice, --text yes --enter for a prompt)",
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				var keys []wire.Key
				fs.Var(keyFlag{&keys, keyText}, "text", "type `TEXT` key by key (printable ASCII without | & ; $ or backtick; repeatable)")
				fs.Var(keyFlag{&keys, keyNamed}, "key", "press `KEY`: "+keyNamesHelp+" (repeatable)")
				fs.Var(keyFlag{&keys, keyPaste}, "paste", "paste `TEXT` as one piece: printable text and newlines, e.g. a multi-line reply (repeatable)")
				fs.Var(enterFlag{&keys}, "enter", "press Enter (repeatable)")
				asJSON := fs.Bool("json", false, "print the API's JSON")
				return func(x *invocation) error {
					if len(keys) == 0 {
						return usagef("nothing to send: give --key, --text, --paste or --enter")
					}
					if err := wire.ValidateKeys(keys); err != nil {
						return usagef("%s", describe(err))
					}
					c, err := x.client()
					if err != nil {
						return err
					}
					res, err := c.SendKeys(x.ctx, x.args[0], keys)
					if err != nil {
						return err
					}
					if *asJSON {
						return printJSON(x.stdout, res)
					}
					if res.Delivery == wire.DeliveryObserved {
						fmt.Fprintln(x.stdout, "sent; delivery observed (the pane changed)")
					} else {
						fmt.Fprintf(x.stdout, "sent; delivery %s (the pane did not change soon after: the run still waits, if it did)\n", res.Delivery)
					}
					return nil
				}
			},
		},
		{
			name: "send", args: "ID TEXT", nargs: 2, variadic: true, names: runIDs, group: clientGroup,
			summary: "say TEXT to a running run's agent (- reads it from stdin): typed once the agent is ready, " +
				"then submitted with Enter until the screen shows it was taken",
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				asJSON := fs.Bool("json", false, "print the API's JSON")
				return func(x *invocation) error {
					text := strings.Join(x.args[1:], " ")
					if text == "-" {
						b, err := io.ReadAll(io.LimitReader(x.env.Stdin, 4*wire.MaxMessageText+1))
						if err != nil {
							return fmt.Errorf("read the message from stdin: %w", err)
						}
						text = strings.TrimRight(string(b), "\n")
					}
					if err := wire.CheckMessageText(text); err != nil {
						return usagef("%s", describe(err))
					}
					c, err := x.client()
					if err != nil {
						return err
					}
					res, err := c.SendMessage(x.ctx, x.args[0], text)
					if err != nil {
						return err
					}
					if *asJSON {
						return printJSON(x.stdout, res)
					}
					if res.Delivery == wire.DeliveryConfirmed {
						fmt.Fprintln(x.stdout, "sent; delivery confirmed (the agent took it)")
					} else {
						fmt.Fprintf(x.stdout, "sent; delivery %s (the screen did not change after Enter: look with pam run watch)\n", res.Delivery)
					}
					return nil
				}
			},
		},
		{
			name: "logs", args: "ID", nargs: 1, names: runIDs, summary: "print a run's log from its host (--follow streams until the run ends)", group: clientGroup,
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				var follow bool
				fs.BoolVar(&follow, "follow", false, "keep printing new output until the run ends or you interrupt")
				fs.BoolVar(&follow, "f", false, "same as --follow")
				color := fs.String("color", "auto", "the pane's colours and other escape sequences: always, never (plain text, for grep or a file) or auto (always on a terminal, never otherwise)")
				return func(x *invocation) error {
					raw, err := colorWanted(*color, x.stdout)
					if err != nil {
						return err
					}
					c, err := x.client()
					if err != nil {
						return err
					}
					out := x.stdout
					var plain *screen.PlainWriter
					if !raw {
						plain = screen.NewPlainWriter(x.stdout)
						out = plain
					}
					err = c.RunLogs(x.ctx, x.args[0], follow, out)
					if plain != nil {
						if cerr := plain.Close(); err == nil {
							err = cerr
						}
					}
					if follow && errors.Is(err, context.Canceled) {
						return nil // interrupted: a normal way to stop following
					}
					return err
				}
			},
		},
		runWatchCmd,
		runAttachCmd,
	},
}

// colorWanted resolves a --color value as ls and git do: always, never,
// or auto — escape sequences only when w is a terminal.
func colorWanted(mode string, w io.Writer) (bool, error) {
	switch mode {
	case "always":
		return true, nil
	case "never":
		return false, nil
	case "auto", "":
		return isTerminal(w), nil
	}
	return false, usagef("--color %q: want always, never or auto", mode)
}

// runAction calls an action that answers a Run and reports it.
func runAction(x *invocation, asJSON bool, verb string, call func(*apiclient.Client) (*wire.Run, error)) error {
	c, err := x.client()
	if err != nil {
		return err
	}
	r, err := call(c)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(x.stdout, r)
	}
	fmt.Fprintf(x.stdout, "%s run %s: %s, attempt %d/%d\n", verb, r.ID, r.Status, r.Attempt, r.MaxAttempts)
	return nil
}

// keyFlag appends an entry of its kind each time its flag is given;
// --key, --text, --paste and --enter share one slice, so the entries keep
// the command line's order.
type keyFlag struct {
	keys *[]wire.Key
	kind keyKind
}

// keyKind is which field of a keys entry a flag fills.
type keyKind int

const (
	keyNamed keyKind = iota
	keyText
	keyPaste
)

// keyNamesHelp lists the keys --key takes, the digits and letters short.
var keyNamesHelp = func() string {
	var named []string
	for _, k := range wire.KeyNames {
		if len(k) > 1 {
			named = append(named, k)
		}
	}
	return strings.Join(named, ", ") + ", 0-9, y, n"
}()

func (f keyFlag) String() string { return "" }

func (f keyFlag) Set(s string) error {
	switch f.kind {
	case keyNamed:
		*f.keys = append(*f.keys, wire.Key{Key: s})
	case keyText:
		*f.keys = append(*f.keys, wire.Key{Text: s})
	default:
		*f.keys = append(*f.keys, wire.Key{Paste: s})
	}
	return nil
}

// attentionFlag is run list's --attention: alone, every run that waits
// for a person (attention=any); with a value, that attention.
type attentionFlag struct{ v string }

func (f *attentionFlag) String() string   { return f.v }
func (f *attentionFlag) IsBoolFlag() bool { return true }

func (f *attentionFlag) Set(s string) error {
	switch s {
	case "true", "any":
		f.v = "any"
	case "false":
		f.v = ""
	case wire.AttentionNeedsInput, wire.AttentionRateLimited, wire.AttentionIdle, wire.AttentionNone:
		f.v = s
	default:
		return errors.New("want needs_input, rate_limited, idle, none or any")
	}
	return nil
}

// enterFlag is --enter: a boolean flag that appends an Enter key.
type enterFlag struct{ keys *[]wire.Key }

func (f enterFlag) String() string   { return "" }
func (f enterFlag) IsBoolFlag() bool { return true }

func (f enterFlag) Set(s string) error {
	on, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("want true or false")
	}
	if on {
		*f.keys = append(*f.keys, wire.Key{Key: "Enter"})
	}
	return nil
}

// hostNames maps host ids to names, so that tables and show name hosts
// the way an operator does. One GET /hosts per command.
type hostNames map[string]string

// hostNames reads the host list. The names are a courtesy: when the list
// cannot be read, hosts print as short ids instead of failing the command.
func (x *invocation) hostNames(c *apiclient.Client) hostNames {
	hs, err := c.ListHosts(x.ctx)
	if err != nil {
		return nil
	}
	m := make(hostNames, len(hs))
	for _, h := range hs {
		m[h.ID] = h.Name
	}
	return m
}

// name renders a host id as its name; a host removed since (or one the
// list did not hold) prints as its short id, none as "-".
func (h hostNames) name(id *string) string {
	switch {
	case id == nil:
		return "-"
	case h[*id] != "":
		return h[*id]
	}
	return shortID(*id)
}

// runHost names the host a run is on, else the one it is pinned to.
func runHost(r wire.Run, hosts hostNames) string {
	switch {
	case r.HostID != nil:
		return hosts.name(r.HostID)
	case r.TargetHostID != nil:
		return hosts.name(r.TargetHostID) + " (pinned)"
	}
	return "-"
}

// runsHaveHosts reports whether a listing of runs names any host, so
// that the host list is read only when it is needed.
func runsHaveHosts(runs ...wire.Run) bool {
	for _, r := range runs {
		if r.HostID != nil || r.TargetHostID != nil {
			return true
		}
	}
	return false
}

// printRuns is the table of run list; QUESTION, last, is what a run
// that waits for a person is asked (questionCells).
func printRuns(w io.Writer, runs []wire.Run, hosts hostNames, now time.Time) {
	var b strings.Builder
	tw := table(&b)
	fmt.Fprintln(tw, "ID\tSTATUS\tATTEMPT\tATTENTION\tPROVIDER\tHOST\tTASK\tCREATED\tREASON\t")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", shortID(r.ID), r.Status, r.Attempt, r.MaxAttempts, attentionCell(r),
			r.Provider, runHost(r, hosts), shortID(r.TaskID), ago(r.CreatedAt, now), optionalString(r.FailureReason))
	}
	tw.Flush()
	questionColumn(w, b.String(), runs)
}

// attentionCell is a run's attention for a table: "-" when it waits for
// nobody.
func attentionCell(r wire.Run) string {
	if r.Attention == "" || r.Attention == wire.AttentionNone {
		return "-"
	}
	return r.Attention
}

// runShow is `pam run show ID`: the run, its host by name and its task by
// title (one more request each, not made for --json, which is the API's
// Run as it is).
func runShow(fs *flag.FlagSet) func(*invocation) error {
	asJSON := fs.Bool("json", false, "print the API's JSON")
	return func(x *invocation) error {
		c, err := x.client()
		if err != nil {
			return err
		}
		r, err := c.GetRun(x.ctx, x.args[0])
		if err != nil {
			return err
		}
		if *asJSON {
			return printJSON(x.stdout, r)
		}
		var hosts hostNames
		if runsHaveHosts(*r) {
			hosts = x.hostNames(c)
		}
		task := r.TaskID
		if it, err := c.GetWorkItem(x.ctx, r.TaskID); err == nil {
			task = it.Title + " (" + r.TaskID + ")"
		}
		printRun(x.stdout, r, task, hosts)
		return nil
	}
}

// printRun prints a run; task is how to name its task (its title and id
// when they could be read).
func printRun(w io.Writer, r *wire.Run, task string, hosts hostNames) {
	tw := table(w)
	exit := "-"
	if r.ExitCode != nil {
		exit = strconv.Itoa(*r.ExitCode)
	}
	args := "-"
	if len(r.Args) > 0 {
		args = strings.Join(r.Args, " ")
	}
	fmt.Fprintf(tw, "id:\t%s\n", r.ID)
	fmt.Fprintf(tw, "status:\t%s\n", r.Status)
	fmt.Fprintf(tw, "attempt:\t%d/%d\n", r.Attempt, r.MaxAttempts)
	fmt.Fprintf(tw, "provider:\t%s\n", r.Provider)
	fmt.Fprintf(tw, "task:\t%s\n", task)
	fmt.Fprintf(tw, "project_id:\t%s\n", r.ProjectID)
	fmt.Fprintf(tw, "host:\t%s\n", hosts.name(r.HostID))
	fmt.Fprintf(tw, "target_host:\t%s\n", hosts.name(r.TargetHostID))
	fmt.Fprintf(tw, "session_name:\t%s\n", r.SessionName)
	fmt.Fprintf(tw, "agent_session:\t%s\n", optionalString(r.AgentSessionID))
	fmt.Fprintf(tw, "continues:\t%s\n", optionalString(r.ContinuesRunID))
	fmt.Fprintf(tw, "cwd:\t%s\n", dash(r.Cwd))
	fmt.Fprintf(tw, "args:\t%s\n", args)
	fmt.Fprintf(tw, "failure_reason:\t%s\n", optionalString(r.FailureReason))
	fmt.Fprintf(tw, "exit_code:\t%s\n", exit)
	fmt.Fprintf(tw, "pending_since:\t%s\n", rfc3339(r.PendingSince))
	fmt.Fprintf(tw, "next_attempt_at:\t%s\n", rfc3339(r.NextAttemptAt))
	fmt.Fprintf(tw, "started_at:\t%s\n", rfc3339(r.StartedAt))
	fmt.Fprintf(tw, "finished_at:\t%s\n", rfc3339(r.FinishedAt))
	fmt.Fprintf(tw, "completed_at:\t%s\n", rfc3339(r.CompletedAt))
	fmt.Fprintf(tw, "completion_source:\t%s\n", optionalString(r.CompletionSource))
	fmt.Fprintf(tw, "attention:\t%s\n", attentionCell(*r))
	fmt.Fprintf(tw, "attention_since:\t%s\n", rfc3339(r.AttentionSince))
	if r.Workspace != nil {
		fmt.Fprintf(tw, "workspace:\t%s\n", r.Workspace.Path)
		fmt.Fprintf(tw, "branch:\t%s\n", r.Workspace.Branch)
		fmt.Fprintf(tw, "base_commit:\t%s\n", r.Workspace.BaseCommit)
	}
	fmt.Fprintf(tw, "created_at:\t%s\n", rfc3339(&r.CreatedAt))
	fmt.Fprintf(tw, "updated_at:\t%s\n", rfc3339(&r.UpdatedAt))
	tw.Flush()
	printQuestion(w, r)
	if r.Prompt != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(r.Prompt, "\n"))
	}
}
