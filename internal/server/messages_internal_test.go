package server

import (
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"pam/internal/wire"
)

// fakeLine is a run's input as deliverMessage sees it: busy for the
// first busyFor readings, its pane moving when a send lands (react says
// whether the nth send shows).
type fakeLine struct {
	mu      sync.Mutex
	busyFor int
	react   func(n int, keys []wire.Key) bool
	seq     int64
	capture string
	sent    []string
	inputAt int // sends before input() was called; -1 when it was not
	typedBy []bool
	sentAt  []time.Time
}

func (f *fakeLine) line() messageLine {
	f.inputAt = -1
	return messageLine{
		working: func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.busyFor > 0 {
				f.busyFor--
				return true
			}
			return false
		},
		pane: func() wire.Pane {
			f.mu.Lock()
			defer f.mu.Unlock()
			return wire.Pane{Seq: f.seq, Capture: f.capture}
		},
		send: func(keys []wire.Key) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.typedBy = append(f.typedBy, f.busyFor > 0)
			f.sentAt = append(f.sentAt, time.Now())
			for _, k := range keys {
				f.sent = append(f.sent, fmt.Sprintf("%s%s%s", k.Key, k.Text, k.Paste))
			}
			if f.react(len(f.sent), keys) {
				f.seq++
			}
			return nil
		},
		input: func() { f.inputAt = len(f.sent) },
	}
}

var testTiming = messageTiming{ready: 5 * time.Second, echo: 50 * time.Millisecond, settle: 20 * time.Millisecond,
	confirm: 50 * time.Millisecond, poll: time.Millisecond}

// deliverMessage (docs/api.md#messages): an Enter the agent swallowed
// is pressed again and the delivery confirmed; a busy agent gets the text
// only once it is ready; a screen that never changes is unconfirmed after
// the Enter and two more. Input is recorded as the first Enter goes in.
func TestDeliverMessage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		busyFor   int
		react     func(n int, keys []wire.Key) bool
		confirmed bool
		sent      []string
	}{
		{"enter swallowed", 0, func(n int, _ []wire.Key) bool { return n != 2 }, true, []string{"hello there", "Enter", "Enter"}},
		{"busy agent", 5, func(int, []wire.Key) bool { return true }, true, []string{"hello there", "Enter"}},
		{"screen never changes", 0, func(int, []wire.Key) bool { return false }, false, []string{"hello there", "Enter", "Enter", "Enter"}},
		{"echo not seen", 0, func(n int, _ []wire.Key) bool { return n == 3 }, true, []string{"hello there", "Enter", "Enter"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeLine{busyFor: c.busyFor, react: c.react}
			confirmed, err := deliverMessage(t.Context(), f.line(), "hello there", testTiming)
			if err != nil || confirmed != c.confirmed {
				t.Fatalf("confirmed %v, %v; want %v", confirmed, err, c.confirmed)
			}
			if !slices.Equal(f.sent, c.sent) {
				t.Fatalf("sent %q, want %q", f.sent, c.sent)
			}
			if slices.Contains(f.typedBy, true) {
				t.Fatalf("keys went in while the agent was busy: %v", f.typedBy)
			}
			if f.busyFor != 0 {
				t.Fatalf("%d busy readings left", f.busyFor)
			}
			if f.inputAt != 1 {
				t.Fatalf("input recorded after %d sends, want 1", f.inputAt)
			}
		})
	}
}

// The Enter waits until the echoed text has stood still for
// messageTiming.settle: a screen still changing (the text arriving in
// pieces) moves it later.
func TestDeliverMessageSettles(t *testing.T) {
	t.Parallel()
	f := &fakeLine{react: func(int, []wire.Key) bool { return true }}
	line := f.line()
	pane := line.pane
	moving := time.Now().Add(60 * time.Millisecond)
	// changed is when the pane last changed.
	var changed time.Time
	line.pane = func() wire.Pane { // changes at every look until moving
		if now := time.Now(); now.Before(moving) {
			f.mu.Lock()
			f.seq++
			changed = now
			f.mu.Unlock()
		}
		return pane()
	}
	timing := testTiming
	timing.echo = time.Second
	confirmed, err := deliverMessage(t.Context(), line, "hello there", timing)
	if err != nil || !confirmed || !slices.Equal(f.sent, []string{"hello there", "Enter"}) {
		t.Fatalf("confirmed %v, %v, sent %q", confirmed, err, f.sent)
	}
	if changed.Before(moving.Add(-timing.settle)) || f.sentAt[1].Before(changed.Add(timing.settle)) {
		t.Fatalf("Enter %v after the screen's last change (%v after the text), want %v or more",
			f.sentAt[1].Sub(changed), changed.Sub(f.sentAt[0]), timing.settle)
	}
}

// An agent that stays busy gets the message after messageTiming.ready.
func TestDeliverMessageBusyForever(t *testing.T) {
	t.Parallel()
	f := &fakeLine{busyFor: 1 << 30, react: func(int, []wire.Key) bool { return true }}
	timing := testTiming
	timing.ready = 100 * time.Millisecond
	start := time.Now()
	confirmed, err := deliverMessage(t.Context(), f.line(), "hi", timing)
	if err != nil || !confirmed || !slices.Equal(f.sent, []string{"hi", "Enter"}) {
		t.Fatalf("confirmed %v, %v, sent %q", confirmed, err, f.sent)
	}
	if d := time.Since(start); d < timing.ready {
		t.Fatalf("typed after %v, before the %v a busy agent is waited for", d, timing.ready)
	}
}

// messageKeys types a line keys' text may hold and pastes anything else,
// in requests the worker takes (wire.ValidateKeys).
func TestMessageKeys(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", wire.MaxKeyText) // 2 bytes each
	for _, c := range []struct {
		text string
		want []string // "t:" typed, "p:" pasted, one per request
	}{
		{"fix the test", []string{"t:fix the test"}},
		{"run make && go test", []string{"p:run make && go test"}},
		{"cost in $", []string{"p:cost in $"}},
		{"two\nlines", []string{"p:two\nlines"}},
		{"héllo", []string{"p:héllo"}},
		{long, []string{"p:" + long[:wire.MaxKeyText], "p:" + long[wire.MaxKeyText:]}},
	} {
		var got []string
		for _, keys := range messageKeys(c.text) {
			if err := wire.ValidateKeys(keys); err != nil {
				t.Fatalf("%.20q: %v", c.text, err)
			}
			if len(keys) != 1 {
				t.Fatalf("%.20q: %d entries in a request", c.text, len(keys))
			}
			if keys[0].Text != "" {
				got = append(got, "t:"+keys[0].Text)
			} else {
				got = append(got, "p:"+keys[0].Paste)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%.20q: %.60q, want %.60q", c.text, got, c.want)
		}
	}
}

// The request log never shows an answer URL's token: it is a credential.
func TestLogPathRedactsAnswerTokens(t *testing.T) {
	r := httptest.NewRequest("POST", "/api/v1/answers/00112233445566778899aabbccddeeff", nil)
	if p := logPath(r); strings.Contains(p, "0011") || p != "/api/v1/answers/<redacted>" {
		t.Fatalf("logged path %q", p)
	}
	if p := logPath(httptest.NewRequest("GET", "/api/v1/runs", nil)); p != "/api/v1/runs" {
		t.Fatalf("logged path %q", p)
	}
}
