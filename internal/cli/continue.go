package cli

import (
	"flag"
	"fmt"
	"slices"
	"strings"

	"pam/internal/wire"
)

// runContinueCmd is `pam run continue`: a new run that resumes an ended
// run's conversation in its worktree on its host
// (docs/architecture.md#resume-and-continue).
var runContinueCmd = &command{
	name: "continue", args: "ID [TEXT]", nargs: 1, variadic: true, names: runIDs, group: clientGroup,
	summary: "continue an ended run's conversation in a new run: the same task, on the same host, in the same worktree, " +
		"its agent resumed with TEXT as its next message (default: the provider's continue_message)",
	setup: func(fs *flag.FlagSet) func(*invocation) error {
		prov := fs.String("provider", "", "the catalog entry the new run uses (default: the old run's); it must resume the same CLI's conversations")
		asJSON := fs.Bool("json", false, "print the new run as JSON")
		return func(x *invocation) error {
			var body wire.ContinueRun
			if text := strings.Join(x.args[1:], " "); text != "" {
				if err := wire.CheckContinueText(text); err != nil {
					return usagef("%s", describe(err))
				}
				body.Text = &text
			}
			if givenFlags(fs)["provider"] {
				body.Provider = prov
			}
			c, err := x.client()
			if err != nil {
				return err
			}
			r, err := c.ContinueRun(x.ctx, x.args[0], body)
			if err != nil {
				return err
			}
			if *asJSON {
				return printJSON(x.stdout, r)
			}
			fmt.Fprintf(x.stdout, "admitted run %s (%s, session %s), continuing run %s\n", r.ID, r.Status, r.SessionName, x.args[0])
			return nil
		}
	},
}

// continue sits right after retry in `pam run`.
func init() {
	i := slices.IndexFunc(runCmd.subs, func(c *command) bool { return c.name == "retry" })
	runCmd.subs = slices.Insert(runCmd.subs, i+1, runContinueCmd)
}
