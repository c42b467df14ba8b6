package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"pam/internal/agentrig/fakemodel"
	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/wire"
)

// TestRealGeminiConversation: the pinned gemini against the fake Gemini
// API, as far as gemini allows what TestRealClaudeConversation proves
// for Claude Code (docs/agents.md says per CLI what holds):
//   - pam's MCP tool, registered as the operator does where pam cannot
//     give it to gemini itself (`gemini mcp add --scope user --trust pam
//     <pam> mcp`: a worker that does not run as root, or whose data dir
//     lies under a folder others can write, like this test's), which
//     gemini names mcp_pam_create_work_item: the item is made in the
//     run's project as agent:<run8>, and gemini asks nothing;
//   - continue: gemini has no hook pam wires, so no session id is ever
//     reported, and POST /runs/{id}/continue is 409 not_resumable;
//   - a usage limit makes the run rate_limited, but gemini's screen
//     names no reset time (its dialog offers "Keep trying" / "Stop"), so
//     resets_at stays null and pam never continues it, however far the
//     clock moves.
func TestRealGeminiConversation(t *testing.T) {
	t.Parallel()
	gemini := pamtest.AgentCLI(t, "gemini")
	google := fakemodel.NewGemini()
	t.Cleanup(google.Close)
	home := pamtest.ShortDir(t, "pamh-")
	pam, _ := json.Marshal(pamtest.Pam(t))
	writeHome(t, home, ".gemini/settings.json", `{"security": {"auth": {"selectedType": "gemini-api-key"}},
  "mcpServers": {"pam": {"command": `+string(pam)+`, "args": ["mcp"], "trust": true}}}`)
	s, clock := newClockSystem(t, "PAM_CLI_HANG_TIMEOUT="+agentHangTimeout.String())
	a := newAgentRigOn(t, s, home, `
[proxy]
GOOGLE_GEMINI_BASE_URL = "`+google.URL()+`"

[providers.gemini]
binary = "`+gemini+`"
`, "GEMINI_API_KEY=e2e-fake-gemini")

	google.Script(
		fakemodel.Turn{Text: "Filing the follow-up.", Tool: &fakemodel.ToolCall{ID: "call_gemini_mcp", Name: "mcp_pam_create_work_item",
			Input: map[string]any{"title": "GEMINI-FOLLOW-UP document the API"}}},
		fakemodel.Text("Filed the follow-up."),
	)
	first := a.start("gemini", "PROMPT-GEMINI-CONV file a follow-up")
	req := a.modelRequest(google, first.ID, 90*time.Second, "the MCP tool's response", `"functionResponse"`, "GEMINI-FOLLOW-UP document the API")
	if !req.Contains("project_id") {
		t.Errorf("pam's tool did not answer gemini:\n%s", google.Describe())
	}
	eventually.Wait(t, eventually.Long, "gemini's answer on its screen", func() bool {
		return strings.Contains(a.pane(first.ID), "Filed the follow-up.")
	})
	a.agentItem(first.ID, "GEMINI-FOLLOW-UP document the API")
	if log := a.s.attentionLog(first.ID); len(log) != 0 {
		t.Errorf("run.attention %q on a run whose tools never ask", log)
	}

	// No session id, so nothing to resume.
	a.s.must(202, "POST", "/api/v1/runs/"+first.ID+"/stop", map[string]any{}, nil)
	stopped := a.s.waitRun(first.ID, "stopped", eventually.Long, func(r wire.Run) bool { return r.Status == wire.RunStopped })
	if stopped.AgentSessionID != nil {
		t.Errorf("gemini reported a session %q: continue it in this test", *stopped.AgentSessionID)
	}
	if code, body := a.s.call("POST", "/api/v1/runs/"+first.ID+"/continue", map[string]any{"text": "more"}); code != 409 || !strings.Contains(string(body), wire.CodeNotResumable) {
		t.Errorf("continue of a gemini run: %d %s", code, body)
	}

	// A usage limit without a reset time.
	google.Script(fakemodel.GeminiUsageLimit(time.Now().Add(3 * time.Hour)))
	limited := a.start("gemini", "PROMPT-GEMINI-LIMIT more work")
	a.modelRequest(google, limited.ID, 90*time.Second, "the prompt", "PROMPT-GEMINI-LIMIT")
	got := a.s.waitRun(limited.ID, "rate_limited", 60*time.Second, func(r wire.Run) bool { return r.Attention == wire.AttentionRateLimited })
	if got.AttentionDetail == nil || got.AttentionDetail.ResetsAt != nil {
		t.Errorf("gemini's limit: %+v", got.AttentionDetail)
	}
	clock.moveTo(time.Now().Add(24 * time.Hour))
	if eventually.Within(3*time.Second, func() bool { return countTopic(a.s.events(limited.ID), string(wire.TopicRunMessage)) > 0 }) {
		t.Errorf("pam continued a limit whose reset it does not know: %q", a.s.topics(limited.ID))
	}
}
