package worker

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"pam/internal/lifecycle"
	"pam/internal/wire"
	"pam/internal/workspace"
)

// Workspaces (docs/architecture.md#workspaces): the worktree of each run
// that asked for one, made before its session; diffs, pushes and
// removals on the orchestrator's request; clean-up by retention and
// budget, never of a live run's.

// prepareWorkspace makes (or finds, or takes over from the run this one
// continues) the run's worktree and reports it with workspace_ready. A
// failure fails the attempt workspace_failed with the git command and its
// stderr, and the run is forgotten; ok is false then, and when the run
// was stopped or replaced meanwhile. reused says the worktree was there
// before: an earlier attempt's, or the continued run's — where the
// agent's conversation is (docs/architecture.md#resume-and-continue).
func (w *agent) prepareWorkspace(ctx context.Context, r *run, gen uint64, f wire.RunDispatchFrame, attempt int) (ws wire.Workspace, reused, ok bool) {
	fail := func(detail string) {
		w.log.Warn("workspace failed", "run_id", r.id, "attempt", attempt, "detail", detail)
		w.forget(r, gen, false)
		w.sendState(r.id, attempt, wire.StateWorkspaceFailed, detail)
	}
	if f.Repo == nil {
		fail("the run asks for a worktree but its project has no repo")
		return wire.Workspace{}, false, false
	}
	start := time.Now()
	takeOver := f.Workspace.Path != "" && f.Workspace.Path != w.ws.Path(r.id)
	reused = takeOver || w.ws.Exists(r.id)
	ws, err := w.ws.Prepare(ctx, workspace.Spec{
		RunID: r.id, ProjectID: f.ProjectID, URL: f.Repo.URL, Base: f.Repo.Base,
		Branch: f.Workspace.Branch, BaseCommit: f.Workspace.BaseCommit, Path: f.Workspace.Path,
	})
	if err != nil {
		if ctx.Err() != nil {
			return wire.Workspace{}, false, false // the worker is stopping: nobody failed
		}
		fail(workspace.Detail(err))
		return wire.Workspace{}, false, false
	}
	w.mu.Lock()
	current := r.gen == gen && r.state == stateSpawning
	w.mu.Unlock()
	if !current {
		return wire.Workspace{}, false, false // stopped or replaced while the worktree was made
	}
	w.log.Info("workspace ready", "run_id", r.id, "attempt", attempt, "path", ws.Path, "branch", ws.Branch,
		"base_commit", ws.BaseCommit, "took", time.Since(start).Round(time.Millisecond))
	w.queueFrame(wire.WorkspaceReadyFrame{RunID: r.id, Attempt: wire.IntPtr(attempt), Workspace: &ws})
	return ws, reused, true
}

// serveWorkspace answers a workspace_request: the answer's text goes in
// workspace_reply chunks, the last with eof, or one reply with an error
// code.
func (w *agent) serveWorkspace(ctx context.Context, conn *websocket.Conn, req wire.WorkspaceRequestFrame) {
	reply := func(f wire.WorkspaceReplyFrame) error {
		f.RequestID, f.RunID = req.RequestID, req.RunID
		return w.sendOn(conn, f)
	}
	refuse := func(code string, err error) {
		if e := reply(wire.WorkspaceReplyFrame{EOF: true, Code: code, Message: workspace.Detail(err)}); e != nil {
			w.log.Warn("workspace_request: reply", "run_id", req.RunID, "err", e)
		}
	}
	text, head, err := w.workspaceOp(ctx, req)
	switch {
	case errors.Is(err, workspace.ErrNoWorkspace):
		refuse(wire.CodeNoWorkspace, err)
		return
	case wire.HasCode(err, wire.CodeHeadMoved):
		if e := reply(wire.WorkspaceReplyFrame{EOF: true, Code: wire.CodeHeadMoved, Message: workspace.Detail(err), Commit: head}); e != nil {
			w.log.Warn("workspace_request: reply", "run_id", req.RunID, "err", e)
		}
		return
	case wire.HasCode(err, wire.CodeIllegalTransition):
		refuse(wire.CodeIllegalTransition, errors.New("the run is live on this host: its worktree is in use"))
		return
	case err != nil:
		w.log.Warn("workspace_request", "run_id", req.RunID, "op", req.Op, "err", err)
		refuse(wire.FailWorkspaceFailed, err)
		return
	}
	for {
		chunk := text
		if len(chunk) > wire.MaxLogChunk {
			chunk = chunk[:wire.MaxLogChunk]
			for len(chunk) > 0 && !utf8.RuneStart(text[len(chunk)]) {
				chunk = chunk[:len(chunk)-1] // never split a character
			}
		}
		text = text[len(chunk):]
		if err := reply(wire.WorkspaceReplyFrame{Text: chunk, EOF: text == "", Commit: head}); err != nil {
			w.log.Warn("workspace_request: reply", "run_id", req.RunID, "err", err)
			return
		}
		if text == "" {
			return
		}
	}
}

// workspaceOp does what a workspace_request asks and returns the text of
// the answer, and the head of the run's branch it was taken at (for a
// diff or a stat; for a push, the commit pushed, or the branch's head
// when it refused head_moved).
func (w *agent) workspaceOp(ctx context.Context, req wire.WorkspaceRequestFrame) (string, string, error) {
	switch req.Op {
	case wire.WorkspaceOpDiff:
		var b strings.Builder
		head, err := w.ws.Diff(ctx, req.RunID, req.Part, &b, wire.MaxDiff)
		return strings.ToValidUTF8(b.String(), "\uFFFD"), head, err
	case wire.WorkspaceOpStat:
		st, err := w.ws.Stat(ctx, req.RunID, req.Part)
		if err != nil {
			return "", "", err
		}
		b, err := json.Marshal(st)
		return string(b), st.Head, err
	case wire.WorkspaceOpPush:
		ws, commit, detail, err := w.ws.Push(ctx, req.RunID, req.Commit)
		if errors.Is(err, workspace.ErrNoWorkspace) || wire.HasCode(err, wire.CodeHeadMoved) {
			return "", commit, err // nothing was pushed
		}
		ok := err == nil
		if !ok {
			detail = workspace.Detail(err)
		}
		w.log.Info("branch pushed", "run_id", req.RunID, "branch", ws.Branch, "commit", commit, "ok", ok, "detail", detail)
		w.queueFrame(wire.WorkspacePushedFrame{RunID: req.RunID, Workspace: &ws, OK: &ok, Detail: detail})
		b, err := json.Marshal(wire.PushResult{RunID: req.RunID, Branch: ws.Branch, Commit: commit, OK: ok, Detail: detail})
		return string(b), commit, err
	case wire.WorkspaceOpRemove:
		if w.holds(req.RunID) && !w.endHoldOpen(ctx, req.RunID) {
			return "", "", wire.Conflict(wire.CodeIllegalTransition, "run is live")
		}
		ws, ok, err := w.ws.Remove(ctx, req.RunID)
		if err != nil {
			return "", "", err
		}
		if !ok {
			return "", "", workspace.ErrNoWorkspace
		}
		w.queueFrame(wire.WorkspaceRemovedFrame{RunID: req.RunID, Workspace: &ws, Reason: "removed on request"})
		return "", "", nil
	}
	return "", "", errors.New("unknown op " + req.Op)
}

// endHoldOpen ends the session this host keeps for a run that is over
// (hold-open after its CLI exited, or still being stopped), so that its
// worktree can be removed on request; it reports whether the run has no
// session here now. The orchestrator's word decides that the run is
// over: a run it has pending, spawning or running keeps its session.
func (w *agent) endHoldOpen(ctx context.Context, runID string) bool {
	wr, err := w.lookupRun(ctx, runID)
	if err != nil || lifecycle.Active(wr.Status) {
		return false
	}
	w.mu.Lock()
	r := w.runs[runID]
	w.mu.Unlock()
	if r == nil {
		return true
	}
	r.op.Lock() // after any spawn or stop of it under way
	defer r.op.Unlock()
	w.mu.Lock()
	current := w.runs[runID] == r
	gen, name, attempt := r.gen, r.name, r.attempt
	if current {
		r.state = stateStopping
	}
	w.mu.Unlock()
	if !current {
		return !w.holds(runID)
	}
	w.log.Info("ending the session of a run that is over, to remove its worktree", "run_id", runID, "attempt", attempt, "status", wr.Status)
	if err := w.tm.Stop(ctx, name, w.o.StopGrace, true); err != nil {
		w.log.Warn("end a hold-open session", "run_id", runID, "err", err)
		return false
	}
	w.forget(r, gen, true)
	return !w.holds(runID)
}

// holds reports whether the run has a session here (spawning, live or
// stopping, hold-open included): its worktree is in use.
func (w *agent) holds(runID string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.runs[runID] != nil
}

// cleanWorkspaces is one clean-up pass (docs/architecture.md#workspaces).
// A worktree whose run this host holds is kept; so is one whose run the
// orchestrator says is pending, spawning or running, or is about to be
// continued, and one without an answer about its run. One left half-made
// (no record) is removed; one whose record is not trusted is left alone.
// One of a run that ended, or that the orchestrator does not know (its
// host was removed and added again), is removed WorktreeRetention after
// the run ended (for an unknown run: after the worktree was last
// changed), whatever it holds. Then, while the worktrees and the
// mirrors pass WorktreeBudget, finished runs' go, oldest first — but
// only those whose work is all pushed and committed: the budget never
// takes unsaved work.
func (w *agent) cleanWorkspaces(ctx context.Context) {
	entries, err := w.ws.List()
	if err != nil {
		w.log.Warn("workspaces: list", "err", err)
		return
	}
	w.pruneMirrors(ctx)
	mirrors := w.ws.MirrorsSize()
	total := mirrors
	var done []finishedWorktree
	now := w.now()
	for _, e := range entries {
		if ctx.Err() != nil {
			return
		}
		switch v, end := w.judgeWorktree(ctx, e); v {
		case worktreeHalfMade:
			if w.removeWorktree(ctx, e, "left half-made") {
				continue
			}
		case worktreeEnded:
			// Removed past retention, else a candidate for the budget.
			if now.Sub(end) < w.o.WorktreeRetention {
				done = append(done, finishedWorktree{e, end})
			} else if w.removeWorktree(ctx, e, "retention") {
				continue
			}
		}
		total += e.Size
	}
	if total <= w.o.WorktreeBudget {
		return
	}
	w.cleanForBudget(ctx, done, total, mirrors)
}

// pruneMirrors prunes the mirrors on their schedule, beside the pass (one
// prune at a time); they count in the budget too.
func (w *agent) pruneMirrors(ctx context.Context) {
	if w.pruning.CompareAndSwap(false, true) {
		w.ops.Go(func() {
			defer w.pruning.Store(false)
			w.ws.PruneMirrors(ctx, workspace.PruneEvery)
		})
	}
}

// worktreeVerdict is what a clean-up pass makes of one worktree.
type worktreeVerdict int

const (
	worktreeKept     worktreeVerdict = iota // in use, live, or not known to be over
	worktreeHalfMade                        // no record: removed now
	worktreeEnded                           // its run is over: retention, then the budget
)

// finishedWorktree is a worktree of a run that is over, within
// retention: the budget may take it, oldest end first.
type finishedWorktree struct {
	e   workspace.Entry
	end time.Time
}

// judgeWorktree says whether e is kept, half-made, or of a run that
// ended (and when): see cleanWorkspaces. It asks the orchestrator about
// the run of a worktree this host does not hold.
func (w *agent) judgeWorktree(ctx context.Context, e workspace.Entry) (worktreeVerdict, time.Time) {
	if e.Untrusted {
		w.log.Warn("workspaces: a worktree whose record is not trusted is left alone", "run_id", e.RunID)
		return worktreeKept, time.Time{}
	}
	if w.holds(e.RunID) {
		return worktreeKept, time.Time{}
	}
	wr, err := w.lookupRun(ctx, e.RunID)
	switch {
	case err == nil && !e.Recorded, wire.HasCode(err, wire.CodeNotFound) && !e.Recorded:
		return worktreeHalfMade, time.Time{}
	case wire.HasCode(err, wire.CodeNotFound):
		// The orchestrator no longer knows the run (its host was
		// removed and added again): what it did is nowhere else, so
		// it stays until retention from when it was last changed.
		end := e.Record.CreatedAt
		if e.Modified.After(end) {
			end = e.Modified
		}
		return worktreeEnded, end
	case err != nil:
		w.log.Debug("workspaces: run not looked up; worktree kept", "run_id", e.RunID, "err", err)
		return worktreeKept, time.Time{}
	case lifecycle.Active(wr.Status):
		return worktreeKept, time.Time{}
	case wr.ContinuedBy != nil:
		// A live continuation is about to take the worktree over
		// (docs/architecture.md#resume-and-continue).
		return worktreeKept, time.Time{}
	default:
		end := e.Record.CreatedAt
		if wr.FinishedAt != nil {
			end = *wr.FinishedAt
		}
		return worktreeEnded, end
	}
}

// removeWorktree removes e's worktree, unless its run was taken here since
// the list (never a live run's), and tells the orchestrator.
func (w *agent) removeWorktree(ctx context.Context, e workspace.Entry, why string) bool {
	if w.holds(e.RunID) {
		return false // taken since the list: never a live run's
	}
	ws, ok, err := w.ws.Remove(ctx, e.RunID)
	if err != nil {
		w.log.Warn("workspaces: remove", "run_id", e.RunID, "err", err)
		return false
	}
	w.log.Info("worktree cleaned up", "run_id", e.RunID, "reason", why, "bytes", e.Size)
	if ok {
		w.queueFrame(wire.WorkspaceRemovedFrame{RunID: e.RunID, Workspace: &ws, Reason: why})
	}
	return true
}

// cleanForBudget removes finished runs' worktrees, oldest first, while
// the worktrees and mirrors (total bytes) pass WorktreeBudget — only
// those whose work is all pushed and committed: the budget never takes
// unsaved work, and says so when that leaves it over.
func (w *agent) cleanForBudget(ctx context.Context, done []finishedWorktree, total, mirrors int64) {
	slices.SortFunc(done, func(a, b finishedWorktree) int { return a.end.Compare(b.end) })
	var kept []string
	for _, f := range done {
		if total <= w.o.WorktreeBudget {
			break
		}
		unsaved, err := w.ws.Unsaved(ctx, f.e.Record)
		if err != nil {
			unsaved = "not known: " + workspace.Detail(err)
		}
		if unsaved != "" {
			kept = append(kept, f.e.RunID+" ("+unsaved+")")
			continue // only retention or a request removes unsaved work
		}
		if w.removeWorktree(ctx, f.e, "budget") {
			total -= f.e.Size
		}
	}
	if total > w.o.WorktreeBudget {
		w.log.Warn("workspaces: over PAM_WORKTREE_BUDGET; the finished worktrees left hold unsaved work and stay until retention",
			"bytes", total, "mirrors_bytes", mirrors, "budget", w.o.WorktreeBudget, "kept", kept)
	}
}
