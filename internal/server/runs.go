package server

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"

	"pam/internal/provider"
	"pam/internal/store"
	"pam/internal/wire"
)

// Runs (docs/api.md#resources): admission, listing, and the operator's actions on a run.

func (s *Server) createRun(w http.ResponseWriter, r *http.Request) {
	var in wire.CreateRun
	if err := decodeJSON(w, r, &in); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := in.Validate(); err != nil {
		s.fail(w, r, err)
		return
	}
	// A prompt is never an option of the CLI; the host's own catalog is
	// checked again by the wrapper before exec.
	if in.Prompt != nil {
		if err := provider.CheckBuiltinPrompt(in.Provider, *in.Prompt, in.Args); err != nil {
			s.fail(w, r, wire.Invalid("prompt", "provider %s: %v", in.Provider, err))
			return
		}
	}
	run, err := s.runs.CreateRun(r.Context(), in)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.opts.Dispatcher.Wake()
	writeJSON(w, http.StatusAccepted, run)
}

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := store.RunFilter{Status: q.Get("status"), ProjectID: q.Get("project_id"), TaskID: q.Get("task_id"), HostID: q.Get("host_id"),
		Attention: q.Get("attention"), Before: q.Get("before")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			s.fail(w, r, wire.Invalid("limit", "limit must be a number"))
			return
		}
		f.Limit = n
	}
	var err error
	if f.IDPrefix, err = idPrefix(r); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := checkRunFilter(f); err != nil {
		s.fail(w, r, err)
		return
	}
	runs, next, err := s.store.ListRuns(r.Context(), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.RunList{Runs: runs, Next: next})
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request) {
	run, err := s.store.GetRun(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, run)
}

// decodeOptionalJSON is decodeJSON for bodies that may be absent.
func decodeOptionalJSON(w http.ResponseWriter, r *http.Request, v any) error {
	if r.ContentLength == 0 {
		return nil
	}
	r.Body = http.MaxBytesReader(w, r.Body, MaxBody)
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return jsonError(err)
	}
	if len(b) == 0 {
		return nil
	}
	return DecodeStrict(bytesReader(b), v)
}

func (s *Server) stopRun(w http.ResponseWriter, r *http.Request) {
	if _, err := s.store.GetRun(r.Context(), r.PathValue("id")); err != nil {
		s.fail(w, r, err)
		return
	}
	var in wire.StopRun
	if err := decodeOptionalJSON(w, r, &in); err != nil {
		s.fail(w, r, err)
		return
	}
	run, host, err := s.runs.StopRun(r.Context(), r.PathValue("id"), in.Force)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if host != "" {
		// The worker runs the stop ladder; if it is not connected, its
		// reconciliation finds a stopped run with a live session later.
		_ = s.opts.Fleet.Send(host, wire.RunStopFrame{RunID: run.ID, Attempt: wire.IntPtr(run.Attempt), Force: in.Force})
	}
	s.opts.Dispatcher.Wake()
	writeJSON(w, http.StatusAccepted, run)
}

func (s *Server) retryRun(w http.ResponseWriter, r *http.Request) {
	if _, err := s.store.GetRun(r.Context(), r.PathValue("id")); err != nil {
		s.fail(w, r, err)
		return
	}
	var in wire.RetryRun
	if err := decodeOptionalJSON(w, r, &in); err != nil {
		s.fail(w, r, err)
		return
	}
	run, err := s.runs.RetryRun(r.Context(), r.PathValue("id"), in.Fresh)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.opts.Dispatcher.Wake()
	writeJSON(w, http.StatusAccepted, run)
}

// continueRun is POST /runs/{id}/continue: a new run that resumes the
// ended run's conversation in its worktree on its host
// (docs/architecture.md#resume-and-continue).
func (s *Server) continueRun(w http.ResponseWriter, r *http.Request) {
	old, err := s.store.GetRun(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var in wire.ContinueRun
	if err := decodeOptionalJSON(w, r, &in); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := in.Validate(); err != nil {
		s.fail(w, r, err)
		return
	}
	// The text is the resumed CLI's message, and the prompt of a fresh
	// start: never an option of the CLI. A run's provider and args never
	// change, so the run read above is the one continued.
	prov := old.Provider
	if in.Provider != nil {
		prov = *in.Provider
	}
	text := ""
	if in.Text != nil {
		text = *in.Text
	}
	if err := provider.CheckBuiltinPrompt(prov, text, old.Args); err != nil {
		s.fail(w, r, wire.Invalid("text", "provider %s: %v", prov, err))
		return
	}
	run, err := s.runs.ContinueRun(r.Context(), r.PathValue("id"), in)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.opts.Dispatcher.Wake()
	writeJSON(w, http.StatusAccepted, run)
}

func (s *Server) completeRun(w http.ResponseWriter, r *http.Request) {
	run, err := s.runs.CompleteRun(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, run)
}

// sendKeys checks the allowlist, pushes send_keys to the run's host and
// answers observed when the pane changes within two capture intervals;
// only an observed answer clears needs_input or rate_limited.
func (s *Server) sendKeys(w http.ResponseWriter, r *http.Request) {
	run, err := s.store.GetRun(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var in wire.SendKeys
	if err := decodeJSON(w, r, &in); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := wire.ValidateKeys(in.Keys); err != nil {
		s.fail(w, r, err)
		return
	}
	if run.Status != wire.RunRunning || run.HostID == nil {
		s.fail(w, r, wire.Conflict(wire.CodeIllegalTransition, "keys go only to a running run; this one is %s", run.Status))
		return
	}
	defer s.answers.begin(run.ID)()
	before := s.opts.Fleet.Pane(run.ID).Seq
	if err := s.opts.Fleet.Send(*run.HostID, wire.SendKeysFrame{RunID: run.ID, Attempt: wire.IntPtr(run.Attempt), Keys: in.Keys}); err != nil {
		s.fail(w, r, wire.Errorf(wire.CodeUnavailable, "the run's host is not connected"))
		return
	}
	// Input starts a new turn: a completion before it is an earlier one's.
	if err := s.store.TouchInput(r.Context(), run.ID, run.Attempt); err != nil {
		s.log.Warn("record keys as input", "run_id", run.ID, "err", err)
	}
	observed := s.paneChangedSince(r.Context(), run.ID, before)
	if r.Context().Err() != nil {
		return
	}
	s.answered(r.Context(), run, observed, wire.AttentionSourceKeys)
	delivery := wire.DeliveryUnconfirmed
	if observed {
		delivery = wire.DeliveryObserved
	}
	writeJSON(w, http.StatusAccepted, wire.KeysResult{Delivery: delivery})
}

func (s *Server) getPane(w http.ResponseWriter, r *http.Request) {
	run, err := s.store.GetRun(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.opts.Fleet.Pane(run.ID))
}

func (s *Server) runEvents(w http.ResponseWriter, r *http.Request) {
	run, err := s.store.GetRun(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	safe, err := s.safeSeq(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	evs, err := s.store.RunEvents(r.Context(), run.ID, safe)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.EventList{Events: evs})
}

// runLogs relays the run's log file from its host (log_request →
// log_chunk frames). With follow it keeps asking from where it got to
// until the run is terminal and the host has nothing more.
func (s *Server) runLogs(w http.ResponseWriter, r *http.Request) {
	run, err := s.store.GetRun(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	follow, err := queryBool(r, "follow")
	if err != nil {
		s.fail(w, r, err)
		return
	}
	host := run.HostID
	if host == nil {
		if host, err = s.store.LastHost(r.Context(), run.ID); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	if host == nil {
		s.fail(w, r, wire.Errorf(wire.CodeConflict, "the run has not been placed on a host yet"))
		return
	}
	var offset int64
	text, eof, err := s.fetchLog(r.Context(), *host, run.ID, &offset)
	if err != nil {
		s.fail(w, r, wire.Errorf(wire.CodeUnavailable, "the run's host did not answer: %v", err))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, text)
	if !follow {
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.Flush()
	ctx, cancel := contextWithCancelOn(r.Context(), s.streamCtx)
	defer cancel()
	for {
		if eof {
			cur, err := s.store.GetRun(ctx, run.ID)
			if err != nil || !store.Active(cur.Status) {
				// One last read after the end, for the final lines.
				if text, _, err := s.fetchLog(ctx, *host, run.ID, &offset); err == nil {
					_, _ = io.WriteString(w, text)
				}
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
		text, eof, err = s.fetchLog(ctx, *host, run.ID, &offset)
		if err != nil {
			return
		}
		if text != "" {
			if _, err := io.WriteString(w, text); err != nil {
				return
			}
			_ = rc.Flush()
		}
	}
}

// fetchLog asks the host for the log from *offset and collects chunks
// until eof or a bound; *offset advances by what was received.
func (s *Server) fetchLog(ctx context.Context, host, runID string, offset *int64) (string, bool, error) {
	id := uuid.NewString()
	ch, done := s.opts.Fleet.AwaitLog(id, host, runID)
	defer done()
	off := *offset
	if err := s.opts.Fleet.Send(host, wire.LogRequestFrame{RequestID: id, RunID: runID, Offset: &off}); err != nil {
		return "", false, err
	}
	var out []byte
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case <-ctx.Done():
			return string(out), true, ctx.Err()
		case <-timeout.C:
			return string(out), true, errLogTimeout
		case fr := <-ch:
			f, ok := fr.(wire.LogChunkFrame)
			if !ok {
				continue
			}
			out = append(out, f.Text...)
			*offset += int64(len(f.Text))
			if f.EOF || len(out) > 4<<20 {
				return string(out), f.EOF, nil
			}
		}
	}
}

var errLogTimeout = &wire.Error{Status: http.StatusGatewayTimeout, Code: wire.CodeUnavailable, Message: "no answer from the host"}
