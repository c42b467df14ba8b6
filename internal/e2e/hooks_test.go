package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/wire"
)

// fakeClaude finds the --settings flag the wrapper passes and runs its
// hook commands the way Claude Code does (through sh, with a JSON event
// on stdin): PostToolUse, Notification (a permission prompt),
// PostToolUse, then Stop.
const fakeClaude = `#!/bin/sh
while [ $# -gt 0 ]; do [ "$1" = --settings ] && S="$2"; shift; done
P=$(printf %s "$S" | sed -n 's/.*"command":"\([^"]*hook progress\)".*/\1/p')
C=$(printf %s "$S" | sed -n 's/.*"command":"\([^"]*hook completed\)".*/\1/p')
N=$(printf %s "$S" | sed -n 's/.*"command":"\([^"]*hook needs-input\)".*/\1/p')
[ -n "$P" ] && [ -n "$C" ] && [ -n "$N" ] || { echo "no hooks in --settings: $S"; exit 9; }
echo '{"hook_event_name":"PostToolUse"}' | sh -c "$P"
echo '{"hook_event_name":"Notification","message":"Claude needs your permission to use Bash"}' | sh -c "$N"
echo '{"hook_event_name":"PostToolUse"}' | sh -c "$P"
echo '{"hook_event_name":"Stop"}' | sh -c "$C"
echo fake-claude-done
`

// fakeCodex runs its notify program (-c notify=[...]) with the JSON event
// as an extra argument, as codex does: an approval request (the type pam
// assumes such a notify event carries), then the turn's completion.
const fakeCodex = `#!/bin/sh
while [ $# -gt 0 ]; do [ "$1" = -c ] && N="$2"; shift; done
PAMP=$(printf %s "$N" | sed -n 's/^notify=\["\([^"]*\)","hook","completed"\]$/\1/p')
[ -n "$PAMP" ] || { echo "no notify: $N"; exit 9; }
"$PAMP" hook completed '{"type":"approval-requested","call-id":"c1"}' </dev/null
"$PAMP" hook completed '{"type":"agent-turn-complete","turn-id":"1"}' </dev/null
`

// Provider hooks end to end: Claude Code's Stop, PostToolUse and
// Notification hooks through its --settings flag and codex's notify reach
// the run as provider-hook signals (completion, item done, progress in
// order, the request for a person as needs_input attention); the session
// then stays for PAM_HOLD_OPEN with a line saying how the run ended, and
// is cleaned up.
func TestProviderHooks(t *testing.T) {
	t.Parallel()
	s, _ := newFaultSystem(t, "")
	conf := pamtest.ShortDir(t, "pamc-")
	bin := pamtest.ShortDir(t, "pamb-")
	for name, text := range map[string]string{"claude": fakeClaude, "codex": fakeCodex} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	toml := "[providers.claude]\nbinary = \"" + filepath.Join(bin, "claude") + "\"\n[providers.codex]\nbinary = \"" + filepath.Join(bin, "codex") + "\"\n"
	if err := os.WriteFile(filepath.Join(conf, "providers.toml"), []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	w := s.faultWorker("hooks-host", s.url, "PAM_CONFIG_DIR="+conf, "PAM_HOLD_OPEN=3s")
	for _, prov := range []string{"claude", "codex"} {
		task := s.task()
		var r wire.Run
		s.must(202, "POST", "/api/v1/runs", map[string]any{"task_id": task.ID, "provider": prov, "prompt": "do the thing"}, &r)
		got := s.waitRun(r.ID, "exited and completed", 60*time.Second, func(r wire.Run) bool { return !isActive(r.Status) && r.CompletedAt != nil })
		if got.Status != "exited" || got.CompletionSource == nil || *got.CompletionSource != wire.SourceProviderHook {
			t.Fatalf("%s: run %s, completion %v; events %v", prov, got.Status, got.CompletionSource, s.topics(r.ID))
		}
		evs := s.events(r.ID)
		want := []int(nil)
		if prov == "claude" {
			want = []int{1, 2}
		}
		if countTopic(evs, "run.completed") != 1 || !slices.Equal(progressSeqs(evs), want) {
			t.Errorf("%s: progress %v; events %v", prov, progressSeqs(evs), s.topics(r.ID))
		}
		// The request for a person made the run needs_input; whatever
		// cleared it (a pane change, or the end of running), none now.
		if log := s.attentionLog(r.ID); len(log) != 2 || log[0] != "none>needs_input/provider-hook" || !strings.HasPrefix(log[1], "needs_input>none/") {
			t.Errorf("%s: run.attention %q", prov, log)
		}
		if got.Attention != wire.AttentionNone {
			t.Errorf("%s: attention %q after the run ended", prov, got.Attention)
		}
		var item wire.WorkItem
		s.must(200, "GET", "/api/v1/work-items/"+task.ID, nil, &item)
		if item.Status != "done" {
			t.Errorf("%s: the item is %s after completion (auto_done)", prov, item.Status)
		}
		if prov != "claude" {
			continue
		}
		// Hold-open: the closing line says how and until when; then the
		// session goes (PAM_HOLD_OPEN=3s).
		eventually.Wait(t, eventually.Medium, "the closing line in the pane", func() bool {
			var p wire.Pane
			s.must(200, "GET", "/api/v1/runs/"+r.ID+"/pane", nil, &p)
			return strings.Contains(p.Capture, "finished with exit code 0 (exited) — this session stays open until")
		})
		eventually.Wait(t, 15*time.Second, "the session cleaned up after hold-open", func() bool { return !w.hasSession(r.SessionName) })
	}
}
