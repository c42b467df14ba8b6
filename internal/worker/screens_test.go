package worker

import (
	"slices"
	"testing"
	"time"

	"pam/internal/eventually"
	screenread "pam/internal/screen"
	"pam/internal/wire"
	"pam/internal/wire/wiretest"
)

// runQ's fake pam asks "Continue? (y/n)" and reads a line.
const runQ = "5555aaaa-3333-4333-8333-333333333333"

// The worker reads every changed capture (docs/architecture.md#the-screen-is-read):
// a question on the screen is uplinked once, as a screen frame with its
// text and choices, however many captures see it; a new uplink gets it
// again after the snapshot (the server's memory is complete after its
// restart); once answered (send_keys), the screen that asks nothing is
// uplinked once. Both executors.
func TestScreenQuestionUplinkedOnChange(t *testing.T) {
	for _, executor := range []string{"tmux", "pty"} {
		t.Run(executor, func(t *testing.T) {
			t.Parallel()
			orch := newFakeOrch(t)
			h := newHarnessFor(t, orch, executor)
			h.start()
			_, ackAt := h.spawnRun(runQ, 1)
			isScreen := func(f wiretest.Frame) bool { return f.Type == wire.FrameScreen && f.RunID == runQ }
			q, at := orch.wait(ackAt, "the question", isScreen)
			yn := []wire.Choice{{Key: "y", Label: "Yes"}, {Key: "n", Label: "No"}}
			if q.Attention != wire.AttentionNeedsInput || q.Text != "Continue? (y/n)" || !slices.Equal(q.Choices, yn) || *q.Attempt != 1 || q.Working {
				t.Fatalf("screen frame %+v", q)
			}
			eventually.Wait(t, eventually.Medium, "five heartbeats after the question", func() bool {
				return orch.count(at, isType(wire.FrameHeartbeat, "")) >= 5
			})
			if n := orch.count(ackAt, isScreen); n != 1 {
				t.Fatalf("one question uplinked %d times", n)
			}

			dropAt := orch.mark()
			orch.drop()
			again, ai := orch.wait(dropAt, "the question on the new uplink", isScreen)
			if again.Attention != wire.AttentionNeedsInput || again.Text != q.Text {
				t.Fatalf("resent %+v", again)
			}
			if _, si := orch.wait(dropAt, "the snapshot on the new uplink", isType(wire.FrameSnapshot, runQ)); si > ai {
				t.Fatal("the screen frame came before the snapshot it reads")
			}

			keysAt := orch.mark()
			orch.send(wire.SendKeysFrame{RunID: runQ, Attempt: wire.IntPtr(1), Keys: []wire.Key{{Text: "y"}, {Key: "Enter"}}})
			gone, at := orch.wait(keysAt, "the question gone", isScreen)
			if gone.Attention != wire.AttentionNone || gone.Text != "" || len(gone.Choices) != 0 || gone.Working {
				t.Fatalf("screen frame after the answer %+v", gone)
			}
			eventually.Wait(t, eventually.Medium, "five heartbeats after the answer", func() bool {
				return orch.count(at, isType(wire.FrameHeartbeat, "")) >= 5
			})
			if n := orch.count(keysAt, isScreen); n != 1 {
				t.Fatalf("the answered screen uplinked %d times", n)
			}
			// A screen that asks nothing, already sent, is not resent.
			dropAt = orch.mark()
			orch.drop()
			_, si := orch.wait(dropAt, "the snapshot on the new uplink", isType(wire.FrameSnapshot, runQ))
			orch.wait(si, "a heartbeat after the greeting", isType(wire.FrameHeartbeat, ""))
			if n := orch.count(dropAt, isScreen); n != 0 {
				t.Fatalf("a plain screen resent %d times", n)
			}
		})
	}
}

// runW's fake pam shows a busy agent's status line.
const runW = "6666bbbb-4444-4444-8444-444444444444"

// A screen that shows the agent busy (the provider's working pattern) is
// uplinked as working, and the quiet pane is not reported idle: a busy
// agent waits for nobody.
func TestWorkingScreenNeverIdle(t *testing.T) {
	t.Parallel()
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	h.opts.IdleAfter = 200 * time.Millisecond
	h.opts.Screens = func(provider string) *screenread.Patterns {
		if provider != "shell" {
			t.Errorf("screens of provider %q", provider)
		}
		return screenread.MustCompile(nil, []string{`esc to interrupt`}, nil)
	}
	h.start()
	_, ackAt := h.spawnRun(runW, 1)
	f, at := orch.wait(ackAt, "the working screen", func(f wiretest.Frame) bool { return f.Type == wire.FrameScreen && f.RunID == runW })
	if !f.Working || f.Attention != wire.AttentionNone {
		t.Fatalf("screen frame %+v", f)
	}
	eventually.Wait(t, eventually.Medium, "five heartbeats after the working screen", func() bool {
		return orch.count(at, isType(wire.FrameHeartbeat, "")) >= 5
	})
	if n := orch.count(ackAt, func(f wiretest.Frame) bool { return f.Type == wire.FrameRunState && f.State == wire.StateIdle }); n != 0 {
		t.Fatalf("a busy agent reported idle %d times", n)
	}
}
