package e2e

import (
	"encoding/json"
	"fmt"
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

// lastOpenAIUserTurn is the last input item of a Responses request when
// it is a message of the user's, as JSON ("" otherwise).
func lastOpenAIUserTurn(r fakemodel.Request) string {
	var body struct {
		Input []json.RawMessage `json:"input"`
	}
	if json.Unmarshal(r.Body, &body) != nil || len(body.Input) == 0 {
		return ""
	}
	last := body.Input[len(body.Input)-1]
	var item struct {
		Type string `json:"type"`
		Role string `json:"role"`
	}
	if json.Unmarshal(last, &item) != nil || item.Type != "message" || item.Role != "user" {
		return ""
	}
	return string(last)
}

// TestRealCodexConversation: the pinned codex against the fake OpenAI
// API, as TestRealClaudeConversation for Claude Code.
//   - pam's MCP tool, which codex offers in the namespace mcp__pam, makes
//     the item in the run's project as agent:<run8>, and codex asks
//     nothing (pam sets its approval mode);
//   - a stopped run (its session id from codex's notify) continued with
//     a message resumes its thread: the request holds the earlier tool
//     calls and their outputs, the message last, and the continuation's
//     command runs in the first run's worktree; a message to it, once
//     its turn completed, is the next user turn, and its command runs;
//   - a usage limit (429 usage_limit_reached with its resets_at) makes
//     the run rate_limited with the time codex prints; once the clock
//     passes it, the host's continue_message reaches the model.
func TestRealCodexConversation(t *testing.T) {
	t.Parallel()
	codex := pamtest.AgentCLI(t, "codex")
	openai := fakemodel.NewOpenAI()
	t.Cleanup(openai.Close)
	home := pamtest.ShortDir(t, "pamh-")
	writeCodexHome(t, home, openai)
	s, clock := newClockSystem(t, "PAM_CLI_HANG_TIMEOUT="+agentHangTimeout.String())
	a := newAgentRigOn(t, s, home, `
[providers.codex]
binary = "`+codex+`"
continue_message = "CODEX-CONTINUE-OF-THIS-HOST go on"
`, "OPENAI_API_KEY=sk-e2e-fake-openai")

	// (1) pam's tool, then a command in the sandbox that writes a file.
	openai.Script(
		fakemodel.Turn{Text: "Filing the follow-up.", Tool: &fakemodel.ToolCall{ID: "call_conv_mcp", Namespace: "mcp__pam", Name: "create_work_item",
			Input: map[string]any{"title": "CODEX-FOLLOW-UP document the API"}}},
		fakemodel.Turn{Text: "Writing notes.", Tool: &fakemodel.ToolCall{ID: "call_conv_write", Name: "exec_command",
			Input: map[string]any{"cmd": "echo CODEX-NOTES > codex-notes.txt"}}},
		fakemodel.Text("Filed the follow-up and wrote notes."),
	)
	first := a.start("codex", "PROMPT-CODEX-CONV file a follow-up")
	wt := a.worktree(first.ID)
	req := a.modelRequest(openai, first.ID, 60*time.Second, "the MCP tool's output", `"call_id":"call_conv_mcp"`, `"type":"function_call_output"`)
	if !req.Contains("CODEX-FOLLOW-UP document the API") || req.Contains("unsupported call") {
		t.Errorf("pam's tool did not answer codex:\n%s", openai.Describe())
	}
	a.modelRequest(openai, first.ID, 60*time.Second, "the command's output", `"call_id":"call_conv_write"`, `"type":"function_call_output"`)
	done := a.s.waitRun(first.ID, "completed, with its agent session", 60*time.Second, func(r wire.Run) bool {
		return r.CompletedAt != nil && r.AgentSessionID != nil
	})
	a.agentItem(first.ID, "CODEX-FOLLOW-UP document the API")
	if log := a.s.attentionLog(first.ID); len(log) != 0 {
		t.Errorf("run.attention %q on a run whose tools never ask", log)
	}
	if b, err := os.ReadFile(filepath.Join(wt, "codex-notes.txt")); err != nil || string(b) != "CODEX-NOTES\n" {
		t.Errorf("codex-notes.txt in the worktree: %q %v", b, err)
	}

	// (2) Stopped, then continued with a message.
	a.s.must(202, "POST", "/api/v1/runs/"+first.ID+"/stop", map[string]any{}, nil)
	a.s.waitRun(first.ID, "stopped", eventually.Long, func(r wire.Run) bool { return r.Status == wire.RunStopped })
	openai.Script(
		fakemodel.Turn{Text: "Reading my notes.", Tool: &fakemodel.ToolCall{ID: "call_conv_cat", Name: "exec_command",
			Input: map[string]any{"cmd": "cat codex-notes.txt; pwd"}}},
		fakemodel.Text("Continued."),
	)
	var next wire.Run
	a.s.must(202, "POST", "/api/v1/runs/"+first.ID+"/continue", map[string]any{"text": "CODEX-CONTINUE-CONV now the docs"}, &next)
	req = a.modelRequest(openai, next.ID, 90*time.Second, "the continuation's message", "CODEX-CONTINUE-CONV now the docs")
	if !strings.Contains(lastOpenAIUserTurn(req), "CODEX-CONTINUE-CONV now the docs") {
		t.Errorf("the message is not the last user turn:\n%s", openai.Describe())
	}
	for _, earlier := range []string{"PROMPT-CODEX-CONV", `"call_id":"call_conv_mcp"`, `"call_id":"call_conv_write"`, "CODEX-FOLLOW-UP document the API"} {
		if !req.Contains(earlier) {
			t.Errorf("the continuation's conversation lacks %s", earlier)
		}
	}
	req = a.modelRequest(openai, next.ID, 60*time.Second, "the continuation's command's output", `"call_id":"call_conv_cat"`, `"type":"function_call_output"`)
	if !req.Contains("CODEX-NOTES") || !req.Contains(wt) {
		t.Errorf("the continuation's command did not run in %s:\n%s", wt, openai.Describe())
	}
	cont := a.s.waitRun(next.ID, "the continuation completed", 60*time.Second, func(r wire.Run) bool { return r.CompletedAt != nil })
	if cont.Workspace == nil || cont.Workspace.Path != wt || cont.AgentSessionID == nil || *cont.AgentSessionID != *done.AgentSessionID {
		t.Errorf("the continuation in %+v with session %v, want %s and %s", cont.Workspace, cont.AgentSessionID, wt, *done.AgentSessionID)
	}

	// A message to the continuation, its turn completed: the next user
	// turn, and the command it calls runs.
	openai.Script(
		fakemodel.Turn{Tool: &fakemodel.ToolCall{ID: "call_conv_msg", Name: "exec_command",
			Input: map[string]any{"cmd": "echo CODEX-MESSAGE-RAN > message.txt"}}},
		fakemodel.Text("Wrote message.txt."),
	)
	var mr wire.MessageResult
	a.s.must(202, "POST", "/api/v1/runs/"+next.ID+"/messages", map[string]any{"text": "CODEX-MESSAGE write message.txt"}, &mr)
	if mr.Delivery != wire.DeliveryConfirmed {
		t.Errorf("message delivery %q\nscreen:\n%s", mr.Delivery, a.pane(next.ID))
	}
	req = a.modelRequest(openai, next.ID, eventually.Long, "the message", "CODEX-MESSAGE write message.txt")
	if !strings.Contains(lastOpenAIUserTurn(req), "CODEX-MESSAGE write message.txt") || !req.Contains("call_conv_cat") {
		t.Errorf("the message is not the next user turn of the conversation:\n%s", openai.Describe())
	}
	a.modelRequest(openai, next.ID, eventually.Long, "the message's command's output", `"call_id":"call_conv_msg"`, `"type":"function_call_output"`)
	if b, err := os.ReadFile(filepath.Join(wt, "message.txt")); err != nil || string(b) != "CODEX-MESSAGE-RAN\n" {
		t.Errorf("message.txt in the worktree: %q %v", b, err)
	}

	// (3) A usage limit, then its reset.
	resets := time.Now().Add(3 * time.Hour)
	openai.Script(fakemodel.OpenAIUsageLimit(resets), fakemodel.Text("Codex back at work after the limit."))
	limited := a.start("codex", "PROMPT-CODEX-LIMIT more work")
	a.modelRequest(openai, limited.ID, 60*time.Second, "the prompt", "PROMPT-CODEX-LIMIT")
	got := a.s.waitRun(limited.ID, "rate_limited with its reset time", eventually.Long, func(r wire.Run) bool {
		return r.Attention == wire.AttentionRateLimited && r.AttentionDetail != nil && r.AttentionDetail.ResetsAt != nil
	})
	if at := *got.AttentionDetail.ResetsAt; at.After(resets) || at.Before(resets.Add(-time.Minute)) {
		t.Errorf("resets_at %v, want the minute of %v", at, resets)
	}
	if eventually.Within(3*time.Second, func() bool { return countTopic(a.s.events(limited.ID), string(wire.TopicRunMessage)) > 0 }) {
		t.Fatalf("a continue before the limit reset: %q", a.s.topics(limited.ID))
	}
	clock.moveTo(got.AttentionDetail.ResetsAt.Add(time.Second))
	req = a.modelRequest(openai, limited.ID, 60*time.Second, "the continue message", "CODEX-CONTINUE-OF-THIS-HOST go on")
	if !strings.Contains(lastOpenAIUserTurn(req), "CODEX-CONTINUE-OF-THIS-HOST go on") {
		t.Errorf("the continue message is not the last user turn:\n%s", openai.Describe())
	}
	eventually.Wait(t, eventually.Long, "the answer after the limit on the screen", func() bool {
		return strings.Contains(a.pane(limited.ID), "Codex back at work after the limit.")
	})
	eventually.Wait(t, eventually.Long, "run.message", func() bool {
		return countTopic(a.s.events(limited.ID), string(wire.TopicRunMessage)) > 0
	})
	for _, e := range a.s.events(limited.ID) {
		if e.Topic == string(wire.TopicRunMessage) && (e.Actor == nil || *e.Actor != "pam" || eventPayload(e)["text"] != "CODEX-CONTINUE-OF-THIS-HOST go on") {
			t.Errorf("run.message by %v: %v", e.Actor, eventPayload(e))
		}
	}
}

// TestRealCodexMessagesInARow: messages to codex, one after another, each
// reach the model as a turn. Codex takes an Enter that follows a burst of
// typed characters within 120 ms as a newline of a paste: a delivery
// that pressed Enter as soon as its echo was captured left the text in
// codex's input, unsent, with the delivery confirmed (the screen did
// change), for the first or second message of four.
func TestRealCodexMessagesInARow(t *testing.T) {
	t.Parallel()
	codex := pamtest.AgentCLI(t, "codex")
	openai := fakemodel.NewOpenAI()
	t.Cleanup(openai.Close)
	home := pamtest.ShortDir(t, "pamh-")
	writeCodexHome(t, home, openai)
	a := newAgentRig(t, home, `
[providers.codex]
binary = "`+codex+`"
`, "OPENAI_API_KEY=sk-e2e-fake-openai")
	openai.Script(fakemodel.Text("Answer 0."))
	r := a.start("codex", "PROMPT-CODEX-IN-A-ROW")
	a.s.waitRun(r.ID, "the prompt's turn completed", 60*time.Second, func(r wire.Run) bool { return r.CompletedAt != nil })
	eventually.Wait(t, eventually.Long, "the prompt's answer on the screen", func() bool { return strings.Contains(a.pane(r.ID), "Answer 0.") })
	for i := 1; i <= 4; i++ {
		openai.Script(fakemodel.Text(fmt.Sprintf("Answer %d.", i)))
		text := fmt.Sprintf("CODEX-IN-A-ROW message %d", i)
		var mr wire.MessageResult
		a.s.must(202, "POST", "/api/v1/runs/"+r.ID+"/messages", map[string]any{"text": text}, &mr)
		if mr.Delivery != wire.DeliveryConfirmed {
			t.Errorf("message %d: delivery %q", i, mr.Delivery)
		}
		req := a.modelRequest(openai, r.ID, eventually.Long, fmt.Sprintf("message %d", i), text)
		if !strings.Contains(lastOpenAIUserTurn(req), text) {
			t.Errorf("message %d is not the last user turn:\n%s", i, openai.Describe())
		}
		eventually.Wait(t, eventually.Long, fmt.Sprintf("answer %d on the screen", i), func() bool {
			return strings.Contains(a.pane(r.ID), fmt.Sprintf("Answer %d.", i))
		})
	}
}
