package e2e

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/wire"
)

// attentionLog is the run's run.attention events as
// "from>attention/source" (and "/status" when leaving running).
func (s *system) attentionLog(runID string) []string {
	s.t.Helper()
	var out []string
	for _, ev := range s.events(runID) {
		if ev.Topic != string(wire.TopicRunAttention) {
			continue
		}
		p := eventPayload(ev)
		e := fmt.Sprintf("%v>%v/%v", p["from"], p["attention"], p["source"])
		if st, ok := p["status"]; ok {
			e += "/" + fmt.Sprint(st)
		}
		out = append(out, e)
	}
	return out
}

func (s *system) waitAttention(runID, want string) wire.Run {
	s.t.Helper()
	return s.waitRun(runID, "attention "+want, eventually.Long, func(r wire.Run) bool { return r.Attention == want })
}

// getRun reads a run once.
func (s *system) getRun(runID string) wire.Run {
	s.t.Helper()
	var r wire.Run
	s.must(200, "GET", "/api/v1/runs/"+runID, nil, &r)
	return r
}

func (s *system) keys(runID string, keys ...map[string]any) {
	s.t.Helper()
	s.must(202, "POST", "/api/v1/runs/"+runID+"/keys", map[string]any{"keys": keys}, nil)
}

// An agent that asks for input through its hook (`pam hook needs-input`,
// run by the shell provider's prompt as a provider hook would) makes its
// run needs_input, journaled with source provider-hook; the run is what
// GET /runs?attention=any and `pam run list --attention` show; input
// through keys clears it.
func TestAttentionNeedsInputFromHook(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.worker("attention-hook")
	g := newGate(t)
	task := s.task()
	r := s.runShell(task.ID, "echo ready; "+g.wait("ask")+"; "+hookCall(t, "needs-input")+`; read answer; echo "got $answer"; `+g.wait("end"), nil)
	s.waitRun(r.ID, "running", eventually.Long, func(r wire.Run) bool { return r.Status == wire.RunRunning })
	s.waitPane(r.ID, "ready")
	g.open(t, "ask")
	got := s.waitAttention(r.ID, wire.AttentionNeedsInput)
	if got.AttentionSince == nil {
		t.Fatalf("needs_input without attention_since: %+v", got)
	}

	var waiting wire.RunList
	s.must(200, "GET", "/api/v1/runs?attention=any", nil, &waiting)
	if len(waiting.Runs) != 1 || waiting.Runs[0].ID != r.ID {
		t.Fatalf("GET /runs?attention=any: %+v", waiting.Runs)
	}
	cmd := pamtest.Command(t, "run", "list", "--attention", "--json")
	cmd.Env = append(cmd.Env, "PAM_URL="+s.url, "PAM_TOKEN="+s.token)
	out, err := cmd.Output()
	var listed wire.RunList
	if err != nil || json.Unmarshal(out, &listed) != nil || len(listed.Runs) != 1 || listed.Runs[0].Attention != wire.AttentionNeedsInput {
		t.Fatalf("pam run list --attention --json: %v\n%s", err, out)
	}
	table := pamtest.Command(t, "run", "list", "--attention=needs_input")
	table.Env = append(table.Env, "PAM_URL="+s.url, "PAM_TOKEN="+s.token)
	if out, err := table.Output(); err != nil || !strings.Contains(string(out), r.ID[:8]) || !strings.Contains(string(out), "needs_input") {
		t.Fatalf("pam run list --attention=needs_input: %v\n%s", err, out)
	}

	// The answer, once the screen shows it, clears it (the run goes on
	// until the gate opens: its end would clear it too).
	s.keys(r.ID, map[string]any{"text": "yes"}, map[string]any{"key": "Enter"})
	if got := s.getRun(r.ID); got.Attention != wire.AttentionNone || got.AttentionSince != nil {
		t.Fatalf("after keys: attention %q since %v", got.Attention, got.AttentionSince)
	}
	s.waitPane(r.ID, "got yes")
	g.open(t, "end")
	s.waitRun(r.ID, "exited", eventually.Long, func(r wire.Run) bool { return r.Status == wire.RunExited })
	want := []string{"none>needs_input/provider-hook", "needs_input>none/keys"}
	if log := s.attentionLog(r.ID); !slices.Equal(log, want) {
		t.Fatalf("run.attention %q, want %q; events %v", log, want, s.topics(r.ID))
	}
}

// A running run whose pane stays unchanged for PAM_IDLE_AFTER becomes
// idle (the worker's capture reports it, source pane); a pane change
// clears it (pane), and so do keys (keys) and input through attach
// (attach); a stop clears it with the end of running (status). Every
// change is journaled once, in order, with its source.
func TestAttentionIdleAndCleared(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.worker("attention-idle", "PAM_IDLE_AFTER=1s")
	g := newGate(t)
	task := s.task()
	r := s.runShell(task.ID, "echo ready; "+g.wait("move")+`; echo moved; read line; echo "got $line"; stty -echo; sleep 300`, nil)
	s.waitPane(r.ID, "ready")

	s.waitAttention(r.ID, wire.AttentionIdle) // quiet: idle
	g.open(t, "move")
	s.waitAttention(r.ID, wire.AttentionNone) // "moved": a pane change
	s.waitPane(r.ID, "moved")

	s.waitAttention(r.ID, wire.AttentionIdle)
	s.keys(r.ID, map[string]any{"text": "hello"}, map[string]any{"key": "Enter"})
	if got := s.getRun(r.ID); got.Attention != wire.AttentionNone {
		t.Fatalf("after keys: attention %q", got.Attention)
	}
	s.waitPane(r.ID, "got hello")

	// Attached at the pane's own size, typing what is not echoed: only
	// the input can clear it.
	s.waitAttention(r.ID, wire.AttentionIdle)
	tm := s.attach(r.ID, url.Values{"rows": {"50"}, "cols": {"220"}})
	tm.waitFrame(wire.WSLeaseAcquired, "")
	tm.input("x")
	s.waitAttention(r.ID, wire.AttentionNone)

	s.waitAttention(r.ID, wire.AttentionIdle)
	s.must(202, "POST", "/api/v1/runs/"+r.ID+"/stop", map[string]any{"force": true}, nil)
	if got := s.getRun(r.ID); got.Status != wire.RunStopped || got.Attention != wire.AttentionNone || got.AttentionSince != nil {
		t.Fatalf("after stop: %s, attention %q since %v", got.Status, got.Attention, got.AttentionSince)
	}
	want := []string{
		"none>idle/pane", "idle>none/pane",
		"none>idle/pane", "idle>none/keys",
		"none>idle/pane", "idle>none/attach",
		"none>idle/pane", "idle>none/status/stopped",
	}
	if log := s.attentionLog(r.ID); !slices.Equal(log, want) {
		t.Fatalf("run.attention %q\nwant %q", log, want)
	}
}

// The screen is read (docs/architecture.md#the-screen-is-read): a shell
// run that prints "Continue? (y/n) " and reads a line is needs_input with
// source screen, the question and its choices y and n, within two
// capture intervals of the question; answered through
// keys (y, Enter), the question leaves the screen and the attention is
// none again. A second question that leaves the screen without any input
// (the script moves on) is cleared by the screen itself. Under both
// executors.
func TestAttentionFromScreen(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.worker("attention-screen")
	g := newGate(t)
	task := s.task()
	r := s.runShell(task.ID, `printf 'Continue? (y/n) '; read a; echo "answered $a"; printf 'Overwrite? [y/N] '; `+
		g.wait("move")+`; echo; echo "went on"; sleep 300`, ownCwd(t))
	s.waitRun(r.ID, "running", eventually.Long, func(r wire.Run) bool { return r.Status == wire.RunRunning })
	// The CLI prints its question as it starts, right after the run is
	// running: two capture intervals (200 ms), and a second of slack for
	// a loaded machine.
	running := time.Now()
	got := s.waitAttention(r.ID, wire.AttentionNeedsInput)
	if took := time.Since(running); took > 2*200*time.Millisecond+time.Second {
		t.Errorf("needs_input %s after the run was running, want within two capture intervals", took)
	}
	t.Logf("needs_input %s after the run was running", time.Since(running))
	yn := []wire.Choice{{Key: "y", Label: "Yes"}, {Key: "n", Label: "No"}}
	want := &wire.AttentionDetail{Source: wire.AttentionSourceScreen, Text: "Continue? (y/n)", Choices: yn}
	if got.AttentionDetail == nil || got.AttentionDetail.Source != want.Source || got.AttentionDetail.Text != want.Text ||
		!slices.Equal(got.AttentionDetail.Choices, want.Choices) || got.AttentionDetail.ResetsAt != nil {
		t.Fatalf("attention_detail %+v, want %+v", got.AttentionDetail, want)
	}

	s.keys(r.ID, map[string]any{"text": "y"}, map[string]any{"key": "Enter"})
	s.waitPane(r.ID, "answered y")
	// The answered question leaves the screen: the next one is asked.
	got = s.waitRun(r.ID, "the second question", eventually.Long, func(r wire.Run) bool {
		return r.Attention == wire.AttentionNeedsInput && r.AttentionDetail != nil && r.AttentionDetail.Text == "Overwrite? [y/N]"
	})
	if !slices.Equal(got.AttentionDetail.Choices, yn) {
		t.Fatalf("the second question's choices %+v", got.AttentionDetail.Choices)
	}
	g.open(t, "move")
	s.waitPane(r.ID, "went on")
	if got := s.waitAttention(r.ID, wire.AttentionNone); got.AttentionDetail != nil || got.AttentionSince != nil {
		t.Fatalf("cleared, but detail %+v since %v", got.AttentionDetail, got.AttentionSince)
	}
	log := s.attentionLog(r.ID)
	// The first question's answer clears it by the keys seen to land or
	// by the screen (the question left): whichever comes first.
	first := []string{"none>needs_input/screen", "needs_input>none/screen", "none>needs_input/screen", "needs_input>none/screen"}
	firstByKeys := []string{"none>needs_input/screen", "needs_input>none/keys", "none>needs_input/screen", "needs_input>none/screen"}
	// Or the screen went from the first question to the next in one
	// capture: the question changed, nothing was cleared in between.
	next := []string{"none>needs_input/screen", "needs_input>needs_input/screen", "needs_input>none/screen"}
	if !slices.Equal(log, first) && !slices.Equal(log, firstByKeys) && !slices.Equal(log, next) {
		t.Fatalf("run.attention %q, want %q (or the first cleared by keys, or replaced by the next)", log, first)
	}
}
