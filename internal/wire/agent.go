package wire

// pam's tools for the agent (docs/architecture.md#pams-tools-for-the-agent):
// `pam mcp` serves them to the CLI of one run and calls the internal
// routes of docs/api.md#internal-api with that run's signal token.

// MCPServerName is the name pam's MCP server is registered under in every
// CLI, so that Claude Code calls its tools mcp__pam__<tool>.
const MCPServerName = "pam"

// The tools of pam's MCP server.
const (
	ToolListWorkItems  = "list_work_items"
	ToolGetWorkItem    = "get_work_item"
	ToolCreateWorkItem = "create_work_item"
	ToolUpdateWorkItem = "update_work_item"
	ToolReportProgress = "report_progress"
)

// MCPTools lists every tool of pam's MCP server: what a CLI is told to
// allow without asking.
var MCPTools = []string{ToolListWorkItems, ToolGetWorkItem, ToolCreateWorkItem, ToolUpdateWorkItem, ToolReportProgress}

// CodeRateLimited (429) refuses a call of pam's tools past
// AgentCallsPerMinute; details.retry_after_seconds says when one is taken
// again.
const CodeRateLimited = "rate_limited"

// AgentCallsPerMinute bounds the calls of pam's tools of one run: the
// 101st call within a minute is refused with CodeRateLimited.
const AgentCallsPerMinute = 100

// MaxProgressText bounds the text of a progress report, in bytes.
const MaxProgressText = 4 << 10

// AgentCreateWorkItem is the body of POST /api/internal/runs/{id}/work-items:
// a work item in the run's project. Kind defaults to the kind of the
// run's own item (task, or subtask for a run of a subtask); ParentID
// absent is the parent of the run's item, null the project's top level.
type AgentCreateWorkItem struct {
	Title    string   `json:"title"`
	Kind     *string  `json:"kind,omitempty"`
	Body     *string  `json:"body,omitempty"`
	ParentID Optional `json:"parent_id,omitzero"`
}

// AgentUpdateWorkItem is the body of PATCH
// /api/internal/runs/{id}/work-items/{item}: nil fields are kept. An agent
// edits words and status; moving items in the tree stays the operator's.
type AgentUpdateWorkItem struct {
	Title  *string `json:"title,omitempty"`
	Body   *string `json:"body,omitempty"`
	Status *string `json:"status,omitempty"`
}

// AgentProgress is the body of POST /api/internal/runs/{id}/progress: what
// the agent says it is doing, journaled as run.progress.
type AgentProgress struct {
	Text string `json:"text"`
}

// AgentActor is the actor of the events an agent's tool calls journal:
// "agent:" and the first 8 hex characters of its run's id.
func AgentActor(runID string) string {
	if len(runID) > 8 {
		runID = runID[:8]
	}
	return "agent:" + runID
}
