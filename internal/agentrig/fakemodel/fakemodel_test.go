package fakemodel

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"pam/internal/eventually"
)

// post sends body to url and returns the status, the headers and the
// server-sent events' data lines (or the whole body when not a stream).
func post(t *testing.T, url, body string) (int, http.Header, []string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, []string{string(b)}
	}
	var data []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			data = append(data, d)
		}
	}
	return resp.StatusCode, resp.Header, data
}

func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("%v: %s", err, s)
	}
	return m
}

// dig walks maps and slices by keys and indexes.
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			s, _ := v.([]any)
			if k >= len(s) {
				return nil
			}
			v = s[k]
		}
	}
	return v
}

const anthropicAgentBody = `{"model":"claude-x","stream":true,"tools":[{"name":"Bash"}],"messages":[{"role":"user","content":"PROMPT-1"}]}`

func TestAnthropicStreamsScriptedTurns(t *testing.T) {
	s := NewAnthropic()
	defer s.Close()
	s.Script(Turn{Text: "Let me look.", Tool: &ToolCall{ID: "toolu_1", Name: "Bash", Input: map[string]any{"command": "ls -la"}}},
		Text("All done here."))

	// A title request (no tools) takes no scripted turn.
	code, _, side := post(t, s.URL()+"/v1/messages?beta=true", `{"model":"m","stream":false,"tools":[],"messages":[]}`)
	if code != 200 || dig(decode(t, side[0]), "content", 0, "text") != DefaultText {
		t.Fatalf("side request: %d %v", code, side)
	}

	code, _, events := post(t, s.URL()+"/v1/messages?beta=true", anthropicAgentBody)
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	var types []string
	var text, input, stop string
	for _, e := range events {
		m := decode(t, e)
		typ := m["type"].(string)
		types = append(types, typ)
		switch typ {
		case "content_block_delta":
			if d, _ := dig(m, "delta", "text").(string); d != "" {
				text += d
			}
			if d, _ := dig(m, "delta", "partial_json").(string); d != "" {
				input += d
			}
		case "content_block_start":
			if dig(m, "content_block", "type") == "tool_use" && (dig(m, "content_block", "id") != "toolu_1" || dig(m, "content_block", "name") != "Bash") {
				t.Errorf("tool_use block %v", m)
			}
		case "message_delta":
			stop, _ = dig(m, "delta", "stop_reason").(string)
		}
	}
	if types[0] != "message_start" || types[len(types)-1] != "message_stop" {
		t.Errorf("event order %v", types)
	}
	if text != "Let me look." || stop != "tool_use" || decode(t, input)["command"] != "ls -la" {
		t.Errorf("text %q, input %q, stop %q", text, input, stop)
	}

	// The CLI sends the tool's result back; the next turn answers it.
	_, _, events = post(t, s.URL()+"/v1/messages", `{"stream":true,"tools":[{"name":"Bash"}],"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"file-list"}]}]}`)
	if !strings.Contains(strings.Join(events, ""), "All done here.") {
		t.Errorf("second turn: %v", events)
	}
	got := s.AgentRequests()
	if len(got) != 2 || !got[0].Contains("PROMPT-1") || !got[1].Contains(`"tool_use_id":"toolu_1"`) {
		t.Errorf("agent requests: %s", s.Describe())
	}
	if len(s.Requests()) != 3 || s.Pending() != 0 {
		t.Errorf("requests %d, pending %d", len(s.Requests()), s.Pending())
	}
	// An empty script answers with the default text.
	_, _, events = post(t, s.URL()+"/v1/messages", anthropicAgentBody)
	if !strings.Contains(strings.Join(events, ""), DefaultText) {
		t.Errorf("default turn: %v", events)
	}
}

func TestAnthropicErrorsAndOtherRoutes(t *testing.T) {
	s := NewAnthropic()
	defer s.Close()
	resets := time.Now().Add(time.Hour).Truncate(time.Second)
	s.Script(AnthropicUsageLimit(resets))
	code, h, body := post(t, s.URL()+"/v1/messages", anthropicAgentBody)
	if code != 429 || dig(decode(t, body[0]), "error", "type") != "rate_limit_error" {
		t.Fatalf("usage limit: %d %v", code, body)
	}
	if h.Get("anthropic-ratelimit-unified-status") != "rejected" || h.Get("x-should-retry") != "false" ||
		h.Get("anthropic-ratelimit-unified-reset") != itoa(int(resets.Unix())) {
		t.Errorf("headers %v", h)
	}
	code, _, body = post(t, s.URL()+"/v1/messages/count_tokens", `{"messages":[]}`)
	if code != 200 || decode(t, body[0])["input_tokens"] == nil {
		t.Errorf("count_tokens: %d %v", code, body)
	}
	code, _, body = post(t, s.URL()+"/api/unknown", `{}`)
	if code != 404 || dig(decode(t, body[0]), "error", "type") != "not_found_error" {
		t.Errorf("unknown route: %d %v", code, body)
	}
	if r := s.Requests(); r[0].Status != 429 || !r[0].Agent || r[2].Status != 404 {
		t.Errorf("record: %s", s.Describe())
	}
}

func TestOpenAIStreamsScriptedTurns(t *testing.T) {
	s := NewOpenAI()
	defer s.Close()
	s.Script(Turn{Text: "Running it.", Tool: &ToolCall{ID: "call_1", Name: "exec_command", Input: map[string]any{"cmd": "ls"}}},
		OpenAIUsageLimit(time.Unix(2000000000, 0)))
	code, _, events := post(t, s.URL()+"/v1/responses", `{"model":"gpt-x","stream":true,"tools":[{"type":"function","name":"exec_command"}],"input":[{"type":"message","content":"PROMPT-2"}]}`)
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	var types []string
	var text string
	var done map[string]any
	for _, e := range events {
		m := decode(t, e)
		types = append(types, m["type"].(string))
		switch m["type"] {
		case "response.output_text.delta":
			text += m["delta"].(string)
		case "response.completed":
			done = m
		}
	}
	if types[0] != "response.created" || types[len(types)-1] != "response.completed" || text != "Running it." {
		t.Fatalf("events %v, text %q", types, text)
	}
	call := dig(done, "response", "output", 1).(map[string]any)
	if call["type"] != "function_call" || call["call_id"] != "call_1" || call["name"] != "exec_command" || decode(t, call["arguments"].(string))["cmd"] != "ls" {
		t.Errorf("function call %v", call)
	}
	if dig(done, "response", "usage", "total_tokens") == nil {
		t.Error("no usage in response.completed")
	}
	// A request without tools (a title) gets the default text; the next
	// agent request gets the usage limit.
	_, _, side := post(t, s.URL()+"/v1/responses", `{"stream":false,"tools":[],"input":[]}`)
	if dig(decode(t, side[0]), "output", 0, "content", 0, "text") != DefaultText {
		t.Errorf("side request %v", side)
	}
	code, _, body := post(t, s.URL()+"/v1/responses", `{"stream":true,"tools":[{"type":"function"}],"input":[{"type":"function_call_output","call_id":"call_1","output":"a.txt"}]}`)
	e := decode(t, body[0])
	if code != 429 || dig(e, "error", "type") != "usage_limit_reached" || dig(e, "error", "resets_at") != float64(2000000000) {
		t.Errorf("usage limit %d %v", code, body)
	}
	if a := s.AgentRequests(); len(a) != 2 || !a[0].Contains("PROMPT-2") || !a[1].Contains(`"call_id":"call_1"`) {
		t.Errorf("agent requests %s", s.Describe())
	}
	code, _, body = post(t, s.URL()+"/v1/chat/completions", `{}`)
	if code != 404 {
		t.Errorf("unknown route %d %v", code, body)
	}
	resp, err := http.Get(s.URL() + "/v1/models")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("models: %v %v", resp, err)
	}
	resp.Body.Close()
}

func TestGeminiStreamsScriptedTurns(t *testing.T) {
	s := NewGemini()
	defer s.Close()
	s.Script(Turn{Text: "Running it.", Tool: &ToolCall{Name: "run_shell_command", Input: map[string]any{"command": "ls"}}},
		GeminiUsageLimit(time.Now().Add(time.Minute)))
	agent := `{"contents":[{"role":"user","parts":[{"text":"PROMPT-3"}]}],"tools":[{"functionDeclarations":[{"name":"run_shell_command"}]}]}`
	// The router's question (JSON wanted, no tools) parses and takes no turn.
	code, _, side := post(t, s.URL()+"/v1beta/models/flash-lite:generateContent", `{"contents":[],"generationConfig":{"responseMimeType":"application/json"}}`)
	if txt, _ := dig(decode(t, side[0]), "candidates", 0, "content", "parts", 0, "text").(string); code != 200 || !json.Valid([]byte(txt)) {
		t.Fatalf("side request %d %v", code, side)
	}
	code, _, events := post(t, s.URL()+"/v1beta/models/pro:streamGenerateContent?alt=sse", agent)
	if code != 200 || len(events) < 2 {
		t.Fatalf("status %d, events %v", code, events)
	}
	var text string
	var call any
	for _, e := range events {
		for _, p := range dig(decode(t, e), "candidates", 0, "content", "parts").([]any) {
			if s, ok := dig(p, "text").(string); ok {
				text += s
			}
			if fc := dig(p, "functionCall"); fc != nil {
				call = fc
			}
		}
	}
	last := decode(t, events[len(events)-1])
	if text != "Running it." || dig(call, "name") != "run_shell_command" || dig(call, "args", "command") != "ls" ||
		dig(last, "candidates", 0, "finishReason") != "STOP" || last["usageMetadata"] == nil {
		t.Errorf("text %q, call %v, last %v", text, call, last)
	}
	code, _, body := post(t, s.URL()+"/v1beta/models/pro:streamGenerateContent?alt=sse", `{"contents":[{"role":"user","parts":[{"functionResponse":{"name":"run_shell_command","response":{"output":"a.txt"}}}]}],"tools":[{"functionDeclarations":[{"name":"x"}]}]}`)
	if code != 429 || dig(decode(t, body[0]), "error", "status") != "RESOURCE_EXHAUSTED" {
		t.Errorf("usage limit %d %v", code, body)
	}
	if a := s.AgentRequests(); len(a) != 2 || !a[0].Contains("PROMPT-3") || !a[1].Contains("functionResponse") {
		t.Errorf("agent requests %s", s.Describe())
	}
	code, _, _ = post(t, s.URL()+"/v1beta/models/pro:countTokens", `{}`)
	if code != 200 {
		t.Errorf("countTokens %d", code)
	}
}

func TestWaitAndDelay(t *testing.T) {
	s := NewAnthropic()
	defer s.Close()
	s.Script(Turn{Text: "slow", Delay: 300 * time.Millisecond})
	if _, ok := s.Wait(50*time.Millisecond, func(Request) bool { return true }); ok {
		t.Fatal("Wait found a request before any was made")
	}
	done := make(chan time.Duration)
	go func() {
		start := time.Now()
		post(t, s.URL()+"/v1/messages", anthropicAgentBody)
		done <- time.Since(start)
	}()
	r, ok := s.Wait(eventually.Short, func(r Request) bool { return r.Agent && r.Contains("PROMPT-1") })
	if !ok || r.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("Wait: %v %+v", ok, r)
	}
	if took := <-done; took < 300*time.Millisecond {
		t.Errorf("a delayed turn took %s", took)
	}
	if !bytes.Contains(s.Requests()[0].Body, []byte("PROMPT-1")) {
		t.Error("body not recorded")
	}
}
