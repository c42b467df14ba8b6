// Package fakemodel is the model side of pam's real-agent tests
// (docs/agents.md): HTTP servers on 127.0.0.1 that speak enough of the
// Anthropic Messages API, the OpenAI Responses API and the Gemini API,
// streaming, for the real claude, codex and gemini CLIs to hold a
// conversation with them. Each server answers the agent's turns from a
// script the test gives it (text, a tool call, an API error such as a
// usage limit) and records every request it got, so a test can see that
// the CLI reached its model and what the CLI sent back (a tool's result).
//
// Requests that are not the agent's conversation (a CLI's title or
// quota probes, its start-up calls) are recorded too but never take a
// scripted turn: each server knows which of its requests carry the
// agent's tools.
package fakemodel

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Turn is one scripted answer to the agent's conversation: the model
// says Text, then (when Tool is set) calls a tool; or, when Error is set,
// the API refuses the request instead.
type Turn struct {
	// Text is what the model says; it may be empty when Tool is set.
	Text string
	// Tool is a tool call the model makes after its text.
	Tool *ToolCall
	// Error makes the API answer with an error instead of a turn.
	Error *APIError
	// Delay holds the answer back after its stream has started, so that
	// the CLI shows itself busy for that long.
	Delay time.Duration
}

// ToolCall is a tool the model asks the CLI to run, with its input as a
// JSON object (Claude Code's Bash takes {"command": …}, codex's shell
// {"command": […]}, gemini's run_shell_command {"command": …}).
type ToolCall struct {
	// ID names the call; the CLI sends it back with the tool's result.
	// Empty means one is made up.
	ID    string
	Name  string
	Input map[string]any
	// Namespace, for the OpenAI fake, is the namespace of a tool offered
	// in one (codex offers an MCP server's tools in the namespace
	// mcp__<server>, e.g. mcp__pam with create_work_item).
	Namespace string
}

// APIError is an error answer: the HTTP status, the provider's error
// type and message, and extra headers (a rate limit's reset time).
type APIError struct {
	Status  int
	Type    string
	Message string
	Header  http.Header
	// Fields are added to the error object of the body (a usage
	// limit's reset time, as codex reads it).
	Fields map[string]any
}

// Text is a turn that says s and ends.
func Text(s string) Turn { return Turn{Text: s} }

// Tool is a turn that calls the named tool with input.
func Tool(name string, input map[string]any) Turn {
	return Turn{Tool: &ToolCall{Name: name, Input: input}}
}

// Request is one HTTP request a server got.
type Request struct {
	Method string
	// Path is the URL's path; Query its raw query.
	Path  string
	Query string
	// Header is the request's headers (the CLI's key among them).
	Header http.Header
	// Body is the request's body, as sent.
	Body []byte
	// Agent reports whether the request was the agent's conversation
	// (it took a scripted turn, or the default one).
	Agent bool
	// Status is what the server answered; 0 while it answers.
	Status int
	At     time.Time
}

// Contains reports whether the request's body holds s (a prompt, a tool
// call's id or a tool's output).
func (r Request) Contains(s string) bool { return bytes.Contains(r.Body, []byte(s)) }

// DefaultText is what a server says to the agent when its script is
// empty.
const DefaultText = "Done."

// server is what the three fakes share: the listener, the script and the
// record.
type server struct {
	name string
	srv  *httptest.Server

	mu      sync.Mutex
	turns   []Turn
	reqs    []Request
	changed chan struct{} // closed and replaced on every new request
	nextID  int
}

// maxBody bounds a request body (a CLI sends its whole conversation and
// tool schemas each turn).
const maxBody = 32 << 20

// handler answers one request; agent says whether it belongs to the
// agent's conversation (agentRequest decided that before it is called).
type handler func(s *server, w http.ResponseWriter, r *http.Request, body []byte, agent bool)

func newServer(name string, agentRequest func(r *http.Request, body []byte) bool, h handler) *server {
	s := &server{name: name, changed: make(chan struct{})}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, maxBody))
		agent := agentRequest(r, body)
		// Recorded as it arrives, so a test sees a request whose answer
		// is held back (Turn.Delay); the status is filled in after.
		i := s.record(Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(),
			Body: body, Agent: agent, At: time.Now()})
		rw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h(s, rw, r, body, agent)
		s.mu.Lock()
		s.reqs[i].Status = rw.status
		s.mu.Unlock()
		s.notify()
	}))
	// 127.0.0.1 only: these servers are for loopback tests.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("fakemodel: listen: %v", err))
	}
	s.srv.Listener = l
	s.srv.Start()
	return s
}

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// record appends r and returns its index.
func (s *server) record(r Request) int {
	s.mu.Lock()
	s.reqs = append(s.reqs, r)
	i := len(s.reqs) - 1
	s.mu.Unlock()
	s.notify()
	return i
}

// notify wakes the waiters of Wait.
func (s *server) notify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.changed)
	s.changed = make(chan struct{})
}

// next takes the next scripted turn, or the default one.
func (s *server) next() Turn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.turns) == 0 {
		return Text(DefaultText)
	}
	t := s.turns[0]
	s.turns = s.turns[1:]
	return t
}

// id makes a fresh identifier with a prefix.
func (s *server) id(prefix string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	return fmt.Sprintf("%s%024d", prefix, s.nextID)
}

// URL is the server's base URL, http://127.0.0.1:port.
func (s *server) URL() string { return s.srv.URL }

// Close stops the server.
func (s *server) Close() { s.srv.Close() }

// Script appends turns to what the agent's next requests get.
func (s *server) Script(turns ...Turn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.turns = append(s.turns, turns...)
}

// Pending is how many scripted turns are left.
func (s *server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.turns)
}

// Requests is every request so far, oldest first.
func (s *server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// AgentRequests is the requests of the agent's conversation so far.
func (s *server) AgentRequests() []Request {
	var out []Request
	for _, r := range s.Requests() {
		if r.Agent {
			out = append(out, r)
		}
	}
	return out
}

// Wait blocks until some request satisfies ok, or d passes; it returns
// that request.
func (s *server) Wait(d time.Duration, ok func(Request) bool) (Request, bool) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		for _, r := range s.reqs {
			if ok(r) {
				s.mu.Unlock()
				return r, true
			}
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			return Request{}, false
		}
	}
}

// Describe lists the requests in one line each, for a failing test's
// message.
func (s *server) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s fake model at %s got %d request(s):\n", s.name, s.URL(), len(s.Requests()))
	for _, r := range s.Requests() {
		tag := ""
		if r.Agent {
			tag = " [agent]"
		}
		body := string(r.Body)
		if len(body) > 200 {
			body = body[:200] + "…"
		}
		fmt.Fprintf(&b, "  %s %s?%s → %d%s %s\n", r.Method, r.Path, r.Query, r.Status, tag, body)
	}
	return b.String()
}

// writeJSON answers v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// sse writes server-sent events, flushing each.
type sse struct {
	w http.ResponseWriter
}

func startSSE(w http.ResponseWriter) sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return sse{w: w}
}

// event writes one event; name "" writes a data-only event.
func (e sse) event(name string, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		panic(err) // plain maps always encode
	}
	if name != "" {
		fmt.Fprintf(e.w, "event: %s\n", name)
	}
	fmt.Fprintf(e.w, "data: %s\n\n", b)
	if f, ok := e.w.(http.Flusher); ok {
		f.Flush()
	}
}

// inputJSON is a tool call's input as a JSON text.
func inputJSON(t *ToolCall) string {
	in := t.Input
	if in == nil {
		in = map[string]any{}
	}
	b, err := json.Marshal(in)
	if err != nil {
		panic(fmt.Sprintf("fakemodel: tool input %v: %v", in, err))
	}
	return string(b)
}

// chunks splits s into pieces of about n bytes on rune boundaries, so a
// streamed text arrives in several deltas as a real model's does.
func chunks(s string, n int) []string {
	var out []string
	for len(s) > n {
		i := n
		for i < len(s) && !utf8.RuneStart(s[i]) {
			i++
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

// pause waits d, or until the client goes away.
func pause(r *http.Request, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
	}
}
