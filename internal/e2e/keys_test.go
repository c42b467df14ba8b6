package e2e

import (
	"encoding/json"
	"slices"
	"testing"

	"pam/internal/wire"
)

// keysAnswer posts keys to a run and returns the delivery.
func (s *system) keysAnswer(runID string, keys ...map[string]string) string {
	s.t.Helper()
	var res wire.KeysResult
	s.must(202, "POST", "/api/v1/runs/"+runID+"/keys", map[string]any{"keys": keys}, &res)
	return res.Delivery
}

// A shell run is answered through POST /runs/{id}/keys as a person
// would answer an agent (docs/api.md#keys), on the executor the suite
// runs (PAM_EXECUTOR=pty go test … for the pty one): a line typed and
// Enter reach its read; a digit key, pressed while its hook says it
// needs input, reaches a read of one key and, seen on the screen, clears
// needs_input (source keys) — the next question waits on a gate for that; y goes as a key; a paste of two lines
// (holding ";") reaches two reads, its newline a carriage return as from
// a keyboard. Every answer is observed. Refused entries never reach the
// run, which takes what is allowed after them.
func TestKeysAnswerAShellRun(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.worker("keys-answer")
	g := newGate(t)
	task := s.task()
	key := `stty -icanon min 1; c=$(dd bs=1 count=1 2>/dev/null); stty icanon; echo`
	r := s.startRun(task, `printf 'Your name? '; read name; echo "hello to $name"; `+
		`printf 'Pick 1, 2 or 3: '; `+g.wait("ask")+`; `+hookCall(t, "needs-input")+`; `+key+`; echo "picked $c"; `+
		g.wait("sure")+`; printf 'Sure? [y/N] '; `+key+`; echo "sure: $c"; `+
		`read a; read b; echo "first: $a"; echo "second: $b"; exec cat`)
	s.waitPane(r.ID, "Your name?")
	if d := s.keysAnswer(r.ID, map[string]string{"text": "hello"}, map[string]string{"key": "Enter"}); d != wire.DeliveryObserved {
		t.Errorf("a typed line: delivery %s", d)
	}
	s.waitPane(r.ID, "hello to hello")
	s.waitPane(r.ID, "Pick 1, 2 or 3:")
	g.open(t, "ask")
	s.waitAttention(r.ID, wire.AttentionNeedsInput)
	if d := s.keysAnswer(r.ID, map[string]string{"key": "2"}); d != wire.DeliveryObserved {
		t.Errorf("a digit: delivery %s", d)
	}
	if got := s.getRun(r.ID); got.Attention != wire.AttentionNone {
		t.Errorf("after the digit was seen: attention %q", got.Attention)
	}
	s.waitPane(r.ID, "picked 2")
	// The next question only now: drawn in the capture that shows the
	// digit's echo, it would be read before the digit is seen to land,
	// and the answer (rightly) leaves a question asked after it.
	g.open(t, "sure")
	s.waitPane(r.ID, "Sure? [y/N]")
	if d := s.keysAnswer(r.ID, map[string]string{"key": "y"}); d != wire.DeliveryObserved {
		t.Errorf("y: delivery %s", d)
	}
	s.waitPane(r.ID, "sure: y")
	if d := s.keysAnswer(r.ID, map[string]string{"paste": "first line\nsecond; line"}, map[string]string{"key": "Enter"}); d != wire.DeliveryObserved {
		t.Errorf("a paste of two lines: delivery %s", d)
	}
	s.waitPane(r.ID, "first: first line")
	s.waitPane(r.ID, "second: second; line")
	// [y/N] on the last line is a question the screen reads too; y
	// answers it, cleared by the keys that were seen to land or by the
	// screen that no longer asks, whichever comes first.
	byKeys := []string{"none>needs_input/provider-hook", "needs_input>none/keys", "none>needs_input/screen", "needs_input>none/keys"}
	byScreen := []string{"none>needs_input/provider-hook", "needs_input>none/keys", "none>needs_input/screen", "needs_input>none/screen"}
	if log := s.attentionLog(r.ID); !slices.Equal(log, byKeys) && !slices.Equal(log, byScreen) {
		t.Errorf("run.attention %q, want %q (or the question cleared by the screen)", log, byKeys)
	}
	// What the allowlist refuses never reaches the run.
	for _, bad := range []map[string]string{{"key": "F1"}, {"text": "a; b"}, {"paste": "\x1b[201~"}, {"text": "two\nlines"}} {
		code, body := s.call("POST", "/api/v1/runs/"+r.ID+"/keys", map[string]any{"keys": []map[string]string{{"key": "Enter"}, bad}})
		var env wire.Envelope
		if code != 400 || json.Unmarshal(body, &env) != nil || env.Error == nil || env.Error.Code != wire.CodeKeyNotAllowed || env.Error.Details["index"] != 1.0 {
			t.Errorf("keys %v: %d %s", bad, code, body)
		}
	}
	// ...and the run still takes what is allowed.
	if d := s.keysAnswer(r.ID, map[string]string{"text": "still here"}, map[string]string{"key": "Enter"}); d != wire.DeliveryObserved {
		t.Errorf("keys after the refusals: delivery %s", d)
	}
	s.waitPane(r.ID, "still here\nstill here")
}
