package fakemodel

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Anthropic is a fake of the Anthropic Messages API as Claude Code uses
// it (ANTHROPIC_BASE_URL): POST /v1/messages, streamed or not, and POST
// /v1/messages/count_tokens. A request that offers tools is the agent's
// conversation and takes the next scripted turn; Claude Code's other
// calls (a title, a quota probe) get a short text. Anything else is 404
// with the API's error body, which Claude Code tolerates.
type Anthropic struct{ *server }

// NewAnthropic starts an Anthropic fake on 127.0.0.1; Close stops it.
func NewAnthropic() *Anthropic {
	return &Anthropic{newServer("anthropic", anthropicAgent, serveAnthropic)}
}

// anthropicAgent: the agent's requests offer tools; Claude Code's title
// and quota requests do not.
func anthropicAgent(r *http.Request, body []byte) bool {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
		return false
	}
	var req anthropicRequest
	return json.Unmarshal(body, &req) == nil && len(req.Tools) > 0
}

// anthropicRequest is what the fake reads of a Messages request.
type anthropicRequest struct {
	Model  string            `json:"model"`
	Stream bool              `json:"stream"`
	Tools  []json.RawMessage `json:"tools"`
}

// serveAnthropic answers one request to the Anthropic fake: a message
// takes its turn (see turnFor), whole or streamed as the request asks.
func serveAnthropic(s *server, w http.ResponseWriter, r *http.Request, body []byte, agent bool) {
	if answerAnthropicAside(w, r, body) {
		return
	}
	var req anthropicRequest
	if err := json.Unmarshal(body, &req); err != nil {
		anthropicError(w, &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: err.Error()})
		return
	}
	turn := s.turnFor(agent)
	if turn.Error != nil {
		anthropicError(w, turn.Error)
		return
	}
	m := newAnthropicMessage(s, req, turn, body)
	if !req.Stream {
		writeJSON(w, http.StatusOK, m.whole())
		return
	}
	streamTurn(r, turn, &anthropicStream{anthropicMessage: m, e: startSSE(w)})
}

// answerAnthropicAside answers every request that is not a message
// (POST /v1/messages) and reports whether it did: Claude Code's early
// HEAD /, its token counts, and 404 for anything else.
func answerAnthropicAside(w http.ResponseWriter, r *http.Request, body []byte) bool {
	switch {
	case r.Method == http.MethodHead && r.URL.Path == "/":
		// Claude Code opens its connection early with HEAD /.
		w.WriteHeader(http.StatusOK)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages/count_tokens":
		writeJSON(w, http.StatusOK, map[string]any{"input_tokens": len(body)/4 + 1})
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages":
		return false
	default:
		anthropicError(w, &APIError{Status: http.StatusNotFound, Type: "not_found_error", Message: "Not found: " + r.URL.Path})
	}
	return true
}

// anthropicMessage is the Messages API's answer of one turn: what its
// whole body and its stream both say.
type anthropicMessage struct {
	turn              Turn
	id, model, toolID string
	stop              string // end_turn, or tool_use when the turn calls a tool
	inputTokens       int
	outputTokens      int
}

func newAnthropicMessage(s *server, req anthropicRequest, turn Turn, body []byte) *anthropicMessage {
	m := &anthropicMessage{turn: turn, id: s.id("msg_"), model: req.Model, stop: "end_turn",
		inputTokens: len(body)/4 + 1, outputTokens: len(turn.Text)/4 + 1}
	if m.model == "" {
		m.model = "claude-fake"
	}
	if turn.Tool != nil {
		m.toolID, m.stop = turn.Tool.ID, "tool_use"
		if m.toolID == "" {
			m.toolID = s.id("toolu_")
		}
	}
	return m
}

// usage is the message's token counts; output is what the message
// counts as its output so far.
func (m *anthropicMessage) usage(output int) map[string]any {
	return map[string]any{"input_tokens": m.inputTokens, "output_tokens": output,
		"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
}

// whole is the body of a message that is not streamed.
func (m *anthropicMessage) whole() map[string]any {
	text := map[string]any{"type": "text", "text": m.turn.Text}
	var tool map[string]any
	if m.turn.Tool != nil {
		tool = map[string]any{"type": "tool_use", "id": m.toolID, "name": m.turn.Tool.Name, "input": m.turn.Tool.Input}
	}
	return map[string]any{"id": m.id, "type": "message", "role": "assistant", "model": m.model,
		"content": m.turn.blocks(text, tool), "stop_reason": m.stop, "stop_sequence": nil, "usage": m.usage(m.outputTokens)}
}

// anthropicStream streams a message as the Messages API's events.
type anthropicStream struct {
	*anthropicMessage
	e sse
}

func (a *anthropicStream) opening() {
	a.e.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": a.id, "type": "message", "role": "assistant", "model": a.model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": a.usage(1)}})
}

func (a *anthropicStream) text(index int, pieces []string) {
	a.block(index, map[string]any{"type": "text", "text": ""}, "text_delta", "text", pieces)
}

func (a *anthropicStream) toolCall(index int, pieces []string) {
	a.block(index, map[string]any{"type": "tool_use", "id": a.toolID, "name": a.turn.Tool.Name, "input": map[string]any{}},
		"input_json_delta", "partial_json", pieces)
}

// block streams one content block: its start, a delta of type
// deltaType per piece (the piece under key), its stop.
func (a *anthropicStream) block(index int, start map[string]any, deltaType, key string, pieces []string) {
	a.e.event("content_block_start", map[string]any{"type": "content_block_start", "index": index, "content_block": start})
	for _, c := range pieces {
		a.e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": index,
			"delta": map[string]any{"type": deltaType, key: c}})
	}
	a.e.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
}

func (a *anthropicStream) closing() {
	a.e.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": a.stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": a.outputTokens}})
	a.e.event("message_stop", map[string]any{"type": "message_stop"})
}

// anthropicError writes the Messages API's error body.
func anthropicError(w http.ResponseWriter, e *APIError) {
	for k, vs := range e.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.Header().Set("request-id", "req_fake")
	writeJSON(w, e.Status, map[string]any{"type": "error", "error": map[string]any{"type": e.Type, "message": e.Message}})
}

// AnthropicUsageLimit is the turn of a usage limit as the Messages API
// reports it: 429 rate_limit_error, with the unified rate-limit headers
// saying the limit was hit and when it resets.
func AnthropicUsageLimit(resetsAt time.Time) Turn {
	h := http.Header{}
	h.Set("anthropic-ratelimit-unified-status", "rejected")
	h.Set("anthropic-ratelimit-unified-representative-claim", "five_hour")
	h.Set("anthropic-ratelimit-unified-reset", strconv.FormatInt(resetsAt.Unix(), 10))
	h.Set("retry-after", strconv.Itoa(max(1, int(time.Until(resetsAt).Seconds()))))
	// Retrying cannot help before the reset: say so, or the CLI's client
	// retries with backoff for minutes before it shows anything.
	h.Set("x-should-retry", "false")
	return Turn{Error: &APIError{Status: http.StatusTooManyRequests, Type: "rate_limit_error",
		Message: "This request would exceed your account's rate limit. Please try again later.", Header: h}}
}
