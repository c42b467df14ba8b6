package server_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"pam/internal/wire"
)

// postMessage posts text to a run's messages in the background; the
// returned function waits for the answer.
func (e *runEnv) postMessage(runID, text string) func() (int, []byte) {
	type answer struct {
		code int
		body []byte
	}
	done := make(chan answer, 1)
	go func() {
		code, body := e.call("POST", "/api/v1/runs/"+runID+"/messages", map[string]any{"text": text})
		done <- answer{code, body}
	}()
	return func() (int, []byte) { a := <-done; return a.code, a.body }
}

// expectKeys waits for w's next send_keys to runID and returns its keys
// as "key:…", "text:…" or "paste:…".
func (w *fakeWorker) expectKeys(runID string) []string {
	w.t.Helper()
	f := w.expect(wire.FrameSendKeys)
	if f.RunID != runID {
		w.t.Fatalf("send_keys to %s, want %s", f.RunID, runID)
	}
	var out []string
	for _, k := range f.Keys {
		switch {
		case k.Key != "":
			out = append(out, "key:"+k.Key)
		case k.Text != "":
			out = append(out, "text:"+k.Text)
		default:
			out = append(out, "paste:"+k.Paste)
		}
	}
	return out
}

// runMessages are the payloads of a run's run.message events.
func (e *runEnv) runMessages(runID string) []map[string]any {
	return e.payloads(runID, wire.TopicRunMessage)
}

// A message (docs/api.md#messages) to a run that asks a question: typed,
// echoed, its Enter swallowed and pressed again, the screen changes:
// confirmed, the question cleared as answered (source message), journaled
// as run.message. One with several lines or a shell character is pasted.
// To a busy agent it goes only once the screen reads it ready; a screen
// that never changes is unconfirmed after three Enters and leaves the
// question.
func TestMessageDelivered(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("host-a", 4, "shell")
	r, d := e.attendedRun(w)
	w.snapshot(d, "> \n")
	hook := sig(wire.SignalNeedsInput, 1)
	hook["source"] = wire.SourceProviderHook
	if code, _, out := e.signal(d.SignalToken, r.ID, hook); code != 202 {
		t.Fatalf("needs_input: %d %s", code, out)
	}
	e.waitAttention(r.ID, wire.AttentionNeedsInput)

	wait := e.postMessage(r.ID, "fix the test")
	if k := w.expectKeys(r.ID); !slices.Equal(k, []string{"text:fix the test"}) {
		t.Fatalf("typed %q", k)
	}
	w.snapshot(d, "> fix the test\n")
	if k := w.expectKeys(r.ID); !slices.Equal(k, []string{"key:Enter"}) {
		t.Fatalf("then %q", k)
	}
	// Swallowed: the screen stays; Enter comes again.
	if k := w.expectKeys(r.ID); !slices.Equal(k, []string{"key:Enter"}) {
		t.Fatalf("then %q", k)
	}
	w.snapshot(d, "> fix the test\n● Working…\n")
	code, body := wait()
	var res wire.MessageResult
	if code != 202 || json.Unmarshal(body, &res) != nil || res.Delivery != wire.DeliveryConfirmed {
		t.Fatalf("message: %d %s", code, body)
	}
	if got := e.run(r.ID); got.Attention != wire.AttentionNone {
		t.Fatalf("attention %q after a confirmed message", got.Attention)
	}
	if log := e.attentionLog(r.ID); !slices.Equal(log, []string{"none>needs_input/provider-hook", "needs_input>none/message"}) {
		t.Fatalf("run.attention %q", log)
	}
	msgs := e.runMessages(r.ID)
	if len(msgs) != 1 || msgs[0]["text"] != "fix the test" || msgs[0]["delivery"] != wire.DeliveryConfirmed || msgs[0]["actor"] != wire.AdminTokenName {
		t.Fatalf("run.message %v", msgs)
	}
	if _, ok := msgs[0]["actor"]; !ok {
		t.Fatalf("run.message without actor: %v", msgs[0])
	}

	// Busy: nothing is typed while the screen reads working.
	w.send(wire.ScreenFrame{RunID: r.ID, Attempt: wire.IntPtr(r.Attempt), Attention: wire.AttentionNone, Working: true})
	w.barrier()
	long := "line one $HOME\n" + strings.Repeat("x", 1500)
	wait = e.postMessage(r.ID, long)
	select {
	case f := <-w.frames:
		if f.Type != wire.FrameHeartbeatAck {
			t.Fatalf("%s frame while the agent is busy: %+v", f.Type, f)
		}
	case <-time.After(500 * time.Millisecond): // five capture intervals
	}
	w.send(wire.ScreenFrame{RunID: r.ID, Attempt: wire.IntPtr(r.Attempt), Attention: wire.AttentionNone})
	if k := w.expectKeys(r.ID); !slices.Equal(k, []string{"paste:" + long}) {
		t.Fatalf("pasted %.40q", k)
	}
	w.snapshot(d, "> [Pasted text #1 +1 lines]\n")
	w.expectKeys(r.ID)
	w.snapshot(d, "● Working…\n")
	if code, body := wait(); code != 202 || !strings.Contains(string(body), `"confirmed"`) {
		t.Fatalf("message: %d %s", code, body)
	}
	if msgs := e.runMessages(r.ID); len(msgs) != 2 || len([]rune(msgs[1]["text"].(string))) != wire.MessageJournalText {
		t.Fatalf("run.message of a long text: %v", msgs)
	}

	// Never changes: the Enter and two more, unconfirmed, the question stays.
	if code, _, out := e.signal(d.SignalToken, r.ID, hook); code != 202 {
		t.Fatalf("needs_input: %d %s", code, out)
	}
	e.waitAttention(r.ID, wire.AttentionNeedsInput)
	wait = e.postMessage(r.ID, "yes")
	var sent []string
	for range 4 {
		sent = append(sent, w.expectKeys(r.ID)...)
	}
	if !slices.Equal(sent, []string{"text:yes", "key:Enter", "key:Enter", "key:Enter"}) {
		t.Fatalf("sent %q", sent)
	}
	if code, body := wait(); code != 202 || !strings.Contains(string(body), `"unconfirmed"`) {
		t.Fatalf("message: %d %s", code, body)
	}
	if got := e.run(r.ID); got.Attention != wire.AttentionNeedsInput {
		t.Fatalf("attention %q after an unconfirmed message", got.Attention)
	}
	if msgs := e.runMessages(r.ID); len(msgs) != 3 || msgs[2]["delivery"] != wire.DeliveryUnconfirmed {
		t.Fatalf("run.message %v", msgs)
	}
}

// A message is refused before anything is sent: bad text (validation_failed
// naming text), a run that is not running (illegal_transition).
func TestMessageRefused(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("host-a", 4, "shell")
	r, _ := e.attendedRun(w)
	for _, text := range []string{"", "a\x1b[2J", "tab\there", "a\rb", strings.Repeat("é", wire.MaxMessageText+1)} {
		code, body := e.call("POST", "/api/v1/runs/"+r.ID+"/messages", map[string]any{"text": text})
		var env wire.Envelope
		_ = json.Unmarshal(body, &env)
		if code != 400 || env.Error == nil || env.Error.Code != wire.CodeValidationFailed || env.Error.Details["field"] != "text" {
			t.Fatalf("text %.20q: %d %s", text, code, body)
		}
	}
	pending := e.start(nil)
	code, body := e.call("POST", "/api/v1/runs/"+pending.ID+"/messages", map[string]any{"text": "hi"})
	if code != 409 || !strings.Contains(string(body), wire.CodeIllegalTransition) {
		t.Fatalf("message to a pending run: %d %s", code, body)
	}
}
