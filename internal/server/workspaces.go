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
	run, host, err := s.store.WorkspaceHost(ctx, runID)
	if err != nil {
		return "", err
	}
	if op == wire.WorkspaceOpPush {
		// The push's result is journaled only if asked for.
		if err := s.store.RequestPush(ctx, run.ID, host); err != nil {
			return "", err
		}
	}
	id := uuid.NewString()
	ch, done := s.opts.Fleet.AwaitLog(id, host, run.ID)
	defer done()
	if err := s.opts.Fleet.Send(host, wire.Frame{Type: wire.FrameWorkspaceRequest, RequestID: id, RunID: run.ID, Op: op}); err != nil {
		return "", wire.Errorf(wire.CodeHostUnreachable, "the host holding the run's worktree is not connected")
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	var out []byte
	for {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-t.C:
			return "", &wire.Error{Status: http.StatusGatewayTimeout, Code: wire.CodeHostUnreachable, Message: "no answer from the host holding the run's worktree"}
		case f := <-ch:
			if f.Type != wire.FrameWorkspaceReply {
				continue
			}
			if f.Code != "" {
				return "", wire.Errorf(f.Code, "%s", f.Message)
			}
			out = append(out, f.Text...)
			if f.EOF || len(out) > wire.MaxDiff+(1<<20) {
				return string(out), nil
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
	text, err := s.workspaceRequest(r.Context(), r.PathValue("id"), op, workspaceTimeout)
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
	w.Header().Set("Content-Type", "text/x-diff; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, text)
}

// pushRun is POST /runs/{id}/push: the worker pushes the run's branch
// with its own credentials; the outcome is journaled as
// run.workspace_pushed (by the uplink, whatever happens to this request)
// and answered here.
func (s *Server) pushRun(w http.ResponseWriter, r *http.Request) {
	text, err := s.workspaceRequest(r.Context(), r.PathValue("id"), wire.WorkspaceOpPush, pushTimeout)
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
