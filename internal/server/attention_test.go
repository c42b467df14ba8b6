package server_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"pam/internal/eventually"
	"pam/internal/runs"
	"pam/internal/wire"
	"pam/internal/wire/wiretest"
)

// attendedRun starts a run on w and brings it to running (accepted, then
// started over HTTP with its signal token); it returns the run and its
// dispatch.
func (e *runEnv) attendedRun(w *fakeWorker) (wire.Run, wiretest.Frame) {
	e.t.Helper()
	r := e.start(nil)
	d := w.expect(wire.FrameRunDispatch)
	w.ack(d, true)
	e.waitRun(r.ID, "spawning", func(r wire.Run) bool { return r.Status == wire.RunSpawning })
	if code, res, body := e.signal(d.SignalToken, r.ID, sig(wire.SignalStarted, 1)); code != 202 || res.Result != wire.ResultApplied {
		e.t.Fatalf("started: %d %s", code, body)
	}
	return e.run(r.ID), d
}

// attentionLog is the run's run.attention events as "from>attention/source".
func (e *runEnv) attentionLog(runID string) []string {
	e.t.Helper()
	var out []string
	for _, p := range e.payloads(runID, wire.TopicRunAttention) {
		s := fmt.Sprintf("%v>%v/%v", p["from"], p["attention"], p["source"])
		if st, ok := p["status"]; ok {
			s += "/" + fmt.Sprint(st)
		}
		out = append(out, s)
	}
	return out
}

// payloads are the payloads of the run's events of topic, in order.
func (e *runEnv) payloads(runID string, topic wire.Topic) []map[string]any {
	e.t.Helper()
	var l wire.EventList
	e.must(200, "GET", "/api/v1/runs/"+runID+"/events", nil, &l)
	var out []map[string]any
	for _, ev := range l.Events {
		if ev.Topic != string(topic) {
			continue
		}
		var p map[string]any
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// waitAttention waits until the run's attention is want.
func (e *runEnv) waitAttention(runID, want string) wire.Run {
	e.t.Helper()
	return e.waitRun(runID, "attention "+want, func(r wire.Run) bool { return r.Attention == want })
}

func (w *fakeWorker) snapshot(d wiretest.Frame, capture string) {
	now := time.Now()
	w.send(wire.SnapshotFrame{RunID: d.RunID, Attempt: d.Attempt, Capture: capture, Timestamp: &now})
}

// answerKeys posts {"key":"1"} to a run of w's and, once w has the
// send_keys, makes the pane show capture ("" for no change); it returns
// the answer.
func (e *runEnv) answerKeys(w *fakeWorker, d wiretest.Frame, runID, capture string) wire.KeysResult {
	e.t.Helper()
	type answer struct {
		code int
		body []byte
	}
	done := make(chan answer, 1)
	go func() {
		code, body := e.call("POST", "/api/v1/runs/"+runID+"/keys", map[string]any{"keys": []map[string]any{{"key": "1"}}})
		done <- answer{code, body}
	}()
	if f := w.expect(wire.FrameSendKeys); f.RunID != runID || len(f.Keys) != 1 || f.Keys[0].Key != "1" {
		e.t.Fatalf("send_keys %+v", f)
	}
	if capture != "" {
		w.snapshot(d, capture)
	}
	a := <-done
	var kr wire.KeysResult
	if a.code != 202 || json.Unmarshal(a.body, &kr) != nil {
		e.t.Fatalf("keys: %d %s", a.code, a.body)
	}
	return kr
}

func (w *fakeWorker) idle(d wiretest.Frame) {
	w.send(wire.RunStateFrame{RunID: d.RunID, Attempt: d.Attempt, State: wire.StateIdle, Detail: "pane unchanged for 30s"})
}

// The orchestrator's side of attention (docs/architecture.md#attention) with a simulated
// worker: run_state idle makes a running run idle; the first snapshot the
// server caches is no evidence of change, a later different one clears it
// (source pane); a needs_input signal (the hook's, over HTTP with the
// run's signal token) outranks idle, which then changes nothing; keys
// that the pane shows clear it (source keys), and input through attach
// clears idle (source attach). Every change is journaled once, with its
// source.
func TestAttentionFromWorkerAndCleared(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("host-a", 4, "shell")
	r, d := e.attendedRun(w)
	if r.Attention != wire.AttentionNone || r.AttentionSince != nil {
		t.Fatalf("a new running run: attention %q since %v", r.Attention, r.AttentionSince)
	}

	w.snapshot(d, "$ ")
	w.idle(d)
	got := e.waitAttention(r.ID, wire.AttentionIdle)
	if got.AttentionSince == nil || time.Since(*got.AttentionSince) > time.Minute {
		t.Fatalf("idle since %v", got.AttentionSince)
	}
	// The same screen again, and the first screen a restarted server
	// would cache, change nothing; a new screen clears it.
	w.snapshot(d, "$ ")
	w.idle(d)
	e.waitPasses(2)
	if got := e.run(r.ID); got.Attention != wire.AttentionIdle {
		t.Fatalf("attention %q after an unchanged screen", got.Attention)
	}
	w.snapshot(d, "$ make\n")
	if got := e.waitAttention(r.ID, wire.AttentionNone); got.AttentionSince != nil {
		t.Fatalf("cleared, but since %v", got.AttentionSince)
	}

	w.idle(d)
	e.waitAttention(r.ID, wire.AttentionIdle)
	body := sig(wire.SignalNeedsInput, 1)
	body["source"] = wire.SourceProviderHook
	for range 2 { // the second changes nothing and journals nothing
		if code, res, out := e.signal(d.SignalToken, r.ID, body); code != 202 || res.Result != wire.ResultApplied {
			t.Fatalf("needs_input: %d %s", code, out)
		}
	}
	if got := e.run(r.ID); got.Attention != wire.AttentionNeedsInput {
		t.Fatalf("attention %q after needs_input", got.Attention)
	}
	w.idle(d) // says less than needs_input: nothing
	e.waitPasses(2)
	if got := e.run(r.ID); got.Attention != wire.AttentionNeedsInput {
		t.Fatalf("attention %q after idle over needs_input", got.Attention)
	}

	if kr := e.answerKeys(w, d, r.ID, "$ y\n"); kr.Delivery != wire.DeliveryObserved {
		t.Fatalf("keys answered %+v", kr)
	}
	if got := e.run(r.ID); got.Attention != wire.AttentionNone {
		t.Fatalf("attention %q after keys", got.Attention)
	}
	// Input through attach clears it too.
	w.idle(d)
	e.waitAttention(r.ID, wire.AttentionIdle)
	c := e.dialAttach(r.ID)
	if f, err := readTerm(t, c, eventually.Short); err != nil || f.Type != wire.WSLeaseAcquired {
		t.Fatalf("first attach frame %+v %v", f, err)
	}
	w.expect(wire.FrameAttachOpen)
	b, _ := json.Marshal(wire.TermFrame{Type: wire.WSInput, Bytes: []byte("y\r")})
	if err := c.Write(t.Context(), websocket.MessageText, b); err != nil {
		t.Fatal(err)
	}
	e.waitAttention(r.ID, wire.AttentionNone)
	c.Close(websocket.StatusNormalClosure, "")

	want := []string{"none>idle/pane", "idle>none/pane", "none>idle/pane", "idle>needs_input/provider-hook", "needs_input>none/keys",
		"none>idle/pane", "idle>none/attach"}
	if log := e.attentionLog(r.ID); !slices.Equal(log, want) {
		t.Fatalf("run.attention events %q, want %q", log, want)
	}
}

// Attention changes only on a live run and is cleared, journaled with
// source status, by whatever takes the run out of running: a finished
// signal, a stop, a worker's report (before the requeue it leads to).
// A needs_input for a run that is not running yet is ignored.
func TestAttentionClearedWhenRunLeavesRunning(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("host-a", 4, "shell")
	hook := sig(wire.SignalNeedsInput, 1)
	hook["source"] = wire.SourceProviderHook

	// Not running yet: ignored, nothing written.
	early := e.start(nil)
	ed := w.expect(wire.FrameRunDispatch)
	w.ack(ed, true)
	e.waitRun(early.ID, "spawning", func(r wire.Run) bool { return r.Status == wire.RunSpawning })
	if code, res, out := e.signal(ed.SignalToken, early.ID, hook); code != 200 || res.Result != wire.ResultIgnored {
		t.Fatalf("needs_input while spawning: %d %s", code, out)
	}
	if got := e.run(early.ID); got.Attention != wire.AttentionNone || len(e.attentionLog(early.ID)) != 0 {
		t.Fatalf("spawning run got attention %q, events %q", got.Attention, e.attentionLog(early.ID))
	}

	// finished (exit 0) while it waits for input.
	a, ad := e.attendedRun(w)
	if code, _, out := e.signal(ad.SignalToken, a.ID, hook); code != 202 {
		t.Fatalf("needs_input: %d %s", code, out)
	}
	e.waitAttention(a.ID, wire.AttentionNeedsInput)
	if code, _, out := e.signal(ad.SignalToken, a.ID, sig(wire.SignalFinished, 1, "payload", map[string]any{"exit_code": 0})); code != 202 {
		t.Fatalf("finished: %d %s", code, out)
	}

	// stopped while idle.
	b, bd := e.attendedRun(w)
	w.idle(bd)
	e.waitAttention(b.ID, wire.AttentionIdle)
	e.must(202, "POST", "/api/v1/runs/"+b.ID+"/stop", nil, nil)
	w.expect(wire.FrameRunStop)

	// the session lost while idle: failed, requeued.
	c, cd := e.attendedRun(w)
	w.idle(cd)
	e.waitAttention(c.ID, wire.AttentionIdle)
	w.send(wire.RunStateFrame{RunID: c.ID, Attempt: cd.Attempt, State: wire.StateSessionLost, Detail: "gone"})
	e.waitRun(c.ID, "requeued", func(r wire.Run) bool { return r.Attempt == 2 })

	for _, tc := range []struct {
		id, status, log, topics string
	}{
		{a.ID, wire.RunExited, "none>needs_input/provider-hook needs_input>none/status/exited", "run.finished run.exited run.attention"},
		{b.ID, wire.RunStopped, "none>idle/pane idle>none/status/stopped", "run.stopped run.attention"},
		{c.ID, wire.RunPending, "none>idle/pane idle>none/status/failed", "run.failed run.attention run.requeued"},
	} {
		got := e.run(tc.id)
		if got.Status != tc.status || got.Attention != wire.AttentionNone || got.AttentionSince != nil {
			t.Errorf("run %s: %s, attention %q since %v; want %s, none", tc.id, got.Status, got.Attention, got.AttentionSince, tc.status)
		}
		if log := strings.Join(e.attentionLog(tc.id), " "); log != tc.log {
			t.Errorf("run %s: run.attention %q, want %q", tc.id, log, tc.log)
		}
		if ts := e.topics(tc.id); !strings.Contains(ts, tc.topics) {
			t.Errorf("run %s: events %q, want them to hold %q", tc.id, ts, tc.topics)
		}
	}
	// A report about the run's ended attempt changes nothing now.
	w.idle(cd)
	e.waitPasses(2)
	if got := e.run(c.ID); got.Attention != wire.AttentionNone {
		t.Errorf("requeued run got attention %q from its old attempt", got.Attention)
	}
}

// GET /runs?attention= lists what waits for a person: any (not none),
// or one value; newest first like every run list; a bad value is 400.
func TestRunsListAttentionFilter(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("host-a", 8, "shell")
	asks, ad := e.attendedRun(w)
	quiet, qd := e.attendedRun(w)
	busy, _ := e.attendedRun(w)
	hook := sig(wire.SignalNeedsInput, 1)
	hook["source"] = wire.SourceProviderHook
	if code, _, out := e.signal(ad.SignalToken, asks.ID, hook); code != 202 {
		t.Fatalf("needs_input: %d %s", code, out)
	}
	w.idle(qd)
	e.waitAttention(quiet.ID, wire.AttentionIdle)
	e.waitAttention(asks.ID, wire.AttentionNeedsInput)

	list := func(q string) []string {
		t.Helper()
		var l wire.RunList
		e.must(200, "GET", "/api/v1/runs"+q, nil, &l)
		var ids []string
		for _, r := range l.Runs {
			ids = append(ids, r.ID)
		}
		return ids
	}
	for q, want := range map[string][]string{
		"?attention=any":         {quiet.ID, asks.ID},
		"?attention=needs_input": {asks.ID},
		"?attention=idle":        {quiet.ID},
		"?attention=none":        {busy.ID},
		"?attention=any&limit=1": {quiet.ID},
		"":                       {busy.ID, quiet.ID, asks.ID},
	} {
		if got := list(q); !slices.Equal(got, want) {
			t.Errorf("GET /runs%s: %v, want %v", q, got, want)
		}
	}
	code, out := e.call("GET", "/api/v1/runs?attention=bored", nil)
	if code != 400 || errorOf(t, out).Details["field"] != "attention" {
		t.Fatalf("a bad attention: %d %s", code, out)
	}
}

// TestPaneChangesOffTheReadPath: the database write a pane change makes
// (last_output_at, attention) never holds up the uplink's next frame.
// With the run's row locked by another transaction, a second snapshot
// still reaches the pane cache at once; once the lock goes, the run's
// attention is cleared by that change, source pane, and last_output_at
// has moved.
func TestPaneChangesOffTheReadPath(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("host-lock", 4, "shell")
	r, d := e.attendedRun(w)
	w.snapshot(d, "$ ")
	w.idle(d)
	e.waitAttention(r.ID, wire.AttentionIdle)

	ctx := t.Context()
	tx, err := e.store.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM runs WHERE id = $1 FOR UPDATE`, r.ID); err != nil {
		t.Fatal(err)
	}
	w.snapshot(d, "$ make\n")
	w.snapshot(d, "$ make\nok\n")
	// Read from the cache itself: any GET would wait for the locking
	// transaction (Pam-Event-Seq waits for transactions in flight).
	eventually.Wait(t, eventually.Short, "the second snapshot in the pane cache while the run's row is locked", func() bool {
		return e.fleet.Pane(r.ID).Capture == "$ make\nok\n"
	})
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	e.waitAttention(r.ID, wire.AttentionNone)
	if log := e.attentionLog(r.ID); len(log) == 0 || !strings.HasSuffix(log[len(log)-1], ">none/pane") {
		t.Fatalf("attention log %v, want the last change to none by the pane", log)
	}
	var last time.Time
	if err := e.store.Pool.QueryRow(ctx, `SELECT last_output_at FROM runs WHERE id = $1`, r.ID).Scan(&last); err != nil || time.Since(last) > time.Minute {
		t.Fatalf("last_output_at %v (%v)", last, err)
	}
}

func (w *fakeWorker) screen(d wiretest.Frame, attempt int, attention, text string, choices ...wire.Choice) {
	w.send(wire.ScreenFrame{RunID: d.RunID, Attempt: wire.IntPtr(attempt), Attention: attention, Text: text, Choices: choices})
}

// barrier waits until the server handled every frame sent before it:
// frames are handled in order, and a heartbeat is answered.
func (w *fakeWorker) barrier() {
	w.t.Helper()
	now := time.Now()
	w.send(wire.HeartbeatFrame{HostID: w.hostID, InstanceID: "6f1c1c9e-3b7e-4a53-9d8f-2a5b8c9d0e1f", Timestamp: &now})
	w.expect(wire.FrameHeartbeatAck)
}

// The screen frame (docs/architecture.md#the-screen-is-read): a question
// read on the screen makes the run needs_input with the question and its
// choices (source screen); the same reading again changes nothing; a new
// question replaces the detail and is journaled; a pane change no longer
// clears it, the question leaving the screen does; a usage limit is
// rate_limited with its reset time; a screen that asks nothing leaves
// idle alone. A frame about another attempt changes nothing, and one from
// a host the run was never offered to is refused.
func TestAttentionFromScreen(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("host-a", 4, "shell")
	r, d := e.attendedRun(w)
	yn := []wire.Choice{{Key: "y", Label: "Yes"}, {Key: "n", Label: "No"}}

	w.snapshot(d, "Continue? (y/n) ")
	w.screen(d, 1, wire.AttentionNeedsInput, "Continue? (y/n)", yn...)
	got := e.waitAttention(r.ID, wire.AttentionNeedsInput)
	want := &wire.AttentionDetail{Source: wire.AttentionSourceScreen, Text: "Continue? (y/n)", Choices: yn}
	if !reflect.DeepEqual(got.AttentionDetail, want) || got.AttentionSince == nil {
		t.Fatalf("detail %+v since %v, want %+v", got.AttentionDetail, got.AttentionSince, want)
	}
	since := *got.AttentionSince
	w.screen(d, 1, wire.AttentionNeedsInput, "Continue? (y/n)", yn...) // the same: nothing
	w.screen(d, 2, wire.AttentionNone, "")                             // another attempt: nothing
	w.snapshot(d, "Continue? (y/n) \n")                                // a pane change: not an answer
	w.idle(d)                                                          // says less; and writes the pane change first
	w.barrier()
	if got := e.run(r.ID); got.Attention != wire.AttentionNeedsInput || !reflect.DeepEqual(got.AttentionDetail, want) {
		t.Fatalf("after the same reading, another attempt's and a pane change: %s %+v", got.Attention, got.AttentionDetail)
	}
	w.screen(d, 1, wire.AttentionNeedsInput, "Delete build/? (y/n)", yn...)
	got = e.waitRun(r.ID, "the new question", func(r wire.Run) bool {
		return r.AttentionDetail != nil && r.AttentionDetail.Text == "Delete build/? (y/n)"
	})
	if got.AttentionSince == nil || !got.AttentionSince.Equal(since) {
		t.Fatalf("a new question of the same attention moved attention_since: %v → %v", since, got.AttentionSince)
	}
	w.screen(d, 1, wire.AttentionNone, "")
	if got := e.waitAttention(r.ID, wire.AttentionNone); got.AttentionDetail != nil {
		t.Fatalf("cleared with a detail %+v", got.AttentionDetail)
	}

	resets := time.Date(2026, 12, 2, 15, 0, 0, 0, time.UTC)
	w.send(wire.ScreenFrame{RunID: d.RunID, Attempt: d.Attempt, Attention: wire.AttentionRateLimited, Text: "limit reached ∙ resets 3pm", ResetsAt: &resets})
	got = e.waitAttention(r.ID, wire.AttentionRateLimited)
	if got.AttentionDetail == nil || got.AttentionDetail.ResetsAt == nil || !got.AttentionDetail.ResetsAt.Equal(resets) || len(got.AttentionDetail.Choices) != 0 {
		t.Fatalf("rate_limited detail %+v", got.AttentionDetail)
	}
	w.send(wire.ScreenFrame{RunID: d.RunID, Attempt: d.Attempt, Attention: wire.AttentionNone, Working: true})
	e.waitAttention(r.ID, wire.AttentionNone)

	w.idle(d)
	e.waitAttention(r.ID, wire.AttentionIdle)
	w.screen(d, 1, wire.AttentionNone, "")
	other := e.worker("host-b", 4, "shell")
	other.screen(d, 1, wire.AttentionNeedsInput, "Continue? (y/n)", yn...)
	if f := other.expect(wire.FrameError); f.Code != wire.CodeNotFound || f.RunID != r.ID {
		t.Fatalf("another host's screen: %+v", f)
	}
	w.barrier()
	if got := e.run(r.ID); got.Attention != wire.AttentionIdle {
		t.Fatalf("attention %s after a screen that asks nothing over idle and another host's question", got.Attention)
	}

	wantLog := []string{"none>needs_input/screen", "needs_input>needs_input/screen", "needs_input>none/screen",
		"none>rate_limited/screen", "rate_limited>none/screen", "none>idle/pane"}
	if log := e.attentionLog(r.ID); !slices.Equal(log, wantLog) {
		t.Fatalf("run.attention events %q, want %q", log, wantLog)
	}
}

// A hook's needs_input carries the question the server last read on the
// run's screen for that attempt; read after the hook, the question fills
// in the detail the hook set (keeping its source). Either way the
// question leaving the screen clears it.
func TestHookNeedsInputTakesTheScreensQuestion(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("host-a", 4, "shell")
	hook := sig(wire.SignalNeedsInput, 1)
	hook["source"] = wire.SourceProviderHook
	menu := []wire.Choice{{Key: "1", Label: "Yes"}, {Key: "2", Label: "No"}}

	// The screen first (the worker read a question the hook reports too).
	a, ad := e.attendedRun(w)
	w.screen(ad, 1, wire.AttentionNeedsInput, "Do you want to proceed?\n❯ 1. Yes\n2. No", menu...)
	e.waitAttention(a.ID, wire.AttentionNeedsInput)
	w.screen(ad, 1, wire.AttentionNone, "")
	e.waitAttention(a.ID, wire.AttentionNone)
	w.screen(ad, 1, wire.AttentionNeedsInput, "Do you want to proceed?\n❯ 1. Yes\n2. No", menu...)
	e.waitAttention(a.ID, wire.AttentionNeedsInput)
	if code, _, out := e.signal(ad.SignalToken, a.ID, hook); code != 202 {
		t.Fatalf("needs_input: %d %s", code, out)
	}
	if got := e.run(a.ID); got.AttentionDetail == nil || got.AttentionDetail.Text != "Do you want to proceed?\n❯ 1. Yes\n2. No" || got.AttentionDetail.Source != wire.AttentionSourceScreen {
		t.Fatalf("after the hook: %+v", got.AttentionDetail)
	}

	// The hook first: it says who set it, the screen then says what.
	b, bd := e.attendedRun(w)
	if code, _, out := e.signal(bd.SignalToken, b.ID, hook); code != 202 {
		t.Fatalf("needs_input: %d %s", code, out)
	}
	got := e.waitAttention(b.ID, wire.AttentionNeedsInput)
	if !reflect.DeepEqual(got.AttentionDetail, &wire.AttentionDetail{Source: wire.SourceProviderHook, Choices: []wire.Choice{}}) {
		t.Fatalf("the hook's detail %+v", got.AttentionDetail)
	}
	w.screen(bd, 1, wire.AttentionNeedsInput, "Do you want to proceed?\n❯ 1. Yes\n2. No", menu...)
	got = e.waitRun(b.ID, "the screen's question", func(r wire.Run) bool { return r.AttentionDetail != nil && r.AttentionDetail.Text != "" })
	if got.AttentionDetail.Source != wire.SourceProviderHook || !slices.Equal(got.AttentionDetail.Choices, menu) {
		t.Fatalf("detail %+v", got.AttentionDetail)
	}
	// A hook now, with the question on the screen, adds nothing.
	if code, _, out := e.signal(bd.SignalToken, b.ID, hook); code != 202 {
		t.Fatalf("needs_input: %d %s", code, out)
	}
	w.screen(bd, 1, wire.AttentionNone, "")
	e.waitAttention(b.ID, wire.AttentionNone)
	wantLog := []string{"none>needs_input/provider-hook", "needs_input>needs_input/screen", "needs_input>none/screen"}
	if log := e.attentionLog(b.ID); !slices.Equal(log, wantLog) {
		t.Fatalf("run.attention events %q, want %q", log, wantLog)
	}
}

// A pane change ends idle only: a question (set by a hook or the screen)
// stays while the pane redraws.
func TestPaneChangeLeavesAQuestion(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("host-a", 4, "shell")
	r, d := e.attendedRun(w)
	hook := sig(wire.SignalNeedsInput, 1)
	hook["source"] = wire.SourceProviderHook
	w.snapshot(d, "$ ")
	if code, _, out := e.signal(d.SignalToken, r.ID, hook); code != 202 {
		t.Fatalf("needs_input: %d %s", code, out)
	}
	w.snapshot(d, "Allow? spinner 1")
	w.snapshot(d, "Allow? spinner 2")
	w.idle(d) // its handler writes the pane changes noted before it first
	w.barrier()
	if got := e.run(r.ID); got.Attention != wire.AttentionNeedsInput {
		t.Fatalf("attention %s after pane changes", got.Attention)
	}
}

// An answer clears what waits for a person only once it landed
// (docs/architecture.md#attention): keys the pane does not show
// (unconfirmed) leave needs_input and rate_limited as they are; keys it
// shows (observed) clear them, source keys; input through attach clears
// them only when the pane changed after it, source attach. idle goes
// with any answer. An answer never clears an attention set after it.
func TestAnswerClearsOnlyWhatLanded(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("host-a", 4, "shell")
	r, d := e.attendedRun(w)
	w.snapshot(d, "Do you want to proceed?\n❯ 1. Yes\n  2. No\n")
	// The question's snapshot is in the pane cache before any answer: a
	// snapshot the server took after the keys would be their echo.
	w.barrier()
	hook := sig(wire.SignalNeedsInput, 1)
	hook["source"] = wire.SourceProviderHook
	if code, _, out := e.signal(d.SignalToken, r.ID, hook); code != 202 {
		t.Fatalf("needs_input: %d %s", code, out)
	}
	e.waitAttention(r.ID, wire.AttentionNeedsInput)

	// Not seen to land: still waiting, nothing journaled.
	if kr := e.answerKeys(w, d, r.ID, ""); kr.Delivery != wire.DeliveryUnconfirmed {
		t.Fatalf("keys without a pane change: %+v", kr)
	}
	if got := e.run(r.ID); got.Attention != wire.AttentionNeedsInput {
		t.Fatalf("attention %q after unconfirmed keys; events %q", got.Attention, e.attentionLog(r.ID))
	}
	// Seen: cleared by the keys.
	if kr := e.answerKeys(w, d, r.ID, "● Running…\n"); kr.Delivery != wire.DeliveryObserved {
		t.Fatalf("keys with a pane change: %+v", kr)
	}
	if got := e.run(r.ID); got.Attention != wire.AttentionNone {
		t.Fatalf("attention %q after observed keys", got.Attention)
	}

	// rate_limited (as the screen reports it): the same rule. (Set
	// through the store: first the pane change noted above, as the
	// uplink orders a report after the changes before it.)
	ctx := t.Context()
	e.srv.FlushOutputs(ctx, r.ID)
	if _, _, err := runs.New(e.store).SetAttention(ctx, r.ID, r.Attempt, wire.AttentionRateLimited, wire.AttentionSourceScreen); err != nil {
		t.Fatal(err)
	}
	if kr := e.answerKeys(w, d, r.ID, ""); kr.Delivery != wire.DeliveryUnconfirmed {
		t.Fatalf("keys without a pane change: %+v", kr)
	}
	if got := e.run(r.ID); got.Attention != wire.AttentionRateLimited {
		t.Fatalf("attention %q after unconfirmed keys; events %q", got.Attention, e.attentionLog(r.ID))
	}
	// Through attach: typing the pane does not show leaves it...
	c, _ := e.attached(w, r.ID)
	input := func(b string) {
		t.Helper()
		fr, _ := json.Marshal(wire.TermFrame{Type: wire.WSInput, Bytes: []byte(b)})
		if err := c.Write(ctx, websocket.MessageText, fr); err != nil {
			t.Fatal(err)
		}
		w.expect(wire.FrameAttachInput)
	}
	checked := e.srv.AnswersChecked(r.ID)
	input("x")
	eventually.Wait(t, eventually.Medium, "the attach input's answer checked", func() bool { return e.srv.AnswersChecked(r.ID) > checked })
	if got := e.run(r.ID); got.Attention != wire.AttentionRateLimited {
		t.Fatalf("attention %q after attach input the pane did not show", got.Attention)
	}
	// ...typing it shows clears it (one check a second per client).
	time.Sleep(time.Second)
	input("\r")
	w.snapshot(d, "● Continuing…\n")
	e.waitAttention(r.ID, wire.AttentionNone)
	c.Close(websocket.StatusNormalClosure, "")
	w.expect(wire.FrameAttachClose)

	// idle: keys clear it even unconfirmed (any input ends a quiet spell).
	w.idle(d)
	e.waitAttention(r.ID, wire.AttentionIdle)
	if kr := e.answerKeys(w, d, r.ID, ""); kr.Delivery != wire.DeliveryUnconfirmed {
		t.Fatalf("keys without a pane change: %+v", kr)
	}
	if got := e.run(r.ID); got.Attention != wire.AttentionNone {
		t.Fatalf("attention %q after keys to an idle run", got.Attention)
	}

	want := []string{"none>needs_input/provider-hook", "needs_input>none/keys", "none>rate_limited/screen", "rate_limited>none/attach",
		"none>idle/pane", "idle>none/keys"}
	if log := e.attentionLog(r.ID); !slices.Equal(log, want) {
		t.Fatalf("run.attention events %q, want %q", log, want)
	}
}

// An answer seen to land never clears an attention set after it went in:
// the agent asking its next question while the keys were being checked.
func TestAnswerLeavesTheNextQuestion(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("host-a", 4, "shell")
	r, d := e.attendedRun(w)
	w.snapshot(d, "$ ")
	w.idle(d)
	e.waitAttention(r.ID, wire.AttentionIdle)
	done := make(chan int, 1)
	go func() {
		code, _ := e.call("POST", "/api/v1/runs/"+r.ID+"/keys", map[string]any{"keys": []map[string]any{{"key": "y"}}})
		done <- code
	}()
	w.expect(wire.FrameSendKeys)
	hook := sig(wire.SignalNeedsInput, 1)
	hook["source"] = wire.SourceProviderHook
	if code, _, out := e.signal(d.SignalToken, r.ID, hook); code != 202 {
		t.Fatalf("needs_input: %d %s", code, out)
	}
	w.snapshot(d, "$ y\nAnother question? [y/N]\n")
	if code := <-done; code != 202 {
		t.Fatalf("keys: %d", code)
	}
	if got := e.run(r.ID); got.Attention != wire.AttentionNeedsInput {
		t.Fatalf("the next question's needs_input cleared by the answer before it: %q; events %q", got.Attention, e.attentionLog(r.ID))
	}

	// The next question is often the same attention: an answer to the
	// first, seen to land, leaves the second that came meanwhile.
	yn := []wire.Choice{{Key: "y", Label: "Yes"}, {Key: "n", Label: "No"}}
	w.screen(d, 1, wire.AttentionNeedsInput, "Continue? (y/n)", yn...)
	e.waitRun(r.ID, "the first question", func(r wire.Run) bool {
		return r.AttentionDetail != nil && r.AttentionDetail.Text == "Continue? (y/n)"
	})
	go func() {
		code, _ := e.call("POST", "/api/v1/runs/"+r.ID+"/keys", map[string]any{"keys": []map[string]any{{"key": "y"}}})
		done <- code
	}()
	w.expect(wire.FrameSendKeys)
	// The new question is read before the answer sees the pane change.
	w.screen(d, 1, wire.AttentionNeedsInput, "Overwrite? (y/n)", yn...)
	w.barrier()
	w.snapshot(d, "$ y\nAnother question? [y/N] y\nOverwrite? (y/n)\n")
	if code := <-done; code != 202 {
		t.Fatalf("keys: %d", code)
	}
	if got := e.run(r.ID); got.Attention != wire.AttentionNeedsInput || got.AttentionDetail == nil || got.AttentionDetail.Text != "Overwrite? (y/n)" {
		t.Fatalf("the next question of the same attention cleared by the answer before it: %q %+v; events %q", got.Attention, got.AttentionDetail, e.attentionLog(r.ID))
	}
}

// A CLI that asks as it starts draws its question while the run is still
// spawning, when no attention is taken; the worker sends that screen
// once. When the run's started is applied, the question the screen asked
// is the run's attention (it failed under load before: the question was
// never seen until the screen changed).
func TestQuestionAskedBeforeStarted(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("host-a", 4, "shell")
	r := e.start(nil)
	d := w.expect(wire.FrameRunDispatch)
	w.ack(d, true)
	e.waitRun(r.ID, "spawning", func(r wire.Run) bool { return r.Status == wire.RunSpawning })
	yn := []wire.Choice{{Key: "y", Label: "Yes"}, {Key: "n", Label: "No"}}
	w.screen(d, 1, wire.AttentionNeedsInput, "Continue? (y/n)", yn...)
	w.barrier()
	if got := e.run(r.ID); got.Attention != wire.AttentionNone {
		t.Fatalf("a spawning run took attention %q", got.Attention)
	}
	if code, res, body := e.signal(d.SignalToken, r.ID, sig(wire.SignalStarted, 1)); code != 202 || res.Result != wire.ResultApplied {
		t.Fatalf("started: %d %s", code, body)
	}
	got := e.waitAttention(r.ID, wire.AttentionNeedsInput)
	want := &wire.AttentionDetail{Source: wire.AttentionSourceScreen, Text: "Continue? (y/n)", Choices: yn}
	if !reflect.DeepEqual(got.AttentionDetail, want) {
		t.Fatalf("detail %+v, want %+v", got.AttentionDetail, want)
	}
}
