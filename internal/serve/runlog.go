package serve

import (
	"encoding/json"
	"log/slog"
	"unicode/utf8"

	"pam/internal/wire"
)

// runLogger logs, at info, one line when a run starts, one when it ends
// (exited, failed or stopped), one when its agent says it completed, and
// one when it starts waiting for a person's input: what someone watching
// serve's (or pam up's) console wants to see, while the requests behind
// them are at debug (docs/operations.md#logs). It reads the journal as it
// is published, so each line comes once per event, whoever caused it.
func runLogger(log *slog.Logger) func(wire.Event) {
	return func(ev wire.Event) {
		var msg string
		switch wire.Topic(ev.Topic) {
		case wire.TopicRunStarted:
			msg = "run started"
		case wire.TopicRunExited, wire.TopicRunFailed, wire.TopicRunStopped:
			msg = "run ended"
		case wire.TopicRunCompleted:
			msg = "run completed: its agent says the task is done"
		case wire.TopicRunAttention:
			msg = "run needs input"
		default:
			return
		}
		var p struct {
			Attempt       *int    `json:"attempt"`
			ExitCode      *int    `json:"exit_code"`
			FailureReason *string `json:"failure_reason"`
			Source        *string `json:"source"`
			Attention     *string `json:"attention"`
			Detail        *string `json:"detail"`
		}
		_ = json.Unmarshal(ev.Payload, &p)
		if ev.Topic == string(wire.TopicRunAttention) && (p.Attention == nil || *p.Attention != "needs_input") {
			return // idle, or a question answered: the dashboard's business
		}
		attrs := []any{}
		if ev.RunID != nil {
			attrs = append(attrs, "run_id", *ev.RunID)
		}
		if p.Attempt != nil {
			attrs = append(attrs, "attempt", *p.Attempt)
		}
		if ev.HostID != nil {
			attrs = append(attrs, "host_id", *ev.HostID)
		}
		if msg == "run ended" {
			attrs = append(attrs, "status", ev.Topic[len("run."):])
		}
		if p.ExitCode != nil {
			attrs = append(attrs, "exit_code", *p.ExitCode)
		}
		if p.FailureReason != nil {
			attrs = append(attrs, "failure_reason", *p.FailureReason)
		}
		if p.Source != nil && msg != "run started" {
			attrs = append(attrs, "source", *p.Source)
		}
		if p.Detail != nil && *p.Detail != "" {
			attrs = append(attrs, "detail", truncate(*p.Detail, 200))
		}
		if ev.Actor != nil {
			attrs = append(attrs, "actor", *ev.Actor)
		}
		log.Info(msg, attrs...)
	}
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
