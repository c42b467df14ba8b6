package fakemodel

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// Gemini is a fake of the Gemini API as gemini-cli uses it
// (GOOGLE_GEMINI_BASE_URL): POST /{version}/models/{model}:streamGenerateContent
// (server-sent events with ?alt=sse), :generateContent and :countTokens.
// A request that declares functions is the agent's conversation and
// takes the next scripted turn; a tool call is a functionCall part. The
// CLI's other calls (its routing and summaries) get a short text.
// Anything else is 404 with the API's error body.
type Gemini struct{ *server }

// NewGemini starts a Gemini fake on 127.0.0.1; Close stops it.
func NewGemini() *Gemini { return &Gemini{newServer("gemini", geminiAgent, serveGemini)} }

// geminiAgent: the agent's requests declare functions; gemini-cli's
// router and summary requests do not.
func geminiAgent(r *http.Request, body []byte) bool {
	if r.Method != http.MethodPost || !strings.Contains(r.URL.Path, "/models/") || !strings.Contains(r.URL.Path, "enerateContent") {
		return false
	}
	var req geminiRequest
	if json.Unmarshal(body, &req) != nil {
		return false
	}
	for _, t := range req.Tools {
		if len(t.FunctionDeclarations) > 0 {
			return true
		}
	}
	return false
}

type geminiRequest struct {
	Tools []struct {
		FunctionDeclarations []json.RawMessage `json:"functionDeclarations"`
	} `json:"tools"`
	GenerationConfig struct {
		ResponseMIMEType string `json:"responseMimeType"`
	} `json:"generationConfig"`
}

func serveGemini(s *server, w http.ResponseWriter, r *http.Request, body []byte, agent bool) {
	_, method, _ := strings.Cut(r.URL.Path, ":")
	if r.Method != http.MethodPost || !strings.Contains(r.URL.Path, "/models/") {
		geminiError(w, &APIError{Status: http.StatusNotFound, Type: "NOT_FOUND", Message: "Not found: " + r.URL.Path})
		return
	}
	switch method {
	case "countTokens":
		writeJSON(w, http.StatusOK, map[string]any{"totalTokens": len(body)/4 + 1})
		return
	case "streamGenerateContent", "generateContent":
	default:
		geminiError(w, &APIError{Status: http.StatusNotFound, Type: "NOT_FOUND", Message: "Not found: " + r.URL.Path})
		return
	}
	var req geminiRequest
	if err := json.Unmarshal(body, &req); err != nil {
		geminiError(w, &APIError{Status: http.StatusBadRequest, Type: "INVALID_ARGUMENT", Message: err.Error()})
		return
	}
	turn := Text(DefaultText)
	switch {
	case agent:
		turn = s.next()
	case req.GenerationConfig.ResponseMIMEType == "application/json":
		// The CLI's side questions that want JSON (which model to route
		// to, whether to go on): an answer that parses.
		turn = Text(`{"reasoning": "scripted", "model_choice": "flash", "next_speaker": "user", "complexity_reasoning": "scripted", "complexity_score": 1}`)
	}
	if turn.Error != nil {
		geminiError(w, turn.Error)
		return
	}
	usage := map[string]any{"promptTokenCount": len(body)/4 + 1, "candidatesTokenCount": len(turn.Text)/4 + 1,
		"totalTokenCount": len(body)/4 + len(turn.Text)/4 + 2}
	chunk := func(parts []any, finish bool) map[string]any {
		c := map[string]any{"content": map[string]any{"role": "model", "parts": parts}, "index": 0}
		m := map[string]any{"candidates": []any{c}, "modelVersion": "gemini-fake", "responseId": "resp-fake"}
		if finish {
			c["finishReason"] = "STOP"
			m["usageMetadata"] = usage
		}
		return m
	}
	var call map[string]any
	if turn.Tool != nil {
		fc := map[string]any{"name": turn.Tool.Name, "args": turn.Tool.Input}
		if turn.Tool.ID != "" {
			fc["id"] = turn.Tool.ID
		}
		call = map[string]any{"functionCall": fc}
	}
	if method == "generateContent" {
		var parts []any
		if turn.Text != "" || call == nil {
			parts = append(parts, map[string]any{"text": turn.Text})
		}
		if call != nil {
			parts = append(parts, call)
		}
		writeJSON(w, http.StatusOK, chunk(parts, true))
		return
	}
	e := startSSE(w)
	pause(r, turn.Delay)
	pieces := chunks(turn.Text, 16)
	for i, c := range pieces {
		last := i == len(pieces)-1 && call == nil
		e.event("", chunk([]any{map[string]any{"text": c}}, last))
	}
	if call != nil {
		e.event("", chunk([]any{call}, true))
	} else if len(pieces) == 0 {
		e.event("", chunk([]any{map[string]any{"text": ""}}, true))
	}
}

// geminiError writes the Google API error body.
func geminiError(w http.ResponseWriter, e *APIError) {
	for k, vs := range e.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	obj := map[string]any{"code": e.Status, "message": e.Message, "status": e.Type}
	for k, v := range e.Fields {
		obj[k] = v
	}
	writeJSON(w, e.Status, map[string]any{"error": obj})
}

// GeminiUsageLimit is the turn of a quota error as the Gemini API
// reports it: 429 RESOURCE_EXHAUSTED, with a retry delay.
func GeminiUsageLimit(resetsAt time.Time) Turn {
	delay := max(1, int(time.Until(resetsAt).Seconds()))
	return Turn{Error: &APIError{Status: http.StatusTooManyRequests, Type: "RESOURCE_EXHAUSTED",
		Message: "You exceeded your current quota, please check your plan and billing details.",
		Fields: map[string]any{"details": []any{
			map[string]any{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []any{
				map[string]any{"quotaMetric": "generativelanguage.googleapis.com/generate_content_free_tier_requests",
					"quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier"}}},
			map[string]any{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": itoa(delay) + "s"},
		}}}}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
