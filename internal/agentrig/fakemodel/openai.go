package fakemodel

import (
	"encoding/json"
	"maps"
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

// serveOpenAI answers one request to the OpenAI fake: a response takes
// its turn (see turnFor), whole or streamed as the request asks.
func serveOpenAI(s *server, w http.ResponseWriter, r *http.Request, body []byte, agent bool) {
	if answerOpenAIAside(w, r) {
		return
	}
	var req openaiRequest
	if err := json.Unmarshal(body, &req); err != nil {
		openaiError(w, &APIError{Status: http.StatusBadRequest, Type: "invalid_request_error", Message: err.Error()})
		return
	}
	turn := s.turnFor(agent)
	if turn.Error != nil {
		openaiError(w, turn.Error)
		return
	}
	resp := newOpenAIResponse(s, req, turn, body)
	if !req.Stream {
		writeJSON(w, http.StatusOK, resp.object("completed", resp.output()))
		return
	}
	streamTurn(r, turn, &openaiStream{openaiResponse: resp, e: startSSE(w)})
}

// answerOpenAIAside answers every request that is not a response (POST
// …/responses) and reports whether it did: the model list, and 404 for
// anything else.
func answerOpenAIAside(w http.ResponseWriter, r *http.Request) bool {
	path := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case r.Method == http.MethodGet && strings.HasSuffix(path, "/models"):
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{
			map[string]any{"id": OpenAIModel, "object": "model", "created": 0, "owned_by": "fake"}}, "models": []any{}})
	case r.Method == http.MethodPost && strings.HasSuffix(path, "/responses"):
		return false
	default:
		openaiError(w, &APIError{Status: http.StatusNotFound, Type: "invalid_request_error", Message: "Unknown request URL: " + r.Method + " " + r.URL.Path})
	}
	return true
}

// openaiResponse is the Responses API's answer of one turn: its output
// items, finished, which its whole body and its stream both carry.
type openaiResponse struct {
	turn      Turn
	id, model string
	created   int64
	bodyLen   int
	// message is the message item; call the function_call item, nil when
	// the turn calls no tool.
	message, call map[string]any
}

func newOpenAIResponse(s *server, req openaiRequest, turn Turn, body []byte) *openaiResponse {
	o := &openaiResponse{turn: turn, id: s.id("resp_"), model: req.Model, created: time.Now().Unix(), bodyLen: len(body)}
	if o.model == "" {
		o.model = OpenAIModel
	}
	o.message = map[string]any{"id": s.id("msg_"), "type": "message", "status": "completed", "role": "assistant",
		"content": []any{map[string]any{"type": "output_text", "text": turn.Text, "annotations": []any{}}}}
	if turn.Tool != nil {
		callID := turn.Tool.ID
		if callID == "" {
			callID = s.id("call_")
		}
		o.call = map[string]any{"id": s.id("fc_"), "type": "function_call", "status": "completed", "call_id": callID,
			"name": turn.Tool.Name, "arguments": inputJSON(turn.Tool)}
		if turn.Tool.Namespace != "" {
			o.call["namespace"] = turn.Tool.Namespace
		}
	}
	return o
}

// output is the response's output items.
func (o *openaiResponse) output() []any { return o.turn.blocks(o.message, o.call) }

// object is the response object with status and output; a completed one
// carries the usage.
func (o *openaiResponse) object(status string, output []any) map[string]any {
	m := map[string]any{"id": o.id, "object": "response", "created_at": o.created, "status": status, "model": o.model, "output": output}
	if status == "completed" {
		m["usage"] = map[string]any{"input_tokens": o.bodyLen/4 + 1, "input_tokens_details": map[string]any{"cached_tokens": 0},
			"output_tokens": len(o.turn.Text)/4 + 1, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
			"total_tokens": o.bodyLen/4 + len(o.turn.Text)/4 + 2}
	}
	return m
}

// openaiStream streams a response as the Responses API's events, each
// numbered in sequence.
type openaiStream struct {
	*openaiResponse
	e   sse
	seq int
}

// event sends m as an event of type typ, with the next sequence number.
func (o *openaiStream) event(typ string, m map[string]any) {
	m["type"] = typ
	m["sequence_number"] = o.seq
	o.seq++
	o.e.event(typ, m)
}

func (o *openaiStream) opening() {
	o.event("response.created", map[string]any{"response": o.object("in_progress", []any{})})
	o.event("response.in_progress", map[string]any{"response": o.object("in_progress", []any{})})
}

func (o *openaiStream) text(index int, pieces []string) {
	id, text := o.message["id"], o.turn.Text
	o.event("response.output_item.added", map[string]any{"output_index": index, "item": map[string]any{
		"id": id, "type": "message", "status": "in_progress", "role": "assistant", "content": []any{}}})
	o.event("response.content_part.added", map[string]any{"item_id": id, "output_index": index, "content_index": 0,
		"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
	for _, c := range pieces {
		o.event("response.output_text.delta", map[string]any{"item_id": id, "output_index": index, "content_index": 0, "delta": c})
	}
	o.event("response.output_text.done", map[string]any{"item_id": id, "output_index": index, "content_index": 0, "text": text})
	o.event("response.content_part.done", map[string]any{"item_id": id, "output_index": index, "content_index": 0,
		"part": map[string]any{"type": "output_text", "text": text, "annotations": []any{}}})
	o.event("response.output_item.done", map[string]any{"output_index": index, "item": o.message})
}

func (o *openaiStream) toolCall(index int, pieces []string) {
	// The item is announced in progress, with no arguments yet.
	added := maps.Clone(o.call)
	added["status"], added["arguments"] = "in_progress", ""
	o.event("response.output_item.added", map[string]any{"output_index": index, "item": added})
	for _, c := range pieces {
		o.event("response.function_call_arguments.delta", map[string]any{"item_id": o.call["id"], "output_index": index, "delta": c})
	}
	o.event("response.function_call_arguments.done", map[string]any{"item_id": o.call["id"], "output_index": index, "arguments": o.call["arguments"]})
	o.event("response.output_item.done", map[string]any{"output_index": index, "item": o.call})
}

func (o *openaiStream) closing() {
	o.event("response.completed", map[string]any{"response": o.object("completed", o.output())})
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
