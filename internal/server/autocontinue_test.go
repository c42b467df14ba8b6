package server_test

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"pam/internal/wire"
	"pam/internal/wire/wiretest"
)

// testClock is a clock the test moves.
type testClock struct {
	mu sync.Mutex
	at time.Time
}

func (c *testClock) now() time.Time   { c.mu.Lock(); defer c.mu.Unlock(); return c.at }
func (c *testClock) set(at time.Time) { c.mu.Lock(); defer c.mu.Unlock(); c.at = at }

// limitedRun brings a run of w's to running, its pane "> ", and then
// rate_limited by the screen with resets.
func (e *runEnv) limitedRun(w *fakeWorker, resets time.Time) (wire.Run, wiretest.Frame) {
	e.t.Helper()
	r, d := e.attendedRun(w)
	w.snapshot(d, "> \n")
	w.send(wire.ScreenFrame{RunID: d.RunID, Attempt: d.Attempt, Attention: wire.AttentionRateLimited, Text: "limit reached ∙ resets 3pm", ResetsAt: &resets})
	return e.waitAttention(r.ID, wire.AttentionRateLimited), d
}

// Continue when a limit resets (docs/architecture.md#continue-when-a-limit-resets):
// a run rate_limited until resets_at is left alone before it; once the
// clock passes it, the provider's continue message is typed and
// submitted like a message, journaled run.message by actor pam, and the
// limit cleared as answered. The same limit read again is not continued
// twice; a later one is.
func TestContinueWhenALimitResets(t *testing.T) {
	t.Parallel()
	clock := &testClock{at: time.Now()}
	e := newRunEnv(t, runOpts{clock: clock.now})
	w := e.worker("host-a", 4, "shell")
	resets := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	r, d := e.limitedRun(w, resets)

	if n := e.srv.ContinueLimited(t.Context()); n != 0 {
		t.Fatalf("continued %d before the limit reset", n)
	}

	clock.set(resets.Add(time.Second))
	sent := make(chan int, 1)
	go func() { sent <- e.srv.ContinueLimited(t.Context()) }()
	if k := w.expectKeys(r.ID); !slices.Equal(k, []string{"text:continue"}) {
		t.Fatalf("typed %q", k)
	}
	w.snapshot(d, "> continue\n")
	if k := w.expectKeys(r.ID); !slices.Equal(k, []string{"key:Enter"}) {
		t.Fatalf("then %q", k)
	}
	w.snapshot(d, "> continue\n● Working…\n")
	if n := <-sent; n != 1 {
		t.Fatalf("continued %d runs, want 1", n)
	}
	if got := e.run(r.ID); got.Attention != wire.AttentionNone {
		t.Fatalf("attention %q after the continue", got.Attention)
	}
	msgs := e.runMessages(r.ID)
	if len(msgs) != 1 || msgs[0]["text"] != "continue" || msgs[0]["actor"] != "pam" || msgs[0]["delivery"] != wire.DeliveryConfirmed ||
		msgs[0]["resets_at"] != resets.Format(time.RFC3339Nano) {
		t.Fatalf("run.message %v", msgs)
	}
	var l wire.EventList
	e.must(200, "GET", "/api/v1/runs/"+r.ID+"/events", nil, &l)
	for _, ev := range l.Events {
		if ev.Topic == string(wire.TopicRunMessage) && (ev.Actor == nil || *ev.Actor != "pam") {
			t.Fatalf("run.message actor %v, want pam", ev.Actor)
		}
	}

	// The same limit on the screen again: continued once already.
	w.send(wire.ScreenFrame{RunID: d.RunID, Attempt: d.Attempt, Attention: wire.AttentionRateLimited, Text: "limit reached ∙ resets 3pm", ResetsAt: &resets})
	e.waitAttention(r.ID, wire.AttentionRateLimited)
	if n := e.srv.ContinueLimited(t.Context()); n != 0 {
		t.Fatalf("continued %d times more for the same reset", n)
	}

	// A later limit is continued when it resets.
	later := resets.Add(5 * time.Hour)
	w.send(wire.ScreenFrame{RunID: d.RunID, Attempt: d.Attempt, Attention: wire.AttentionRateLimited, Text: "limit reached ∙ resets 8pm", ResetsAt: &later})
	e.waitRun(r.ID, "the later limit", func(r wire.Run) bool {
		return r.AttentionDetail != nil && r.AttentionDetail.ResetsAt != nil && r.AttentionDetail.ResetsAt.Equal(later)
	})
	clock.set(later.Add(time.Minute))
	go func() { sent <- e.srv.ContinueLimited(t.Context()) }()
	if k := w.expectKeys(r.ID); !slices.Equal(k, []string{"text:continue"}) {
		t.Fatalf("typed %q after the later limit", k)
	}
	w.snapshot(d, "> continue\n● Working…\n> continue\n")
	if k := w.expectKeys(r.ID); !slices.Equal(k, []string{"key:Enter"}) {
		t.Fatalf("then %q", k)
	}
	w.snapshot(d, "> continue\n● Working…\n> continue\n● Working…\n")
	if n := <-sent; n != 1 {
		t.Fatalf("continued %d runs after the later limit, want 1", n)
	}
	if msgs := e.runMessages(r.ID); len(msgs) != 2 {
		t.Fatalf("run.message %v", msgs)
	}
}

// A project with auto_continue false: a limit that reset is left for a
// person.
func TestNoContinueWithoutAutoContinue(t *testing.T) {
	t.Parallel()
	clock := &testClock{at: time.Now()}
	e := newRunEnv(t, runOpts{clock: clock.now})
	var p wire.Project
	e.must(200, "PATCH", "/api/v1/projects/"+e.task.ProjectID, map[string]any{"auto_continue": false}, &p)
	if p.AutoContinue {
		t.Fatalf("patched %+v", p)
	}
	w := e.worker("host-a", 4, "shell")
	resets := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	r, _ := e.limitedRun(w, resets)
	clock.set(resets.Add(time.Hour))
	if n := e.srv.ContinueLimited(t.Context()); n != 0 {
		t.Fatalf("continued %d runs of a project without auto_continue", n)
	}
	if got := e.run(r.ID); got.Attention != wire.AttentionRateLimited {
		t.Fatalf("attention %q", got.Attention)
	}
	if msgs := e.runMessages(r.ID); len(msgs) != 0 {
		t.Fatalf("run.message %v", msgs)
	}
}

// The continue message is the one of the catalog of the run's host, as
// its worker reported it at registration (a host that says nothing
// gets the built-in's, TestContinueWhenALimitResets); a limit's menu
// still open on the screen is closed with Escape before it is typed, or
// the menu would take the message's keys and its Enter as a choice.
func TestContinueWithTheHostsMessage(t *testing.T) {
	t.Parallel()
	clock := &testClock{at: time.Now()}
	e := newRunEnv(t, runOpts{clock: clock.now})
	var created wire.HostCreated
	e.must(201, "POST", "/api/v1/hosts", map[string]any{"name": "host-a", "max_runs": 4}, &created)
	w := &fakeWorker{t: t, e: e, token: created.WorkerToken, hostID: created.Host.ID, name: "host-a", frames: make(chan wiretest.Frame, 1000)}
	reg := wire.Register{HostName: "host-a", Platform: "linux", InstanceID: instanceA, Providers: []string{"shell"}, Executor: "tmux",
		MaxRuns: 4, Protocol: 1, ContinueMessages: map[string]string{"shell": "CONTINUE-OF-HOST-A go on"}}
	for _, bad := range []map[string]string{{"shell": ""}, {"Bad Name": "x"}, {"shell": "a\x00b"}, {"shell": strings.Repeat("x", 4097)}} {
		r := reg
		r.ContinueMessages = bad
		if code, body := e.callAs(w.token, "POST", "/api/internal/worker/register", r); code != 400 || !strings.Contains(string(body), "continue_messages") {
			t.Errorf("register with continue_messages %.40q: %d %s", bad, code, body)
		}
	}
	if code, body := e.callAs(w.token, "POST", "/api/internal/worker/register", reg); code != 200 {
		t.Fatalf("register: %d %s", code, body)
	}
	w.connect()
	r, d := e.attendedRun(w)
	w.snapshot(d, "limit reached, resets 3pm\nWhat do you want to do?\n❯ 1. Stop and wait\n  2. Upgrade\n")
	resets := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	w.send(wire.ScreenFrame{RunID: d.RunID, Attempt: d.Attempt, Attention: wire.AttentionRateLimited,
		Text: "limit reached, resets 3pm", ResetsAt: &resets,
		Choices: []wire.Choice{{Key: "1", Label: "Stop and wait"}, {Key: "2", Label: "Upgrade"}}})
	e.waitAttention(r.ID, wire.AttentionRateLimited)

	clock.set(resets.Add(time.Second))
	sent := make(chan int, 1)
	go func() { sent <- e.srv.ContinueLimited(t.Context()) }()
	if k := w.expectKeys(r.ID); !slices.Equal(k, []string{"key:Escape"}) {
		t.Fatalf("first %q, want the menu closed", k)
	}
	w.snapshot(d, "limit reached, resets 3pm\n> \n")
	if k := w.expectKeys(r.ID); !slices.Equal(k, []string{"text:CONTINUE-OF-HOST-A go on"}) {
		t.Fatalf("typed %q", k)
	}
	w.snapshot(d, "limit reached, resets 3pm\n> CONTINUE-OF-HOST-A go on\n")
	if k := w.expectKeys(r.ID); !slices.Equal(k, []string{"key:Enter"}) {
		t.Fatalf("then %q", k)
	}
	w.snapshot(d, "limit reached, resets 3pm\n> CONTINUE-OF-HOST-A go on\n● Working…\n")
	if n := <-sent; n != 1 {
		t.Fatalf("continued %d runs, want 1", n)
	}
	if msgs := e.runMessages(r.ID); len(msgs) != 1 || msgs[0]["text"] != "CONTINUE-OF-HOST-A go on" || msgs[0]["actor"] != "pam" {
		t.Fatalf("run.message %v", msgs)
	}
}
