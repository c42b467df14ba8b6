package worker

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/wire"
	"pam/internal/wire/wiretest"
	"pam/internal/workspace"
)

// readDispatch is the dispatch file the worker wrote for a run, once it
// is there.
func (h *harness) readDispatch(runID string) wire.Dispatch {
	h.t.Helper()
	path := filepath.Join(h.opts.DataDir, "worker", dispatchDir, runID+".json")
	var d wire.Dispatch
	eventually.Wait(h.t, 15*time.Second, "the dispatch file of "+runID, func() bool {
		b, err := os.ReadFile(path)
		return err == nil && json.Unmarshal(b, &d) == nil
	})
	return d
}

// TestResumeDispatch (docs/architecture.md#resume-and-continue): the
// worker reports which providers resume; a dispatch that asks for a
// resume tells the wrapper so, with the session and the message, where
// the conversation is — a run without a worktree, or in the worktree it
// was in; a worktree made afresh starts afresh. A continuation takes the
// old run's worktree over: its session starts in that very folder, which
// is reported as the continuation's and no longer the old run's.
func TestResumeDispatch(t *testing.T) {
	orch := newFakeOrch(t)
	h := newHarness(t, orch)
	t.Setenv("TMUX_TMPDIR", h.tmuxDir)
	// claude resumes, but its binary is not on this host: not reported.
	h.opts.Resumable = func() []string { return []string{"shell", "claude", "fake"} }
	h.opts.ContinueMessages = func() map[string]string { return map[string]string{"shell": "go on", "claude": "continue"} }
	h.start()
	eventually.Wait(t, eventually.Medium, "the registration", func() bool { return len(orch.regs()) > 0 })
	if got := orch.regs()[0].Resumable; !slices.Equal(got, []string{"fake", "shell"}) {
		t.Errorf("registered resumable %q", got)
	}
	// Each usable provider's continue_message, for the server to type
	// when a limit resets.
	if got := orch.regs()[0].ContinueMessages; len(got) != 1 || got["shell"] != "go on" {
		t.Errorf("registered continue_messages %q", got)
	}

	// No worktree: resumed as the orchestrator asks.
	plain := uuid.NewString()
	f := h.dispatchFrame(plain, 2)
	f.AgentSessionID, f.Text = "s1", "go on please"
	orch.send(f)
	if d := h.readDispatch(plain); !d.Resume || d.AgentSessionID != "s1" || d.ResumeText != "go on please" || d.Prompt != f.Prompt {
		t.Errorf("dispatch file of a resume: %+v", d)
	}
	fresh := uuid.NewString()
	orch.send(h.dispatchFrame(fresh, 1))
	if d := h.readDispatch(fresh); d.Resume || d.AgentSessionID != "" || d.ResumeText != "" {
		t.Errorf("dispatch file of a fresh start: %+v", d)
	}

	// A worktree made afresh holds no conversation: afresh.
	remote := pamtest.GitRemote(t, map[string]string{"README": "hello\n"})
	old := uuid.NewString()
	from := orch.mark()
	f = h.worktreeDispatch(old, 2, remote)
	f.AgentSessionID = "s1"
	orch.send(f)
	ready, _ := orch.wait(from, "workspace_ready of the old run", isType(wire.FrameWorkspaceReady, old))
	ws := *ready.Workspace
	if d := h.readDispatch(old); d.Resume {
		t.Errorf("a resume in a worktree made afresh: %+v", d)
	}

	// The continuation: the old run's worktree, the same folder.
	cont := uuid.NewString()
	from = orch.mark()
	f = h.worktreeDispatch(cont, 1, remote)
	f.Workspace = &wire.Workspace{Path: ws.Path, Branch: ws.Branch, BaseCommit: ws.BaseCommit}
	f.AgentSessionID, f.Text = "s1", "now the docs"
	orch.send(f)
	ready, _ = orch.wait(from, "workspace_ready of the continuation", isType(wire.FrameWorkspaceReady, cont))
	if *ready.Workspace != ws {
		t.Errorf("the continuation's workspace %+v, want the old run's %+v", ready.Workspace, ws)
	}
	if d := h.readDispatch(cont); !d.Resume || d.AgentSessionID != "s1" || d.ResumeText != "now the docs" || d.Cwd != ws.Path {
		t.Errorf("dispatch file of the continuation: %+v", d)
	}
	orch.wait(from, "a snapshot of the continuation", func(f wiretest.Frame) bool { return f.Type == wire.FrameSnapshot && f.RunID == cont })
	if got := h.sessionPath(cont); got != ws.Path {
		t.Errorf("the continuation started in %s, want %s", got, ws.Path)
	}
	m, err := workspace.New(workspace.Options{DataDir: h.opts.DataDir})
	if err != nil {
		t.Fatal(err)
	}
	if !m.Exists(cont) || m.Exists(old) {
		t.Error("the worktree was not handed over")
	}
}
