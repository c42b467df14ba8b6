package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/google/uuid"

	"pam/internal/wire"
)

// Workspaces (docs/architecture.md#workspaces): the diff, push and
// removal of a run's worktree are done by the worker that holds it, on
// request over its uplink (workspace_request → workspace_reply), like
// the run logs.

// Waits for a worker's answer: a diff or a removal is quick; a push talks
// to the repository's remote.
const (
	workspaceTimeout = 60 * time.Second
	pushTimeout      = 3 * time.Minute
)

// workspaceRequest asks the host holding the run's worktree for op and
// collects the answer's text until eof. 404 no_workspace when the run has
// none, 503 host_unreachable when its host is not connected, 504 when it
// does not answer in time; an error the worker reports comes back as its
// code.
func (s *Server) workspaceRequest(ctx context.Context, runID, op string, timeout time.Duration) (string, error) {
	text, _, err := s.workspaceAsk(ctx, runID, wire.WorkspaceRequestFrame{Op: op}, timeout)
	return text, err
}

// workspaceAsk is workspaceRequest with the request's other fields (a
// diff's part, a push's commit); it returns the commit the worker names
// too: the branch's head a diff was taken at, the commit pushed, or the
// head that made a push head_moved (in the error's details).
func (s *Server) workspaceAsk(ctx context.Context, runID string, req wire.WorkspaceRequestFrame, timeout time.Duration) (string, string, error) {
	run, host, err := s.store.WorkspaceHost(ctx, runID)
	if err != nil {
		return "", "", err
	}
	if req.Op == wire.WorkspaceOpPush {
		// The push's result is journaled only if asked for.
		if err := s.store.RequestPush(ctx, run.ID, host); err != nil {
			return "", "", err
		}
	}
	id := uuid.NewString()
	ch, done := s.opts.Fleet.AwaitLog(id, host, run.ID)
	defer done()
	req.RequestID, req.RunID = id, run.ID
	if err := s.opts.Fleet.Send(host, req); err != nil {
		return "", "", wire.Errorf(wire.CodeHostUnreachable, "the host holding the run's worktree is not connected")
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	var out []byte
	head := ""
	for {
		select {
		case <-ctx.Done():
			return "", "", ctx.Err()
		case <-t.C:
			return "", "", &wire.Error{Status: http.StatusGatewayTimeout, Code: wire.CodeHostUnreachable, Message: "no answer from the host holding the run's worktree"}
		case fr := <-ch:
			f, ok := fr.(wire.WorkspaceReplyFrame)
			if !ok {
				continue
			}
			if f.Commit != "" {
				head = f.Commit
			}
			if f.Code != "" {
				e := wire.Errorf(f.Code, "%s", f.Message)
				if f.Code == wire.CodeHeadMoved && head != "" {
					e = e.With("head", head)
				}
				return "", head, e
			}
			out = append(out, f.Text...)
			if f.EOF || len(out) > wire.MaxDiff+(1<<20) {
				return string(out), head, nil
			}
		}
	}
}

// runDiff is GET /runs/{id}/diff: the unified diff as text/x-diff, or
// with ?stat=true the files changed with their line counts.
func (s *Server) runDiff(w http.ResponseWriter, r *http.Request) {
	stat, err := queryBool(r, "stat")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	op := wire.WorkspaceOpDiff
	if stat {
		op = wire.WorkspaceOpStat
	}

	// ?part=committed: only what a push sends; uncommitted: the rest.
	part := r.URL.Query().Get("part")
	if r.URL.Query().Has("part") && part != wire.DiffPartCommitted && part != wire.DiffPartUncommitted {
		s.fail(w, r, wire.Invalid("part", "part must be committed or uncommitted"))
		return
	}
	text, head, err := s.workspaceAsk(r.Context(), r.PathValue("id"), wire.WorkspaceRequestFrame{Op: op, Part: part}, workspaceTimeout)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if stat {
		var out wire.DiffStat
		if err := json.Unmarshal([]byte(text), &out); err != nil {
			s.fail(w, r, errors.New("the host's diff stat does not decode: "+err.Error()))
			return
		}
		if out.Files == nil {
			out.Files = []wire.DiffFile{}
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	if head != "" {
		w.Header().Set(wire.HeadHeader, head)
	}
	w.Header().Set("Content-Type", "text/x-diff; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, text)
}

// pushRun is POST /runs/{id}/push: the worker pushes the run's branch
// with its own credentials; the outcome is journaled as
// run.workspace_pushed (by the uplink, whatever happens to this request)
// and answered here.
//
// With {commit} (the head the person reviewed), the worker pushes that
// commit, and only while the branch is still at it: 409 head_moved
// (details.head: where the branch is now) and nothing pushed otherwise.
func (s *Server) pushRun(w http.ResponseWriter, r *http.Request) {
	var in wire.PushInput
	if err := decodeOptionalJSON(w, r, &in); err != nil {
		s.fail(w, r, err)
		return
	}
	req := wire.WorkspaceRequestFrame{Op: wire.WorkspaceOpPush}
	if in.Commit != nil {
		if !wire.ValidCommit(*in.Commit) {
			s.fail(w, r, wire.Invalid("commit", "commit must be a full hexadecimal commit id (the head the diff named)"))
			return
		}
		req.Commit = *in.Commit
	}
	text, _, err := s.workspaceAsk(r.Context(), r.PathValue("id"), req, pushTimeout)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var out wire.PushResult
	if err := json.Unmarshal([]byte(text), &out); err != nil {
		s.fail(w, r, errors.New("the host's push result does not decode: "+err.Error()))
		return
	}
	writeJSON(w, http.StatusAccepted, out)
}

// deleteWorkspace is DELETE /runs/{id}/workspace: the worker removes the
// worktree of a run that is no longer live (the branch stays).
func (s *Server) deleteWorkspace(w http.ResponseWriter, r *http.Request) {
	run, err := s.store.GetRun(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if run.Workspace != nil && (run.Status == wire.RunPending || run.Status == wire.RunSpawning || run.Status == wire.RunRunning) {
		s.fail(w, r, wire.Conflict(wire.CodeIllegalTransition, "the run is %s: its worktree is in use", run.Status))
		return
	}
	if _, err := s.workspaceRequest(r.Context(), run.ID, wire.WorkspaceOpRemove, workspaceTimeout); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
