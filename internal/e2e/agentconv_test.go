package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pam/internal/agentrig/fakemodel"
	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/wire"
)

// Conversations with the real Claude Code (docs/architecture.md#resume-and-continue,
// docs/architecture.md#pams-tools-for-the-agent,
// docs/architecture.md#continue-when-a-limit-resets), against the fake
// Anthropic API, with serve in the test's process so that the test moves
// the clock of its continue duty.

// lastUserTurn is the last turn of an Anthropic Messages request when
// it is the user's, as JSON ("" when the model spoke last). Claude Code
// puts context of its own after it as messages of role system; those are
// skipped.
func lastUserTurn(r fakemodel.Request) string {
	var body struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if json.Unmarshal(r.Body, &body) != nil {
		return ""
	}
	for i := len(body.Messages) - 1; i >= 0; i-- {
		switch body.Messages[i].Role {
		case "system":
			continue
		case "user":
			return string(body.Messages[i].Content)
		}
		break
	}
	return ""
}

// agentItem checks that the work item titled title was made by pam's MCP
// tool in the run's project: journaled work_item.created with actor
// agent:<run8>, listed in the project as todo.
func (a *agentRig) agentItem(runID, title string) {
	a.t.Helper()
	var created wire.EventList
	a.s.must(200, "GET", "/api/v1/events?topic=work_item.created", nil, &created)
	var item *wire.Event
	for i, e := range created.Events {
		if strings.Contains(string(e.Payload), title) {
			item = &created.Events[i]
		}
	}
	switch {
	case item == nil:
		a.t.Errorf("no work_item.created for the agent's item %q: %d events\nscreen:\n%s", title, len(created.Events), a.pane(runID))
	case item.Actor == nil || *item.Actor != "agent:"+runID[:8] || item.ProjectID == nil || *item.ProjectID != a.project.ID:
		a.t.Errorf("work_item.created by %v in project %v, want agent:%s in %s", item.Actor, item.ProjectID, runID[:8], a.project.ID)
	}
	var items wire.WorkItemList
	a.s.must(200, "GET", "/api/v1/projects/"+a.project.Slug+"/work-items", nil, &items)
	for _, it := range items.WorkItems {
		if it.Title == title && it.Status == "todo" {
			return
		}
	}
	a.t.Errorf("the agent's item %q is not in the project: %+v", title, items.WorkItems)
}

// TestRealClaudeConversation:
//   - the agent calls pam's MCP tool create_work_item (as Claude Code
//     names it, mcp__pam__create_work_item): the item is made in the
//     run's project, journaled with actor agent:<run8>, and no question
//     ever shows (the run never needs input);
//   - that run, stopped, is continued with a message: the continuation
//     resumes the conversation — the model's request holds the earlier
//     turns' tool calls and results, and the message as the last user
//     turn — in the same worktree (its command reads the file the first
//     run wrote there);
//   - as a subscriber, a usage limit makes a run rate_limited with its
//     resets_at; with the project's auto_continue on, once the clock is
//     moved past it, pam sends the continue_message of the host's own
//     catalog, which reaches the model as the next user turn.
func TestRealClaudeConversation(t *testing.T) {
	t.Parallel()
	claude := pamtest.AgentCLI(t, "claude")
	model := fakemodel.NewAnthropic()
	t.Cleanup(model.Close)
	home := pamtest.ShortDir(t, "pamh-")
	// The one-time set-up, as docs/agents.md tells the operator, and the
	// operator's own permission for shell commands (so the tool calls
	// below run without a question; pam's MCP tools are allowed by pam).
	writeHome(t, home, ".claude.json", `{"hasCompletedOnboarding": true, "customApiKeyResponses": {"approved": ["`+claudeKey[len(claudeKey)-20:]+`"], "rejected": []}}`)
	writeHome(t, home, ".claude/settings.json", `{"permissions": {"allow": ["Bash"]}}`)
	s, clock := newClockSystem(t, "PAM_CLI_HANG_TIMEOUT="+agentHangTimeout.String())
	a := newAgentRigOn(t, s, home, `
[proxy]
ANTHROPIC_BASE_URL = "`+model.URL()+`"

[providers.claude]
binary = "`+claude+`"
env = { DISABLE_AUTOUPDATER = "1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC = "1" }

# Claude Code as a subscriber (a login token), for a plan's usage limit,
# with this host's own continue_message.
[providers.claude-plan]
binary = "`+claude+`"
hooks = "claude"
trust = "claude"
end_of_options = "--"
pass_env = []
env = { CLAUDE_CODE_OAUTH_TOKEN = "sk-ant-oat01-e2e-fake", DISABLE_AUTOUPDATER = "1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC = "1" }
screens = { rate_limited = ["You[’']ve hit your [\\w ]{0,24}limit"], working = ["esc to interrupt"] }
continue_message = "CONTINUE-OF-THIS-HOST the limit has reset, go on"
`, "ANTHROPIC_API_KEY="+claudeKey)

	// (1) pam's tool, then a shell command that writes a file.
	// Claude Code starts its MCP servers beside its first request; a
	// server still connecting is not in its tool list yet, and Claude
	// offers WaitForMcpServers for it: the model calls that first.
	model.Script(
		fakemodel.Turn{Tool: &fakemodel.ToolCall{ID: "toolu_conv_wait", Name: "WaitForMcpServers", Input: map[string]any{"servers": []string{"pam"}}}},
		fakemodel.Turn{Text: "Filing the follow-up.", Tool: &fakemodel.ToolCall{ID: "toolu_conv_mcp", Name: "mcp__pam__create_work_item",
			Input: map[string]any{"title": "FOLLOW-UP-E2E document the API", "body": "found while working"}}},
		fakemodel.Turn{Text: "Writing the notes.", Tool: &fakemodel.ToolCall{ID: "toolu_conv_bash", Name: "Bash",
			Input: map[string]any{"command": "echo FIRST-TURN-NOTES > notes.txt", "description": "Write notes.txt"}}},
		fakemodel.Text("Filed the follow-up and wrote the notes."),
	)
	first := a.start("claude", "PROMPT-CONV file a follow-up and write notes")
	wt := a.worktree(first.ID)
	a.modelRequest(model, first.ID, 60*time.Second, "the prompt", "PROMPT-CONV")
	req := a.modelRequest(model, first.ID, 60*time.Second, "the MCP tool's result", `"tool_use_id":"toolu_conv_mcp"`)
	if !req.Contains(`"name":"mcp__pam__create_work_item"`) || req.Contains("No such tool available") {
		t.Errorf("pam's tool was not there for the agent: %s", lastUserTurn(req))
	}
	a.modelRequest(model, first.ID, 60*time.Second, "the shell command's result", `"tool_use_id":"toolu_conv_bash"`)
	done := a.s.waitRun(first.ID, "completed, with its agent session", 60*time.Second, func(r wire.Run) bool {
		return r.CompletedAt != nil && r.AgentSessionID != nil
	})
	a.agentItem(first.ID, "FOLLOW-UP-E2E document the API")
	// Nothing was asked: not for pam's tool, not for the command.
	if log := a.s.attentionLog(first.ID); len(log) != 0 {
		t.Errorf("run.attention %q on a run whose tools never ask", log)
	}
	if b, err := os.ReadFile(filepath.Join(wt, "notes.txt")); err != nil || string(b) != "FIRST-TURN-NOTES\n" {
		t.Errorf("notes.txt in the worktree: %q %v", b, err)
	}

	// (2) Stopped, then continued with a message.
	a.s.must(202, "POST", "/api/v1/runs/"+first.ID+"/stop", map[string]any{}, nil)
	a.s.waitRun(first.ID, "stopped", eventually.Long, func(r wire.Run) bool { return r.Status == wire.RunStopped })
	model.Script(
		fakemodel.Turn{Text: "Reading my notes.", Tool: &fakemodel.ToolCall{ID: "toolu_conv_cat", Name: "Bash",
			Input: map[string]any{"command": "cat notes.txt; pwd", "description": "Read notes.txt"}}},
		fakemodel.Text("Continued."),
	)
	var next wire.Run
	a.s.must(202, "POST", "/api/v1/runs/"+first.ID+"/continue", map[string]any{"text": "CONTINUE-CONV now write the docs"}, &next)
	req = a.modelRequest(model, next.ID, 90*time.Second, "the continuation's message", "CONTINUE-CONV now write the docs")
	if !strings.Contains(lastUserTurn(req), "CONTINUE-CONV now write the docs") {
		t.Errorf("the message is not the last user turn: %s", lastUserTurn(req))
	}
	for _, earlier := range []string{"PROMPT-CONV", `"id":"toolu_conv_mcp"`, `"tool_use_id":"toolu_conv_mcp"`, `"id":"toolu_conv_bash"`, `"tool_use_id":"toolu_conv_bash"`} {
		if !req.Contains(earlier) {
			t.Errorf("the continuation's conversation lacks %s", earlier)
		}
	}
	// Its command ran in the first run's worktree.
	req = a.modelRequest(model, next.ID, 60*time.Second, "the continuation's command's result", `"tool_use_id":"toolu_conv_cat"`)
	if !req.Contains("FIRST-TURN-NOTES") || !req.Contains(wt) {
		t.Errorf("the continuation's command did not run in %s: %s", wt, lastUserTurn(req))
	}
	cont := a.s.waitRun(next.ID, "the continuation completed", 60*time.Second, func(r wire.Run) bool { return r.CompletedAt != nil })
	if cont.Workspace == nil || cont.Workspace.Path != wt || cont.AgentSessionID == nil || *cont.AgentSessionID != *done.AgentSessionID {
		t.Errorf("the continuation in %+v with session %v, want %s and %s", cont.Workspace, cont.AgentSessionID, wt, *done.AgentSessionID)
	}

	// A message to the continuation, its turn completed: the next user
	// turn, and the tool it calls runs.
	model.Script(
		fakemodel.Turn{Tool: &fakemodel.ToolCall{ID: "toolu_conv_msg", Name: "Bash",
			Input: map[string]any{"command": "echo MESSAGE-TOOL-RAN > message.txt", "description": "Write message.txt"}}},
		fakemodel.Text("Wrote message.txt."),
	)
	var mr wire.MessageResult
	a.s.must(202, "POST", "/api/v1/runs/"+next.ID+"/messages", map[string]any{"text": "MESSAGE-CONV write message.txt"}, &mr)
	if mr.Delivery != wire.DeliveryConfirmed {
		t.Errorf("message delivery %q\nscreen:\n%s", mr.Delivery, a.pane(next.ID))
	}
	req = a.modelRequest(model, next.ID, eventually.Long, "the message", "MESSAGE-CONV write message.txt")
	if !strings.Contains(lastUserTurn(req), "MESSAGE-CONV write message.txt") || !req.Contains("toolu_conv_cat") {
		t.Errorf("the message is not the next user turn of the conversation: %s", lastUserTurn(req))
	}
	a.modelRequest(model, next.ID, eventually.Long, "the message's tool's result", `"tool_use_id":"toolu_conv_msg"`)
	if b, err := os.ReadFile(filepath.Join(wt, "message.txt")); err != nil || string(b) != "MESSAGE-TOOL-RAN\n" {
		t.Errorf("message.txt in the worktree: %q %v", b, err)
	}

	// (3) A plan's usage limit, then its reset.
	resets := time.Now().Add(3 * time.Hour)
	model.Script(fakemodel.AnthropicUsageLimit(resets), fakemodel.Text("Back at work after the limit."))
	limited := a.start("claude-plan", "PROMPT-LIMIT more work")
	a.modelRequest(model, limited.ID, 60*time.Second, "the prompt", "PROMPT-LIMIT")
	got := a.s.waitRun(limited.ID, "rate_limited with its reset time", eventually.Long, func(r wire.Run) bool {
		return r.Attention == wire.AttentionRateLimited && r.AttentionDetail != nil && r.AttentionDetail.ResetsAt != nil
	})
	if at := *got.AttentionDetail.ResetsAt; at.After(resets) || at.Before(resets.Add(-time.Minute)) {
		t.Errorf("resets_at %v, want the minute of %v", at, resets)
	}
	// Before the reset nothing is sent: the duty looks every 500 ms.
	if eventually.Within(3*time.Second, func() bool { return countTopic(a.s.events(limited.ID), string(wire.TopicRunMessage)) > 0 }) {
		t.Fatalf("a continue before the limit reset: %q", a.s.topics(limited.ID))
	}
	clock.moveTo(got.AttentionDetail.ResetsAt.Add(time.Second))
	req = a.modelRequest(model, limited.ID, 60*time.Second, "the continue message", "CONTINUE-OF-THIS-HOST the limit has reset, go on")
	if !strings.Contains(lastUserTurn(req), "CONTINUE-OF-THIS-HOST") {
		t.Errorf("the continue message is not the last user turn: %s", lastUserTurn(req))
	}
	eventually.Wait(t, eventually.Long, "the answer after the limit on the screen", func() bool {
		return strings.Contains(a.pane(limited.ID), "Back at work after the limit.")
	})
	// Journaled once the delivery is confirmed: the screen changed after
	// its Enter.
	eventually.Wait(t, eventually.Long, "run.message", func() bool {
		return countTopic(a.s.events(limited.ID), string(wire.TopicRunMessage)) > 0
	})
	var msgs []map[string]any
	for _, e := range a.s.events(limited.ID) {
		if e.Topic == string(wire.TopicRunMessage) {
			if e.Actor == nil || *e.Actor != "pam" {
				t.Errorf("run.message by %v, want pam", e.Actor)
			}
			msgs = append(msgs, eventPayload(e))
		}
	}
	if len(msgs) != 1 || msgs[0]["text"] != "CONTINUE-OF-THIS-HOST the limit has reset, go on" || msgs[0]["delivery"] != wire.DeliveryConfirmed {
		t.Errorf("run.message %v", msgs)
	}
	a.s.waitRun(limited.ID, "the limit cleared", eventually.Long, func(r wire.Run) bool { return r.Attention != wire.AttentionRateLimited })
}
