package cli

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"pam/internal/apiclient"
	"pam/internal/wire"
)

// Workspaces (docs/architecture.md#workspaces): pam run diff, push and
// clean, and the --repo of projects.

var runDiffCmd = &command{
	name: "diff", args: "ID", nargs: 1, names: runIDs, group: clientGroup,
	summary: "print what a run changed in its worktree: its commits (what push sends), then the rest (--stat: files with lines added and deleted)",
	setup: func(fs *flag.FlagSet) func(*invocation) error {
		stat := fs.Bool("stat", false, "list the files changed with their line counts, each marked committed or not, and the branch's head")
		part := fs.String("part", "", "only one part: committed (what pam run push sends) or uncommitted (the rest of the working tree)")
		asJSON := fs.Bool("json", false, "with --stat, print the API's JSON")
		return func(x *invocation) error {
			switch *part {
			case "", wire.DiffPartCommitted, wire.DiffPartUncommitted:
			default:
				return usagef("--part is committed or uncommitted, not %q", *part)
			}
			c, err := x.client()
			if err != nil {
				return err
			}
			color := isTerminal(x.stdout)
			if *stat {
				s, err := c.RunDiffStat(x.ctx, x.args[0], *part)
				if err != nil {
					return err
				}
				if *asJSON {
					return printJSON(x.stdout, s)
				}
				printDiffStat(x.stdout, s, color)
				return nil
			}
			if !color {
				_, err := c.RunDiff(x.ctx, x.args[0], *part, x.stdout)
				return err
			}
			var b bytes.Buffer
			if _, err := c.RunDiff(x.ctx, x.args[0], *part, &b); err != nil {
				return err
			}
			return colorDiff(x.stdout, &b)
		}
	},
}

var runPushCmd = &command{
	name: "push", args: "ID", nargs: 1, names: runIDs, group: clientGroup,
	summary: "push a run's branch to its project's repository (with the host's git credentials)",
	setup: func(fs *flag.FlagSet) func(*invocation) error {
		commit := fs.String("commit", "", "push only if the branch is still at this commit (the head pam run diff --stat named: what you reviewed); refused head_moved otherwise")
		asJSON := fs.Bool("json", false, "print the API's JSON")
		return func(x *invocation) error {
			if *commit != "" && !wire.ValidCommit(*commit) {
				return usagef("--commit must be a full commit id (the head pam run diff --stat prints)")
			}
			c, err := x.client()
			if err != nil {
				return err
			}
			res, err := c.PushRun(x.ctx, x.args[0], *commit)
			if err != nil {
				return err
			}
			if *asJSON {
				return printJSON(x.stdout, res)
			}
			if !res.OK {
				return fmt.Errorf("push of %s failed: %s", res.Branch, res.Detail)
			}
			fmt.Fprintf(x.stdout, "pushed %s at %s\n", res.Branch, res.Commit)
			return nil
		}
	},
}

var runCleanCmd = &command{
	name: "clean", args: "ID", nargs: 1, names: runIDs, group: clientGroup,
	summary: "remove a finished run's worktree from its host (its branch stays)",
	setup: func(fs *flag.FlagSet) func(*invocation) error {
		return func(x *invocation) error {
			c, err := x.client()
			if err != nil {
				return err
			}
			if err := c.DeleteWorkspace(x.ctx, x.args[0]); err != nil {
				return err
			}
			fmt.Fprintf(x.stdout, "removed the worktree of run %s\n", x.args[0])
			return nil
		}
	},
}

// The workspace commands sit after logs in `pam run`'s help.
func init() {
	i := slices.IndexFunc(runCmd.subs, func(c *command) bool { return c.name == "logs" })
	runCmd.subs = slices.Insert(runCmd.subs, i+1, runDiffCmd, runPushCmd, runCleanCmd)
}

// ANSI colours of a diff on a terminal.
const (
	ansiRed   = "\x1b[31m"
	ansiGreen = "\x1b[32m"
	ansiCyan  = "\x1b[36m"
	ansiBold  = "\x1b[1m"
	ansiReset = "\x1b[0m"
)

// colorDiff writes a unified diff coloured as git does on a terminal.
func colorDiff(w io.Writer, r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), wire.MaxDiff)
	bw := bufio.NewWriter(w)
	for sc.Scan() {
		line := sc.Text()
		color := ""
		switch {
		case strings.HasPrefix(line, "diff --git"), strings.HasPrefix(line, "index "),
			strings.HasPrefix(line, "+++ "), strings.HasPrefix(line, "--- "),
			strings.HasPrefix(line, "new file"), strings.HasPrefix(line, "deleted file"):
			color = ansiBold
		case strings.HasPrefix(line, "@@"):
			color = ansiCyan
		case strings.HasPrefix(line, "+"):
			color = ansiGreen
		case strings.HasPrefix(line, "-"):
			color = ansiRed
		}
		if color == "" {
			fmt.Fprintln(bw, line)
		} else {
			fmt.Fprintln(bw, color+line+ansiReset)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return bw.Flush()
}

// printDiffStat prints the branch's head, then one line per file:
// added, deleted (- for a binary file), status, part and path, then the
// totals.
func printDiffStat(w io.Writer, st *wire.DiffStat, color bool) {
	fmt.Fprintf(w, "head %s\n", st.Head)
	tw := table(w)
	var add, del int
	num := func(p *int, c string, sum *int) string {
		if p == nil {
			return "-"
		}
		*sum += *p
		if color {
			return fmt.Sprintf("%s%d%s", c, *p, ansiReset)
		}
		return fmt.Sprint(*p)
	}
	fmt.Fprintln(tw, "ADDED\tDELETED\tSTATUS\tPART\tPATH")
	for _, f := range st.Files {
		part := wire.DiffPartUncommitted
		if f.Committed {
			part = wire.DiffPartCommitted
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", num(f.Added, ansiGreen, &add), num(f.Deleted, ansiRed, &del), f.Status, part, f.Path)
	}
	tw.Flush()
	fmt.Fprintf(w, "%d files changed, %d insertions(+), %d deletions(-)\n", len(st.Files), add, del)
}

// repoFlags are --repo and --base of pam project create and update.
type repoFlags struct{ url, base *string }

func addRepoFlags(fs *flag.FlagSet, update bool) repoFlags {
	help := "the project's git repository (a URL any host can clone, or an absolute path on the hosts): each run gets a worktree of it"
	if update {
		help += "; \"\" removes it"
	}
	return repoFlags{
		url:  fs.String("repo", "", help),
		base: fs.String("base", "", "with --repo: the branch, tag or commit runs start from (default: the repository's default branch)"),
	}
}

// input builds the repo of a create or update from the flags given; on
// an update, --base alone keeps the URL the project has.
func (r repoFlags) input(x *invocation, c *apiclient.Client, given map[string]bool, ref string) (*wire.RepoInput, bool, error) {
	if !given["repo"] && !given["base"] {
		return nil, false, nil
	}
	in := &wire.RepoInput{URL: *r.url}
	if given["base"] {
		in.Base = r.base
	}
	if !given["repo"] {
		if ref == "" {
			return nil, false, usagef("--base needs --repo")
		}
		p, err := c.GetProject(x.ctx, ref)
		if err != nil {
			return nil, false, err
		}
		if p.Repo == nil {
			return nil, false, usagef("project %s has no repo: give --repo", p.Slug)
		}
		in.URL = p.Repo.URL
	}
	if in.URL == "" {
		return nil, true, nil // remove it
	}
	return in, true, nil
}
