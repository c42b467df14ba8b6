package server_test

import (
	"encoding/json"
	"strings"
	"testing"

	"pam/internal/wire"
	"pam/internal/wire/wiretest"
)

// Conversations (docs/architecture.md#resume-and-continue): the agent's
// session id from the hooks, resume on a new attempt, continue.

// workerResuming is worker for a host whose catalog resumes the
// providers named in resumable.
func (e *runEnv) workerResuming(name string, resumable []string, providers ...string) *fakeWorker {
	e.t.Helper()
	var created wire.HostCreated
	e.must(201, "POST", "/api/v1/hosts", map[string]any{"name": name, "max_runs": 4}, &created)
	w := &fakeWorker{t: e.t, e: e, token: created.WorkerToken, hostID: created.Host.ID, name: name, frames: make(chan wiretest.Frame, 1000)}
	code, body := e.callAs(w.token, "POST", "/api/internal/worker/register", wire.Register{HostName: name, Platform: "linux",
		InstanceID: "6f1c1c9e-3b7e-4a53-9d8f-2a5b8c9d0e1f", Providers: providers, Executor: "tmux", MaxRuns: 4, Protocol: 1, Resumable: resumable})
	if code != 200 {
		e.t.Fatalf("register %s: %d %s", name, code, body)
	}
	w.connect()
	return w
}

// hook is what `pam hook` posts: a provider-hook signal, carrying the
// CLI's session id when session is set.
func hook(kind string, attempt int, session string, extra ...any) map[string]any {
	s := sig(kind, attempt, extra...)
	s["source"] = wire.SourceProviderHook
	if session != "" {
		s["payload"] = map[string]any{wire.PayloadAgentSessionID: session}
	}
	return s
}

// startAttempt takes the next dispatch on w, accepts it and posts started.
func (e *runEnv) startAttempt(w *fakeWorker, runID string) wiretest.Frame {
	e.t.Helper()
	d := w.expect(wire.FrameRunDispatch)
	if d.RunID != runID {
		e.t.Fatalf("dispatch of run %s, want %s", d.RunID, runID)
	}
	w.ack(d, true)
	e.waitRun(runID, "spawning", func(r wire.Run) bool { return r.Status == wire.RunSpawning && r.Attempt == *d.Attempt })
	if code, _, body := e.signal(d.SignalToken, runID, sig(wire.SignalStarted, *d.Attempt)); code != 202 {
		e.t.Fatalf("started: %d %s", code, body)
	}
	return d
}

// finish posts the wrapper's finished for the attempt of d.
func (e *runEnv) finish(d wiretest.Frame, code int) {
	e.t.Helper()
	if c, _, body := e.signal(d.SignalToken, d.RunID, sig(wire.SignalFinished, *d.Attempt, "payload", map[string]any{"exit_code": code})); c != 202 {
		e.t.Fatalf("finished: %d %s", c, body)
	}
}

func (e *runEnv) workerRun(w *fakeWorker, runID string) wire.WorkerRun {
	e.t.Helper()
	code, body := e.callAs(w.token, "GET", "/api/internal/worker/runs/"+runID, nil)
	var wr wire.WorkerRun
	if code != 200 || json.Unmarshal(body, &wr) != nil {
		e.t.Fatalf("worker run %s: %d %s", runID, code, body)
	}
	return wr
}

// eventPayload is the payload of the run's last event of topic.
func (e *runEnv) eventPayload(runID string, topic wire.Topic) map[string]any {
	e.t.Helper()
	var l wire.EventList
	e.must(200, "GET", "/api/v1/runs/"+runID+"/events", nil, &l)
	var p map[string]any
	for _, ev := range l.Events {
		if ev.Topic == string(topic) {
			p = map[string]any{}
			_ = json.Unmarshal(ev.Payload, &p)
		}
	}
	return p
}

// The session id a hook reports is recorded and journaled once, again
// when it changes, on both transports, also after the CLI exited; a bad
// one refuses the signal and changes nothing.
func TestAgentSessionFromHooks(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("sess-a", 4, "shell")
	r := e.start(nil)
	d := e.startAttempt(w, r.ID)
	session := func() string {
		if s := e.run(r.ID).AgentSessionID; s != nil {
			return *s
		}
		return ""
	}
	if code, res, body := e.signal(d.SignalToken, r.ID, hook(wire.SignalProgress, 1, "s1", "seq", 1)); code != 202 || res.Result != wire.ResultApplied {
		t.Fatalf("progress with a session: %d %s", code, body)
	}
	if got := session(); got != "s1" || e.countEvents(r.ID, wire.TopicRunAgentSession) != 1 {
		t.Fatalf("session %q, %d run.agent_session", got, e.countEvents(r.ID, wire.TopicRunAgentSession))
	}
	if p := e.eventPayload(r.ID, wire.TopicRunAgentSession); p["agent_session_id"] != "s1" || p["from"] != nil || p["attempt"] != float64(1) {
		t.Errorf("run.agent_session %v", p)
	}
	e.signal(d.SignalToken, r.ID, hook(wire.SignalProgress, 1, "s1", "seq", 2))
	if n := e.countEvents(r.ID, wire.TopicRunAgentSession); n != 1 {
		t.Errorf("the same session again journaled: %d", n)
	}
	// A /clear: a new session, over the uplink this time.
	w.send(wire.SignalFrame{RunID: r.ID, Kind: wire.SignalCompleted, Attempt: wire.IntPtr(1), Source: wire.SourceProviderHook,
		Payload: json.RawMessage(`{"agent_session_id":"s2"}`)})
	if ack := w.expect(wire.FrameSignalAck); ack.Result != wire.ResultApplied {
		t.Fatalf("completed over the uplink: %+v", ack)
	}
	if got := session(); got != "s2" || e.countEvents(r.ID, wire.TopicRunAgentSession) != 2 {
		t.Fatalf("after a new session: %q, %d events", got, e.countEvents(r.ID, wire.TopicRunAgentSession))
	}
	if p := e.eventPayload(r.ID, wire.TopicRunAgentSession); p["agent_session_id"] != "s2" || p["from"] != "s1" {
		t.Errorf("run.agent_session %v", p)
	}
	// Bad ids are refused, on both transports, and change nothing.
	code, _, body := e.signal(d.SignalToken, r.ID, hook(wire.SignalProgress, 1, "--resume", "seq", 3))
	if er := errorOf(t, body); code != 400 || er.Code != wire.CodeValidationFailed || er.Details["field"] != "payload.agent_session_id" {
		t.Errorf("a session id as an option: %d %s", code, body)
	}
	w.send(wire.SignalFrame{RunID: r.ID, Kind: wire.SignalProgress, Attempt: wire.IntPtr(1), Seq: new(int64(4)), Source: wire.SourceProviderHook,
		Payload: json.RawMessage(`{"agent_session_id":"` + strings.Repeat("x", wire.MaxAgentSessionID+1) + `"}`)})
	if ack := w.expect(wire.FrameSignalAck); ack.Code != wire.CodeValidationFailed {
		t.Errorf("a too long session over the uplink: %+v", ack)
	}
	if got := session(); got != "s2" {
		t.Errorf("after bad ids: %q", got)
	}
	// A hook after the CLI exited still says where the conversation is.
	e.finish(d, 0)
	e.signal(d.SignalToken, r.ID, hook(wire.SignalCompleted, 1, "s3"))
	if got := e.run(r.ID); got.Status != wire.RunExited || got.AgentSessionID == nil || *got.AgentSessionID != "s3" {
		t.Errorf("after exit: %s %v", got.Status, got.AgentSessionID)
	}
}

// A new attempt resumes the conversation where it lives — a requeue, a
// retry — with the provider's continue_message (no text); a fresh retry
// forgets it; an attempt on another host starts afresh.
func TestResumeOnANewAttempt(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("resume-a", 4, "shell")
	r := e.start(map[string]any{"max_attempts": 2, "cwd": "/tmp", "prompt": "do it"})
	d := e.startAttempt(w, r.ID)
	if d.AgentSessionID != "" || d.Text != "" {
		t.Fatalf("a first attempt resumes: %+v", d)
	}
	e.signal(d.SignalToken, r.ID, hook(wire.SignalCompleted, 1, "s1"))
	e.finish(d, 1) // requeued
	d = e.startAttempt(w, r.ID)
	if *d.Attempt != 2 || d.AgentSessionID != "s1" || d.Text != "" || d.Prompt != "do it" {
		t.Fatalf("the requeue: attempt %d session %q text %q prompt %q", *d.Attempt, d.AgentSessionID, d.Text, d.Prompt)
	}
	e.finish(d, 1) // failed for good
	e.must(202, "POST", "/api/v1/runs/"+r.ID+"/retry", nil, nil)
	d = e.startAttempt(w, r.ID)
	if *d.Attempt != 3 || d.AgentSessionID != "s1" {
		t.Fatalf("the retry: attempt %d session %q", *d.Attempt, d.AgentSessionID)
	}
	e.finish(d, 1)
	var fresh wire.Run
	e.must(202, "POST", "/api/v1/runs/"+r.ID+"/retry", map[string]any{"fresh": true}, &fresh)
	if fresh.AgentSessionID != nil || fresh.Attempt != 4 {
		t.Fatalf("a fresh retry keeps the session: %+v", fresh)
	}
	if p := e.eventPayload(r.ID, wire.TopicRunRequeued); p["fresh"] != true {
		t.Errorf("run.requeued of a fresh retry: %v", p)
	}
	d = e.startAttempt(w, r.ID)
	if d.AgentSessionID != "" || d.Prompt != "do it" {
		t.Fatalf("the fresh retry resumes: session %q prompt %q", d.AgentSessionID, d.Prompt)
	}
	code, body := e.call("POST", "/api/v1/runs/"+r.ID+"/retry", map[string]any{"fresh": "yes"})
	if code != 400 {
		t.Errorf("retry with fresh a string: %d %s", code, body)
	}

	// Another host has none of the conversation: afresh there.
	r2 := e.start(map[string]any{"cwd": "/tmp"})
	d = e.startAttempt(w, r2.ID)
	e.signal(d.SignalToken, r2.ID, hook(wire.SignalCompleted, 1, "s9"))
	w.ws.CloseNow()
	<-w.gone
	w2 := e.worker("resume-b", 4, "shell")
	e.finish(d, 1)
	d = w2.expect(wire.FrameRunDispatch)
	if d.RunID != r2.ID || d.AgentSessionID != "" {
		t.Errorf("an attempt on another host resumes: %+v", d)
	}
}

// A run with a worktree resumes in it on the host that holds it.
func TestResumeInTheWorktree(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	e.must(200, "PATCH", "/api/v1/projects/runs", map[string]any{"repo": map[string]any{"url": "/srv/app.git"}}, nil)
	w := e.worker("resume-w", 4, "shell")
	r := e.start(nil)
	d := e.startAttempt(w, r.ID)
	ws := wire.Workspace{Path: "/data/worktrees/" + r.ID, Branch: d.Workspace.Branch, BaseCommit: strings.Repeat("ab", 20)}
	w.send(wire.WorkspaceReadyFrame{RunID: r.ID, Attempt: wire.IntPtr(1), Workspace: &ws})
	e.waitRun(r.ID, "workspace", func(r wire.Run) bool { return r.Workspace != nil })
	e.signal(d.SignalToken, r.ID, hook(wire.SignalProgress, 1, "s1", "seq", 1))
	e.finish(d, 1)
	d = w.expect(wire.FrameRunDispatch)
	if d.AgentSessionID != "s1" || d.Workspace == nil || *d.Workspace != ws {
		t.Fatalf("the requeue in the worktree: session %q workspace %+v", d.AgentSessionID, d.Workspace)
	}
}

// POST /runs/{id}/continue: refused for an unknown run, a live one, one
// continued already, or one whose conversation cannot be resumed; else a
// new pending run of the same task, pinned to the old run's host, in its
// worktree (the old run no longer names it), resuming its session with
// the text as the message; the old run journals run.continued; a
// continuation can be continued, and is where the worktree stays.
func TestContinue(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	e.must(200, "PATCH", "/api/v1/projects/runs", map[string]any{"repo": map[string]any{"url": "/srv/app.git"}}, nil)
	w := e.workerResuming("cont-a", []string{"fake"}, "fake", "shell")
	for _, id := range []string{"0a0a0a0a-1111-4111-8111-111111111111", "nope"} {
		if code, body := e.call("POST", "/api/v1/runs/"+id+"/continue", nil); code != 404 {
			t.Errorf("continue of %s: %d %s", id, code, body)
		}
	}

	r := e.start(map[string]any{"provider": "fake", "prompt": "write the code"})
	code, body := e.call("POST", "/api/v1/runs/"+r.ID+"/continue", nil)
	if er := errorOf(t, body); code != 409 || er.Code != wire.CodeIllegalTransition {
		t.Errorf("continue of a pending run: %d %s", code, body)
	}
	d := e.startAttempt(w, r.ID)
	ws := wire.Workspace{Path: "/data/worktrees/" + r.ID, Branch: d.Workspace.Branch, BaseCommit: strings.Repeat("ab", 20)}
	w.send(wire.WorkspaceReadyFrame{RunID: r.ID, Attempt: wire.IntPtr(1), Workspace: &ws})
	e.waitRun(r.ID, "workspace", func(r wire.Run) bool { return r.Workspace != nil })
	code, body = e.call("POST", "/api/v1/runs/"+r.ID+"/continue", nil)
	if er := errorOf(t, body); code != 409 || er.Code != wire.CodeIllegalTransition {
		t.Errorf("continue of a running run: %d %s", code, body)
	}
	code, body = e.call("POST", "/api/v1/runs/"+r.ID+"/continue", map[string]any{"text": "x"})
	if er := errorOf(t, body); code != 409 || er.Code != wire.CodeIllegalTransition {
		t.Errorf("continue of a running run with a text: %d %s", code, body)
	}
	e.signal(d.SignalToken, r.ID, hook(wire.SignalCompleted, 1, "s1"))
	e.finish(d, 0)

	for _, bad := range []map[string]any{{"text": ""}, {"text": strings.Repeat("é", wire.MaxContinueText+1)}, {"text": "a\u0000b"},
		{"provider": "Fake"}, {"colour": "red"}} {
		if code, body := e.call("POST", "/api/v1/runs/"+r.ID+"/continue", bad); code != 400 || errorOf(t, body).Code != wire.CodeValidationFailed {
			t.Errorf("continue with %v: %d %s", bad, code, body)
		}
	}
	code, body = e.call("POST", "/api/v1/runs/"+r.ID+"/continue", map[string]any{"provider": "shell"})
	if er := errorOf(t, body); code != 409 || er.Code != wire.CodeNotResumable {
		t.Errorf("continue with a provider that cannot resume on the host: %d %s", code, body)
	}

	var c wire.Run
	e.must(202, "POST", "/api/v1/runs/"+r.ID+"/continue", map[string]any{"text": "now the docs"}, &c)
	if c.Status != wire.RunPending || c.ContinuesRunID == nil || *c.ContinuesRunID != r.ID || c.TaskID != r.TaskID || c.Provider != "fake" ||
		c.TargetHostID == nil || *c.TargetHostID != w.hostID || c.AgentSessionID == nil || *c.AgentSessionID != "s1" ||
		c.Prompt != "now the docs" || c.Attempt != 1 || c.Workspace == nil || *c.Workspace != ws || c.ID == r.ID {
		t.Fatalf("continuation %+v", c)
	}
	old := e.run(r.ID)
	if old.Workspace != nil || old.Status != wire.RunExited {
		t.Errorf("the old run after the continue: %s, workspace %+v", old.Status, old.Workspace)
	}
	if p := e.eventPayload(r.ID, wire.TopicRunContinued); p["run_id"] != c.ID {
		t.Errorf("run.continued %v", p)
	}
	if p := e.eventPayload(c.ID, wire.TopicRunCreated); p["continues_run_id"] != r.ID || p["target_host_id"] != w.hostID {
		t.Errorf("run.created of the continuation %v", p)
	}
	if wr := e.workerRun(w, r.ID); wr.ContinuedBy == nil || *wr.ContinuedBy != c.ID {
		t.Errorf("the worker is not told who takes the worktree: %+v", wr.ContinuedBy)
	}
	code, body = e.call("POST", "/api/v1/runs/"+r.ID+"/continue", nil)
	if er := errorOf(t, body); code != 409 || er.Code != wire.CodeIllegalTransition || er.Details["continued_by"] != c.ID {
		t.Errorf("continue of a run continued already: %d %s", code, body)
	}
	code, body = e.call("DELETE", "/api/v1/runs/"+r.ID+"/workspace", nil)
	if code != 404 || errorOf(t, body).Code != wire.CodeNoWorkspace {
		t.Errorf("removing the old run's worktree, now the continuation's: %d %s", code, body)
	}

	// The continuation resumes in the old run's worktree with the text;
	// after an attempt of it started, a requeue resumes with the
	// provider's continue_message.
	d = e.startAttempt(w, c.ID)
	if d.AgentSessionID != "s1" || d.Text != "now the docs" || d.Prompt != "now the docs" || d.Workspace == nil || *d.Workspace != ws {
		t.Fatalf("the continuation's dispatch: session %q text %q workspace %+v", d.AgentSessionID, d.Text, d.Workspace)
	}
	e.finish(d, 1)
	d = e.startAttempt(w, c.ID)
	if *d.Attempt != 2 || d.AgentSessionID != "s1" || d.Text != "" {
		t.Fatalf("the continuation's requeue: attempt %d session %q text %q", *d.Attempt, d.AgentSessionID, d.Text)
	}
	e.finish(d, 0)
	if wr := e.workerRun(w, r.ID); wr.ContinuedBy != nil {
		t.Errorf("an ended continuation still takes the worktree: %v", *wr.ContinuedBy)
	}

	// A continuation is continued in turn, in the same worktree.
	var c2 wire.Run
	e.must(202, "POST", "/api/v1/runs/"+c.ID+"/continue", nil, &c2)
	if c2.ContinuesRunID == nil || *c2.ContinuesRunID != c.ID || c2.Prompt != "" || c2.Workspace == nil || *c2.Workspace != ws {
		t.Fatalf("the second continuation %+v", c2)
	}
	d = e.startAttempt(w, c2.ID)
	if d.AgentSessionID != "s1" || d.Text != "" || d.Workspace == nil || d.Workspace.Path != ws.Path {
		t.Errorf("the second continuation's dispatch: %+v", d)
	}
	e.finish(d, 0)

	// Nothing to resume: no session reported, or a provider without
	// resume_args on the host.
	plain := e.start(map[string]any{"provider": "fake"})
	d = e.startAttempt(w, plain.ID)
	e.finish(d, 0)
	code, body = e.call("POST", "/api/v1/runs/"+plain.ID+"/continue", nil)
	if er := errorOf(t, body); code != 409 || er.Code != wire.CodeNotResumable {
		t.Errorf("continue without a session: %d %s", code, body)
	}
	sh := e.start(nil)
	d = e.startAttempt(w, sh.ID)
	e.signal(d.SignalToken, sh.ID, hook(wire.SignalCompleted, 1, "s5"))
	e.finish(d, 0)
	code, body = e.call("POST", "/api/v1/runs/"+sh.ID+"/continue", nil)
	if er := errorOf(t, body); code != 409 || er.Code != wire.CodeNotResumable {
		t.Errorf("continue of a provider that cannot resume: %d %s", code, body)
	}

	// A failed run that was continued is not retried: continue the newest.
	f := e.start(map[string]any{"provider": "fake", "max_attempts": 1})
	d = e.startAttempt(w, f.ID)
	e.signal(d.SignalToken, f.ID, hook(wire.SignalCompleted, 1, "s7"))
	e.finish(d, 2)
	code, body = e.call("POST", "/api/v1/runs/"+f.ID+"/continue", nil)
	if er := errorOf(t, body); code != 409 || er.Code != wire.CodeNotResumable {
		t.Errorf("continue of a run whose worktree was never made: %d %s", code, body)
	}
	e.must(200, "PATCH", "/api/v1/projects/runs", map[string]any{"repo": nil}, nil)
	f = e.start(map[string]any{"provider": "fake", "max_attempts": 1})
	d = e.startAttempt(w, f.ID)
	e.signal(d.SignalToken, f.ID, hook(wire.SignalCompleted, 1, "s7"))
	e.finish(d, 2)
	var fc wire.Run
	e.must(202, "POST", "/api/v1/runs/"+f.ID+"/continue", nil, &fc)
	code, body = e.call("POST", "/api/v1/runs/"+f.ID+"/retry", nil)
	if er := errorOf(t, body); code != 409 || er.Code != wire.CodeIllegalTransition || er.Details["continued_by"] != fc.ID {
		t.Errorf("retry of a continued run: %d %s", code, body)
	}
}

// A run requeued and then stopped before a host took it again has no
// host, yet its conversation is where its last attempt ran: continue
// pins the new run there.
func TestContinueAfterARequeue(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.workerResuming("cont-r", []string{"fake"}, "fake")
	r := e.start(map[string]any{"provider": "fake", "cwd": "/tmp"})
	d := e.startAttempt(w, r.ID)
	e.signal(d.SignalToken, r.ID, hook(wire.SignalCompleted, 1, "s1"))
	w.ws.CloseNow()
	<-w.gone
	e.finish(d, 1)
	e.waitRun(r.ID, "requeued", func(r wire.Run) bool { return r.Status == wire.RunPending && r.Attempt == 2 && r.HostID == nil })
	e.must(202, "POST", "/api/v1/runs/"+r.ID+"/stop", nil, nil)
	if got := e.run(r.ID); got.HostID != nil || got.Status != wire.RunStopped {
		t.Fatalf("the stopped run: %s on %v", got.Status, got.HostID)
	}
	var c wire.Run
	e.must(202, "POST", "/api/v1/runs/"+r.ID+"/continue", nil, &c)
	if c.TargetHostID == nil || *c.TargetHostID != w.hostID || c.Cwd != "/tmp" {
		t.Errorf("the continuation is pinned to %v in %q", c.TargetHostID, c.Cwd)
	}
	w.connect()
	if d := w.expect(wire.FrameRunDispatch); d.RunID != c.ID || d.AgentSessionID != "s1" {
		t.Errorf("the continuation's dispatch: run %s session %q", d.RunID, d.AgentSessionID)
	}
}
