package cli

import (
	"flag"
	"slices"

	"pam/internal/apiclient"
	"pam/internal/mcpserver"
)

// mcpCmd is `pam mcp`, pam's tools for the agent
// (docs/architecture.md#pams-tools-for-the-agent): the stdio MCP server
// the wrapper gives each agent CLI. It reads its run from the environment
// the CLI inherited from `pam exec run`, and refuses to start outside one.
var mcpCmd = &command{
	name: "mcp",
	summary: "the MCP server of pam's tools for the agent, on stdin and stdout, for the run of the environment " +
		"(PAM_RUN_ID, PAM_ATTEMPT, PAM_API_URL, PAM_SIGNAL_TOKEN); started by the agent CLI of a run (not for humans)",
	setup: func(fs *flag.FlagSet) func(*invocation) error {
		return func(x *invocation) error {
			run, err := mcpserver.RunFromEnv(x.env.getenv)
			if err != nil {
				return usagef("%v", err)
			}
			client, err := apiclient.New(run.APIURL, run.Token, run.CAFile)
			if err != nil {
				return usagef("%v", err)
			}
			return mcpserver.Serve(x.ctx, mcpserver.Options{Run: run, Client: client, Version: readBuildInfo().Version},
				x.env.Stdin, x.stdout)
		}
	},
}

// The MCP server sits with the exec wrapper and the hook, before the
// diagnostics.
func init() {
	i := slices.Index(root.subs, doctorCmd)
	if i < 0 {
		i = len(root.subs)
	}
	root.subs = slices.Insert(root.subs, i, mcpCmd)
}
