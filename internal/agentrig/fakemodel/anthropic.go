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

func serveAnthropic(s *server, w http.ResponseWriter, r *http.Request, body []byte, agent bool) {
	switch {
	case r.Method == http.MethodHead && r.URL.Path == "/":
		// Claude Code opens its connection early with HEAD /.
		w.WriteHeader(http.StatusOK)
		return
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages/count_tokens":
		writeJSON(w, http.StatusOK, map[string]any{"input_tokens": len(body)/4 + 1})
		return
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages":
	default:
		anthropicError(w, &APIError{Status: http.StatusNotFound, Type: "not_found_error", Message: "Not found: " + r.URL.Path})
		return
	}
	var req anthropicRequest
	if err := json.Unmarshal(body, &req); err != nil {
		anthropicError(w, &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: err.Error()})
		return
	}
	turn := Text(DefaultText)
	if agent {
		turn = s.next()
	}
	if turn.Error != nil {
		anthropicError(w, turn.Error)
		return
	}
	model := req.Model
	if model == "" {
		model = "claude-fake"
	}
	msgID := s.id("msg_")
	var toolID string
	if turn.Tool != nil {
		toolID = turn.Tool.ID
		if toolID == "" {
			toolID = s.id("toolu_")
		}
	}
	stop := "end_turn"
	if turn.Tool != nil {
		stop = "tool_use"
	}
	usage := map[string]any{"input_tokens": len(body)/4 + 1, "output_tokens": len(turn.Text)/4 + 1,
		"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
	if !req.Stream {
		var content []any
		if turn.Text != "" || turn.Tool == nil {
			content = append(content, map[string]any{"type": "text", "text": turn.Text})
		}
		if turn.Tool != nil {
			content = append(content, map[string]any{"type": "tool_use", "id": toolID, "name": turn.Tool.Name, "input": turn.Tool.Input})
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": msgID, "type": "message", "role": "assistant", "model": model,
			"content": content, "stop_reason": stop, "stop_sequence": nil, "usage": usage})
		return
	}
	e := startSSE(w)
	e.event("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": msgID, "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": map[string]any{"input_tokens": usage["input_tokens"], "output_tokens": 1,
			"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}})
	pause(r, turn.Delay)
	index := 0
	if turn.Text != "" || turn.Tool == nil {
		e.event("content_block_start", map[string]any{"type": "content_block_start", "index": index,
			"content_block": map[string]any{"type": "text", "text": ""}})
		for _, c := range chunks(turn.Text, 16) {
			e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": index,
				"delta": map[string]any{"type": "text_delta", "text": c}})
		}
		e.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
		index++
	}
	if turn.Tool != nil {
		e.event("content_block_start", map[string]any{"type": "content_block_start", "index": index,
			"content_block": map[string]any{"type": "tool_use", "id": toolID, "name": turn.Tool.Name, "input": map[string]any{}}})
		for _, c := range chunks(inputJSON(turn.Tool), 24) {
			e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": index,
				"delta": map[string]any{"type": "input_json_delta", "partial_json": c}})
		}
		e.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
	}
	e.event("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": usage["output_tokens"]}})
	e.event("message_stop", map[string]any{"type": "message_stop"})
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
