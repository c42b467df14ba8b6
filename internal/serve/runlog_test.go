package serve

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"pam/internal/wire"
)

// TestRunLogger: of the journal's events, a run's start, end, completion
// and a question for a person each make one info line, with what tells
// the run and the outcome apart; the rest (progress, idle, a question
// answered, everything else) none. The end-to-end check on pam up's
// console is e2e's TestUpQuickstart.
func TestRunLogger(t *testing.T) {
	var buf bytes.Buffer
	observe := runLogger(slog.New(slog.NewTextHandler(&buf, nil)))
	run, host := "0b6f3a52-7c4e-4e55-9a4c-1d2f3e4a5b6c", "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"
	ev := func(topic wire.Topic, payload map[string]any) wire.Event {
		payload["run_id"], payload["attempt"] = run, 2
		b, _ := json.Marshal(payload)
		return wire.Event{Topic: string(topic), RunID: &run, HostID: &host, Payload: b}
	}
	for _, c := range []struct {
		ev   wire.Event
		want string // "" = no line
	}{
		{ev(wire.TopicRunStarted, map[string]any{}), `level=INFO msg="run started" run_id=` + run + ` attempt=2 host_id=` + host},
		{ev(wire.TopicRunProgress, map[string]any{"seq": 3}), ""},
		{ev(wire.TopicRunAttention, map[string]any{"attention": "needs_input", "source": "screen", "detail": "Allow this command?"}), `msg="run needs input" run_id=` + run + ` attempt=2 host_id=` + host + ` source=screen detail="Allow this command?"`},
		{ev(wire.TopicRunAttention, map[string]any{"attention": nil, "source": "keys"}), ""},
		{ev(wire.TopicRunAttention, map[string]any{"attention": "idle", "source": "pane"}), ""},
		{ev(wire.TopicRunCompleted, map[string]any{"source": "hook"}), `msg="run completed: its agent says the task is done"`},
		{ev(wire.TopicRunFinished, map[string]any{"exit_code": 1}), ""},
		{ev(wire.TopicRunFailed, map[string]any{"failure_reason": "cli_hang"}), `msg="run ended" run_id=` + run + ` attempt=2 host_id=` + host + ` status=failed failure_reason=cli_hang`},
		{ev(wire.TopicRunExited, map[string]any{"exit_code": 0}), `status=exited exit_code=0`},
		{ev(wire.TopicRunStopped, map[string]any{"source": "operator"}), `status=stopped source=operator`},
		{wire.Event{Topic: "host.created", Payload: []byte(`{}`)}, ""},
	} {
		buf.Reset()
		observe(c.ev)
		lines := strings.Count(buf.String(), "\n")
		switch {
		case c.want == "" && lines != 0:
			t.Errorf("%s %s: logged %q", c.ev.Topic, c.ev.Payload, buf.String())
		case c.want != "" && (lines != 1 || !strings.Contains(buf.String(), c.want)):
			t.Errorf("%s %s: logged %q, want one line with %q", c.ev.Topic, c.ev.Payload, buf.String(), c.want)
		}
	}
}
