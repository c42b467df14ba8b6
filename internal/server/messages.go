package server

import (
	"context"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"pam/internal/wire"
)

// Messages (docs/api.md#messages): a text delivered into a live agent's
// input and submitted, decided here with the frames keys use — the screen
// reading says whether the agent is busy, the pane whether what was sent
// landed.

// messageReady bounds how long a message waits for a busy agent.
const messageReady = 10 * time.Second

// messageSettle is how long a message's text stands still on the screen
// before its Enter: an agent's TUI takes an Enter that closely follows
// fast input as part of a paste and inserts a newline instead of
// submitting (codex does within 120 ms of a burst of characters; seen
// with the real codex when the echo was captured at once).
const messageSettle = 300 * time.Millisecond

// messageEnters is how many times a message's Enter is pressed at most:
// once, and again twice when the screen did not change after it.
const messageEnters = 3

// messageTiming is how long each step of a delivery waits: for the agent
// to be ready, for the text to show (echo), for the screen to stand still
// after it (settle), for the screen to change after an Enter (confirm),
// looking every poll.
type messageTiming struct {
	ready, echo, settle, confirm, poll time.Duration
}

// messageLine is what deliverMessage needs of a run: whether the agent
// is busy (the latest screen reading), the pane as last captured,
// sending keys to it, and noting input as the Enter goes in.
type messageLine struct {
	working func() bool
	pane    func() wire.Pane
	send    func([]wire.Key) error
	input   func()
}

// deliverMessage waits until the agent is not working (at most
// t.ready), types text, waits to see it echoed and the screen stand
// still for t.settle (at most t.echo more), presses Enter and
// confirms that the pane changed after it, pressing Enter again at most
// twice when it did not: confirmed when that change was seen. An error
// is one of line.send's (the host went away).
func deliverMessage(ctx context.Context, line messageLine, text string, t messageTiming) (confirmed bool, err error) {
	wait := func(d time.Duration, done func() bool) bool {
		deadline := time.Now().Add(d)
		for {
			if done() {
				return true
			}
			if ctx.Err() != nil || !time.Now().Before(deadline) {
				return false
			}
			select {
			case <-ctx.Done():
			case <-time.After(t.poll):
			}
		}
	}
	// A busy agent (Claude's "esc to interrupt") would take the text as
	// a queued message or lose it; after t.ready it is typed anyway.
	wait(t.ready, func() bool { return !line.working() })

	before := line.pane().Seq
	for _, keys := range messageKeys(text) {
		if err := line.send(keys); err != nil {
			return false, err
		}
	}
	// The echo: the pane changed, or shows the text's start. A long
	// paste may show as a placeholder ("[Pasted text #1]"), so a change
	// is enough.
	start := messageStart(text)
	wait(t.echo, func() bool {
		p := line.pane()
		return p.Seq > before || strings.Contains(p.Capture, start)
	})
	// The settle: no change for t.settle, so that the Enter is not taken
	// as part of the text's keys.
	last, since := line.pane().Seq, time.Now()
	wait(t.settle+t.echo, func() bool {
		if seq := line.pane().Seq; seq != last {
			last, since = seq, time.Now()
		}
		return time.Since(since) >= t.settle
	})
	line.input()
	for range messageEnters {
		before = line.pane().Seq
		if err := line.send([]wire.Key{{Key: "Enter"}}); err != nil {
			return false, err
		}
		if wait(t.confirm, func() bool { return line.pane().Seq > before }) {
			return true, nil
		}
		if ctx.Err() != nil {
			return false, nil
		}
	}
	return false, nil
}

// messageKeys are the send_keys of a message: a single line of what
// keys' text may hold typed, anything else pasted — each request at most
// wire.MaxKeyText bytes, cut between characters.
func messageKeys(text string) [][]wire.Key {
	if len(text) <= wire.MaxKeyText && wire.ValidateKeys([]wire.Key{{Text: text}}) == nil {
		return [][]wire.Key{{{Text: text}}}
	}
	var out [][]wire.Key
	for text != "" {
		n := min(len(text), wire.MaxKeyText)
		for n < len(text) && !utf8.RuneStart(text[n]) {
			n--
		}
		out = append(out, []wire.Key{{Paste: text[:n]}})
		text = text[n:]
	}
	return out
}

// messageStart is the start of a message's first line as a screen shows
// it: a few characters, before any wrap.
func messageStart(text string) string {
	line, _, _ := strings.Cut(text, "\n")
	line = strings.TrimSpace(line)
	if utf8.RuneCountInString(line) > 16 {
		line = string([]rune(line)[:16])
	}
	if line == "" {
		return "\x00" // nothing to look for
	}
	return line
}

// sendMessage is POST /runs/{id}/messages: deliverMessage into a running
// run, input recorded (a message starts a new turn), journaled as
// run.message, and needs_input or idle cleared as an answer (source
// message) when the delivery was confirmed.
func (s *Server) sendMessage(w http.ResponseWriter, r *http.Request) {
	run, err := s.store.GetRun(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var in wire.SendMessage
	if err := decodeJSON(w, r, &in); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := wire.CheckMessageText(in.Text); err != nil {
		s.fail(w, r, err)
		return
	}
	if run.Status != wire.RunRunning || run.HostID == nil {
		s.fail(w, r, wire.Conflict(wire.CodeIllegalTransition, "messages go only to a running run; this one is %s", run.Status).With("status", run.Status))
		return
	}
	if !s.opts.Fleet.Connected(*run.HostID) {
		s.fail(w, r, wire.Errorf(wire.CodeUnavailable, "the run's host is not connected"))
		return
	}
	// actor: who sent it, the request's token.
	delivery, err := s.deliver(r.Context(), run, in.Text, tokenOf(r.Context()).Name, nil)
	if err != nil {
		s.fail(w, r, wire.Errorf(wire.CodeUnavailable, "the run's host is not connected"))
		return
	}
	if r.Context().Err() != nil {
		return
	}
	writeJSON(w, http.StatusAccepted, wire.MessageResult{Delivery: delivery})
}

// deliver is a message's delivery into a running run on a connected
// host, for POST /runs/{id}/messages and for pam itself (continue when
// a limit resets): deliverMessage, input recorded (a message starts a new
// turn), journaled as run.message by actor ("" for none; the payload's
// actor is null then) with extra in the payload, and the attention
// cleared as an answer (source message) when the delivery was confirmed.
// An error is the host's going away; nothing is journaled after ctx ends.
func (s *Server) deliver(ctx context.Context, run wire.Run, text, actor string, extra map[string]any) (delivery string, err error) {
	host := *run.HostID
	defer s.answers.begin(run.ID)()
	line := messageLine{
		working: func() bool {
			sc, ok := s.opts.Fleet.Screen(run.ID)
			return ok && sc.HostID == host && sc.Attempt == run.Attempt && sc.Working
		},
		pane: func() wire.Pane { return s.opts.Fleet.Pane(run.ID) },
		send: func(keys []wire.Key) error {
			return s.opts.Fleet.Send(host, wire.SendKeysFrame{RunID: run.ID, Attempt: wire.IntPtr(run.Attempt), Keys: keys})
		},
		input: func() {
			if err := s.store.TouchInput(ctx, run.ID, run.Attempt); err != nil {
				s.log.Warn("record a message as input", "run_id", run.ID, "err", err)
			}
		},
	}
	confirmed, err := deliverMessage(ctx, line, text, s.messageTiming())
	if err != nil || ctx.Err() != nil {
		return "", err
	}
	delivery = wire.DeliveryUnconfirmed
	if confirmed {
		delivery = wire.DeliveryConfirmed
	}
	if utf8.RuneCountInString(text) > wire.MessageJournalText {
		text = string([]rune(text)[:wire.MessageJournalText])
	}
	payload := map[string]any{"text": text, "delivery": delivery, "actor": nil}
	if actor != "" {
		payload["actor"] = actor
	}
	for k, v := range extra {
		payload[k] = v
	}
	if err := s.store.JournalRunBy(ctx, wire.TopicRunMessage, run.ID, actor, payload); err != nil {
		s.log.Warn("journal a message", "run_id", run.ID, "err", err)
	}
	s.answered(ctx, run, confirmed, wire.AttentionSourceMessage)
	return delivery, nil
}

// messageTiming waits for an echo and for each Enter's change as long
// as a keys request does for its change: two capture intervals.
func (s *Server) messageTiming() messageTiming {
	return messageTiming{ready: messageReady, echo: 2 * s.opts.CaptureInterval, settle: messageSettle,
		confirm: 2 * s.opts.CaptureInterval, poll: panePoll}
}
