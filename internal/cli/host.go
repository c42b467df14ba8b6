package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"pam/internal/apiclient"
	"pam/internal/serve"
	"pam/internal/wire"
)

// clientGroup registers the settings every client command shares
// (PAM_URL, PAM_TOKEN, PAM_DATA_DIR, PAM_CA_FILE): config.go lists them
// under the project command.
const clientGroup = "project"

var hostCmd = &command{
	name:    "host",
	summary: "add, list, show, set, disable, enable and remove execution hosts",
	subs: []*command{
		{
			name: "add", args: "NAME", nargs: 1, summary: "register a host and print its worker token (shown only this once)", group: clientGroup,
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				maxRuns := fs.Int("max-runs", 0, "concurrent runs the host accepts (default 8)")
				asJSON := fs.Bool("json", false, "print the API's JSON (it holds the token)")
				return func(x *invocation) error {
					body := wire.CreateHost{Name: x.args[0]}
					if givenFlags(fs)["max-runs"] {
						body.MaxRuns = maxRuns
					}
					c, err := x.client()
					if err != nil {
						return err
					}
					out, err := c.CreateHost(x.ctx, body)
					if err != nil {
						return err
					}
					if *asJSON {
						return printJSON(x.stdout, out)
					}
					fmt.Fprintf(x.stdout, "added host %s (%s), max_runs %d\n\n", out.Host.Name, out.Host.ID, out.Host.MaxRuns)
					printWorkerToken(x.stdout, x.cfg.str("PAM_URL"), out.Host.Name, out.WorkerToken)
					return nil
				}
			},
		},
		{
			name: "list", summary: "list hosts", group: clientGroup,
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				asJSON := fs.Bool("json", false, "print the API's JSON")
				return func(x *invocation) error {
					c, err := x.client()
					if err != nil {
						return err
					}
					hs, err := c.ListHosts(x.ctx)
					if err != nil {
						return err
					}
					if *asJSON {
						return printJSON(x.stdout, wire.HostList{Hosts: nonNil(hs)})
					}
					printHosts(x.stdout, hs, x.env.Now())
					return nil
				}
			},
		},
		{
			name: "show", args: "REF", nargs: 1, names: hostIDs, summary: "show a host (by name, id or id prefix) with its active runs", group: clientGroup,
			setup: showSetup((*apiclient.Client).GetHost, printHost),
		},
		{
			name: "set", args: "REF", nargs: 1, names: hostIDs, summary: "change a host's settings (--max-runs: how many runs it holds at once)", group: clientGroup,
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				maxRuns := fs.Int("max-runs", 0, "concurrent runs the host accepts, 1 to 1000 (required)")
				asJSON := fs.Bool("json", false, "print the host as JSON")
				return func(x *invocation) error {
					if !givenFlags(fs)["max-runs"] {
						return usagef("--max-runs is required")
					}
					c, err := x.client()
					if err != nil {
						return err
					}
					h, err := c.SetHostMaxRuns(x.ctx, x.args[0], *maxRuns)
					if err != nil {
						return err
					}
					if *asJSON {
						return printJSON(x.stdout, h)
					}
					fmt.Fprintf(x.stdout, "host %s: max_runs %d\n", h.Name, h.MaxRuns)
					return nil
				}
			},
		},
		hostAction("disable", "stop dispatching new runs to a host (running ones continue; sticky until enable)",
			(*apiclient.Client).DisableHost, func(w io.Writer, h *wire.Host) {
				fmt.Fprintf(w, "disabled host %s: no new runs; %d active run(s) continue (pam host show %s to watch it drain)\n", h.Name, h.ActiveRuns, h.Name)
			}),
		hostAction("enable", "enable a disabled host (its status follows its last heartbeat)",
			(*apiclient.Client).EnableHost, func(w io.Writer, h *wire.Host) {
				fmt.Fprintf(w, "enabled host %s: %s\n", h.Name, h.Status)
			}),
		hostAction("clear-suspect", "accept the instance id a suspect host now reports",
			(*apiclient.Client).ClearSuspect, func(w io.Writer, h *wire.Host) {
				fmt.Fprintf(w, "host %s: instance %s accepted\n", h.Name, optionalString(h.InstanceID))
			}),
		{
			name: "rotate-token", args: "REF", nargs: 1, names: hostIDs, summary: "give a host a new worker token (the old one stops working at once)", group: clientGroup,
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				asJSON := fs.Bool("json", false, "print the API's JSON (it holds the token)")
				return func(x *invocation) error {
					c, err := x.client()
					if err != nil {
						return err
					}
					// By id, so that the name printed is the host's whatever REF was.
					h, err := c.GetHost(x.ctx, x.args[0])
					if err != nil {
						return err
					}
					tok, err := c.RotateToken(x.ctx, h.ID)
					if err != nil {
						return err
					}
					if *asJSON {
						return printJSON(x.stdout, wire.WorkerToken{WorkerToken: tok})
					}
					fmt.Fprintf(x.stdout, "rotated the worker token of host %s; the old token no longer works (restart its worker with the new one).\n\n", h.Name)
					printWorkerToken(x.stdout, x.cfg.str("PAM_URL"), h.Name, tok)
					return nil
				}
			},
		},
		{
			name: "remove", args: "REF", nargs: 1, names: hostIDs, summary: "remove a host that has no active runs", group: clientGroup,
			setup: func(fs *flag.FlagSet) func(*invocation) error {
				return func(x *invocation) error {
					c, err := x.client()
					if err != nil {
						return err
					}
					if err := c.DeleteHost(x.ctx, x.args[0]); err != nil {
						return err
					}
					fmt.Fprintf(x.stdout, "removed host %s\n", x.args[0])
					return nil
				}
			},
		},
	},
}

// hostAction is a host command that POSTs an action and gets the Host back.
func hostAction(name, summary string, call func(*apiclient.Client, context.Context, string) (*wire.Host, error), done func(io.Writer, *wire.Host)) *command {
	return &command{
		name: name, args: "REF", nargs: 1, names: hostIDs, summary: summary, group: clientGroup,
		setup: func(fs *flag.FlagSet) func(*invocation) error {
			asJSON := fs.Bool("json", false, "print the host as JSON")
			return func(x *invocation) error {
				c, err := x.client()
				if err != nil {
					return err
				}
				h, err := call(c, x.ctx, x.args[0])
				if err != nil {
					return err
				}
				if *asJSON {
					return printJSON(x.stdout, h)
				}
				done(x.stdout, h)
				return nil
			}
		},
	}
}

// printWorkerToken shows a worker token once, on its own line, and how to
// put it into the worker's token file. It never prints a command line that
// holds the token: that would land in shell history and, as an argument or
// a variable of a command, in the process list (docs/architecture.md#security-model).
func printWorkerToken(w io.Writer, base, host, token string) {
	fmt.Fprintf(w, "Worker token (shown only this once; pam keeps only its hash):\n\n  %s\n\n", token)
	fmt.Fprintf(w, "On %s, store it in the worker's token file (<data>/worker/token, mode 0600;\n", host)
	fmt.Fprintf(w, "<data> is /var/lib/pam as root, ~/.local/share/pam otherwise): run this, paste\nthe token, press Enter then Ctrl-D:\n\n")
	fmt.Fprintf(w, "  install -d -m 700 <data>/worker && install -m 600 /dev/stdin <data>/worker/token\n\n")
	fmt.Fprintf(w, "(or hand it to a systemd unit with LoadCredential= and --worker-token-file), then start the worker:\n\n")
	fmt.Fprintf(w, "  PAM_URL=%s PAM_HOST_NAME=%s pam worker\n\n", shellQuote(base), shellQuote(host))
	if isLoopbackURL(base) {
		fmt.Fprintf(w, "%s is this machine's loopback address: a worker on another host needs an address it can reach.\n", base)
	}
}

func isLoopbackURL(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	return serve.IsLoopback(u.Hostname())
}

// shellQuote quotes s for a POSIX shell when it holds anything but safe
// characters.
func shellQuote(s string) string {
	safe := s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:/@%+=,", r))
	}) < 0
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func hostStatus(h wire.Host) string {
	if h.InstanceSuspect {
		return h.Status + " (suspect)"
	}
	return h.Status
}

func printHosts(w io.Writer, hs []wire.Host, now time.Time) {
	tw := table(w)
	fmt.Fprintln(tw, "NAME\tSTATUS\tRUNS\tPROVIDERS\tEXECUTOR\tLAST-SEEN\tID")
	for _, h := range hs {
		seen := "never"
		if h.LastSeenAt != nil {
			seen = ago(*h.LastSeenAt, now)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\n", h.Name, hostStatus(h), h.ActiveRuns, h.MaxRuns,
			dash(strings.Join(h.Providers, ",")), dash(h.Executor), seen, h.ID)
	}
	tw.Flush()
}

func printHost(w io.Writer, h *wire.Host) {
	tw := table(w)
	fmt.Fprintf(tw, "id:\t%s\n", h.ID)
	fmt.Fprintf(tw, "name:\t%s\n", h.Name)
	fmt.Fprintf(tw, "status:\t%s\n", h.Status)
	fmt.Fprintf(tw, "disabled:\t%t\n", h.Disabled)
	fmt.Fprintf(tw, "active_runs:\t%d\n", h.ActiveRuns)
	fmt.Fprintf(tw, "max_runs:\t%d\n", h.MaxRuns)
	fmt.Fprintf(tw, "providers:\t%s\n", dash(strings.Join(h.Providers, ", ")))
	fmt.Fprintf(tw, "executor:\t%s\n", dash(h.Executor))
	fmt.Fprintf(tw, "platform:\t%s\n", dash(h.Platform))
	fmt.Fprintf(tw, "instance_id:\t%s\n", optionalString(h.InstanceID))
	fmt.Fprintf(tw, "instance_suspect:\t%t\n", h.InstanceSuspect)
	fmt.Fprintf(tw, "last_seen_at:\t%s\n", rfc3339(h.LastSeenAt))
	fmt.Fprintf(tw, "created_at:\t%s\n", rfc3339(&h.CreatedAt))
	fmt.Fprintf(tw, "updated_at:\t%s\n", rfc3339(&h.UpdatedAt))
	tw.Flush()
	if h.InstanceSuspect {
		fmt.Fprintf(w, "\nThis host is suspect: a second worker instance reported while the pinned one was live, so it gets no new runs.\nIf the host was reinstalled on purpose, accept the new instance with: pam host clear-suspect %s\n", h.Name)
	}
}

// dash renders an empty string as "-".
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
