package fakemodel

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// OpenAI is a fake of the OpenAI Responses API as codex uses it (a
// model provider whose base_url is URL()+"/v1" and whose wire_api is
// "responses"): POST /v1/responses, streamed. A request that offers
// tools is the agent's conversation and takes the next scripted turn; a
// tool call is a function_call item. GET /v1/models lists one model.
// Anything else is 404 with the API's error body.
type OpenAI struct{ *server }

// NewOpenAI starts an OpenAI fake on 127.0.0.1; Close stops it.
func NewOpenAI() *OpenAI { return &OpenAI{newServer("openai", openaiAgent, serveOpenAI)} }

// openaiAgent: the agent's requests offer tools; codex's title requests
// do not.
func openaiAgent(r *http.Request, body []byte) bool {
	if r.Method != http.MethodPost || !strings.HasSuffix(strings.TrimSuffix(r.URL.Path, "/"), "/responses") {
		return false
	}
	var req openaiRequest
	return json.Unmarshal(body, &req) == nil && len(req.Tools) > 0
}

// OpenAIModel is the model the fake says it is.
const OpenAIModel = "gpt-fake"

type openaiRequest struct {
	Model  string            `json:"model"`
	Stream bool              `json:"stream"`
	Tools  []json.RawMessage `json:"tools"`
}

func serveOpenAI(s *server, w http.ResponseWriter, r *http.Request, body []byte, agent bool) {
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case r.Method == http.MethodGet && strings.HasSuffix(path, "/models"):
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{
			map[string]any{"id": OpenAIModel, "object": "model", "created": 0, "owned_by": "fake"}}, "models": []any{}})
		return
	case r.Method == http.MethodPost && strings.HasSuffix(path, "/responses"):
	default:
		openaiError(w, &APIError{Status: http.StatusNotFound, Type: "invalid_request_error", Message: "Unknown request URL: " + r.Method + " " + r.URL.Path})
		return
	}
	var req openaiRequest
	if err := json.Unmarshal(body, &req); err != nil {
		openaiError(w, &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: err.Error()})
		return
	}
	turn := Text(DefaultText)
	if agent {
		turn = s.next()
	}
	if turn.Error != nil {
		openaiError(w, turn.Error)
		return
	}
	model := req.Model
	if model == "" {
		model = OpenAIModel
	}
	respID := s.id("resp_")
	created := time.Now().Unix()
	resp := func(status string, output []any) map[string]any {
		m := map[string]any{"id": respID, "object": "response", "created_at": created, "status": status, "model": model, "output": output}
		if status == "completed" {
			m["usage"] = map[string]any{"input_tokens": len(body)/4 + 1, "input_tokens_details": map[string]any{"cached_tokens": 0},
				"output_tokens": len(turn.Text)/4 + 1, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
				"total_tokens": len(body)/4 + len(turn.Text)/4 + 2}
		}
		return m
	}
	var output []any
	msgID := s.id("msg_")
	text := map[string]any{"id": msgID, "type": "message", "status": "completed", "role": "assistant",
		"content": []any{map[string]any{"type": "output_text", "text": turn.Text, "annotations": []any{}}}}
	var call map[string]any
	if turn.Tool != nil {
		callID := turn.Tool.ID
		if callID == "" {
			callID = s.id("call_")
		}
		call = map[string]any{"id": s.id("fc_"), "type": "function_call", "status": "completed", "call_id": callID,
			"name": turn.Tool.Name, "arguments": inputJSON(turn.Tool)}
		if turn.Tool.Namespace != "" {
			call["namespace"] = turn.Tool.Namespace
		}
	}
	if !req.Stream {
		if turn.Text != "" || call == nil {
			output = append(output, text)
		}
		if call != nil {
			output = append(output, call)
		}
		writeJSON(w, http.StatusOK, resp("completed", output))
		return
	}
	e := startSSE(w)
	seq := 0
	ev := func(typ string, m map[string]any) {
		m["type"] = typ
		m["sequence_number"] = seq
		seq++
		e.event(typ, m)
	}
	ev("response.created", map[string]any{"response": resp("in_progress", []any{})})
	ev("response.in_progress", map[string]any{"response": resp("in_progress", []any{})})
	pause(r, turn.Delay)
	index := 0
	if turn.Text != "" || call == nil {
		ev("response.output_item.added", map[string]any{"output_index": index, "item": map[string]any{
			"id": msgID, "type": "message", "status": "in_progress", "role": "assistant", "content": []any{}}})
		ev("response.content_part.added", map[string]any{"item_id": msgID, "output_index": index, "content_index": 0,
			"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
		for _, c := range chunks(turn.Text, 16) {
			ev("response.output_text.delta", map[string]any{"item_id": msgID, "output_index": index, "content_index": 0, "delta": c})
		}
		ev("response.output_text.done", map[string]any{"item_id": msgID, "output_index": index, "content_index": 0, "text": turn.Text})
		ev("response.content_part.done", map[string]any{"item_id": msgID, "output_index": index, "content_index": 0,
			"part": map[string]any{"type": "output_text", "text": turn.Text, "annotations": []any{}}})
		ev("response.output_item.done", map[string]any{"output_index": index, "item": text})
		output = append(output, text)
		index++
	}
	if call != nil {
		added := map[string]any{}
		for k, v := range call {
			added[k] = v
		}
		added["status"], added["arguments"] = "in_progress", ""
		ev("response.output_item.added", map[string]any{"output_index": index, "item": added})
		args := call["arguments"].(string)
		for _, c := range chunks(args, 24) {
			ev("response.function_call_arguments.delta", map[string]any{"item_id": call["id"], "output_index": index, "delta": c})
		}
		ev("response.function_call_arguments.done", map[string]any{"item_id": call["id"], "output_index": index, "arguments": args})
		ev("response.output_item.done", map[string]any{"output_index": index, "item": call})
		output = append(output, call)
	}
	ev("response.completed", map[string]any{"response": resp("completed", output)})
}

// openaiError writes the OpenAI API's error body.
func openaiError(w http.ResponseWriter, e *APIError) {
	for k, vs := range e.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	obj := map[string]any{"type": e.Type, "code": e.Type, "message": e.Message, "param": nil}
	for k, v := range e.Fields {
		obj[k] = v
	}
	writeJSON(w, e.Status, map[string]any{"error": obj})
}

// OpenAIUsageLimit is the turn of a usage limit as the OpenAI API
// reports it to codex: 429 with the error type usage_limit_reached and
// the time it resets (resets_at, Unix seconds).
func OpenAIUsageLimit(resetsAt time.Time) Turn {
	return Turn{Error: &APIError{Status: http.StatusTooManyRequests, Type: "usage_limit_reached",
		Message: "The usage limit has been reached", Fields: map[string]any{"resets_at": resetsAt.Unix(), "plan_type": "plus"}}}
}
