package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"pam/internal/wire"
)

// RunFilter narrows GET /runs; empty fields (and Limit ≤ 0) are not sent.
// Attention is an attention value or "any" (every run that waits for a
// person).
type RunFilter struct {
	Status    string
	ProjectID string
	TaskID    string
	HostID    string
	Attention string
	Limit     int
	// Before, a run id, asks for the page after that run (the Next of
	// the page before).
	Before string
}

// CreateRun admits a run (202, pending); placement happens asynchronously.
func (c *Client) CreateRun(ctx context.Context, body wire.CreateRun) (*wire.Run, error) {
	return decode[wire.Run](c, ctx, http.MethodPost, "/api/v1/runs", nil, body)
}

// ListRuns returns runs newest first: one page, see ListRunsPage.
func (c *Client) ListRuns(ctx context.Context, f RunFilter) ([]wire.Run, error) {
	l, err := c.ListRunsPage(ctx, f)
	return l.Runs, err
}

// ListRunsPage returns one page of runs, newest first, and the Before of
// the following page in Next (nil on the last).
func (c *Client) ListRunsPage(ctx context.Context, f RunFilter) (wire.RunList, error) {
	q := url.Values{}
	for k, v := range map[string]string{"status": f.Status, "project_id": f.ProjectID, "task_id": f.TaskID, "host_id": f.HostID,
		"attention": f.Attention, "before": f.Before} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	var out wire.RunList
	if err := c.Do(ctx, http.MethodGet, "/api/v1/runs", q, nil, &out); err != nil {
		return wire.RunList{}, err
	}
	return out, nil
}

// GetRun fetches one run.
func (c *Client) GetRun(ctx context.Context, id string) (*wire.Run, error) {
	return c.runCall(ctx, http.MethodGet, id, "", nil)
}

// StopRun stops a run that is not terminal; force skips the worker's
// SIGTERM grace.
func (c *Client) StopRun(ctx context.Context, id string, force bool) (*wire.Run, error) {
	return c.runCall(ctx, http.MethodPost, id, "/stop", wire.StopRun{Force: force})
}

// RetryRun requeues a failed run with attempt + 1; it resumes the
// agent's conversation unless fresh.
func (c *Client) RetryRun(ctx context.Context, id string, fresh bool) (*wire.Run, error) {
	var body any
	if fresh {
		body = wire.RetryRun{Fresh: true}
	}
	return c.runCall(ctx, http.MethodPost, id, "/retry", body)
}

// ContinueRun starts a new run that continues an ended run's
// conversation (POST /runs/{id}/continue).
func (c *Client) ContinueRun(ctx context.Context, id string, in wire.ContinueRun) (*wire.Run, error) {
	return c.runCall(ctx, http.MethodPost, id, "/continue", in)
}

// CompleteRun marks a run completed by hand (it does not stop it).
func (c *Client) CompleteRun(ctx context.Context, id string) (*wire.Run, error) {
	return c.runCall(ctx, http.MethodPost, id, "/complete", nil)
}

func (c *Client) runCall(ctx context.Context, method, id, action string, body any) (*wire.Run, error) {
	return decode[wire.Run](c, ctx, method, "/api/v1/runs/"+url.PathEscape(id)+action, nil, body)
}

// SendKeys types allowlisted keys and literal text into a running run's
// pane and says whether the pane was seen to change.
func (c *Client) SendKeys(ctx context.Context, id string, keys []wire.Key) (*wire.KeysResult, error) {
	return decode[wire.KeysResult](c, ctx, http.MethodPost, "/api/v1/runs/"+url.PathEscape(id)+"/keys", nil, wire.SendKeys{Keys: keys})
}

// SendMessage delivers text into a running run's agent and submits it
// (docs/api.md#messages); the answer says whether that was confirmed.
func (c *Client) SendMessage(ctx context.Context, id, text string) (*wire.MessageResult, error) {
	return decode[wire.MessageResult](c, ctx, http.MethodPost, "/api/v1/runs/"+url.PathEscape(id)+"/messages", nil, wire.SendMessage{Text: text})
}

// GetPane returns the latest pane snapshot of a run (seq 0 before the
// first one).
func (c *Client) GetPane(ctx context.Context, id string) (*wire.Pane, error) {
	return decode[wire.Pane](c, ctx, http.MethodGet, "/api/v1/runs/"+url.PathEscape(id)+"/pane", nil, nil)
}

// RunEvents returns the journal events of one run.
func (c *Client) RunEvents(ctx context.Context, id string) ([]wire.Event, error) {
	var out wire.EventList
	if err := c.Do(ctx, http.MethodGet, "/api/v1/runs/"+url.PathEscape(id)+"/events", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Events, nil
}

// RunLogs copies a run's log (text/plain, relayed from its host) to w.
// With follow it keeps copying until the server ends the stream (the run
// ended) or ctx ends, which returns ctx.Err().
func (c *Client) RunLogs(ctx context.Context, id string, follow bool, w io.Writer) error {
	q := url.Values{}
	if follow {
		q.Set("follow", "true")
	}
	req, err := c.newRequest(ctx, http.MethodGet, "/api/v1/runs/"+url.PathEscape(id)+"/logs", q, nil)
	if err != nil {
		return err
	}
	resp, err := c.open(req, "text/plain")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(flushWriter{w}, resp.Body)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// flushWriter flushes w after every write when it can, so followed logs
// appear as they arrive.
type flushWriter struct{ w io.Writer }

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if fl, ok := f.w.(interface{ Flush() error }); ok && err == nil {
		err = fl.Flush()
	}
	return n, err
}

// maxSignalAnswer bounds how much of a signal's answer is read.
const maxSignalAnswer = 64 << 10

// PostSignal makes one try of posting a run's signal
// (POST /api/internal/runs/{id}/signals) with the client's token, which
// is the run's signal token for the wrapper and hooks. It does not retry:
// the caller decides between retrying and spooling. A non-2xx answer
// comes back as a *wire.Error with its Status; a 2xx whose body cannot be
// read still means the orchestrator took the signal, and its result is
// then "accepted".
func (c *Client) PostSignal(ctx context.Context, runID string, sig wire.Signal) (string, error) {
	b, err := json.Marshal(sig)
	if err != nil {
		return "", fmt.Errorf("encode signal %s: %w", sig.Kind, err)
	}
	req, err := c.newRequest(ctx, http.MethodPost, "/api/internal/runs/"+url.PathEscape(runID)+"/signals", nil, bytes.NewReader(b))
	if err != nil {
		return "", err
	}
	resp, err := c.open(req, "application/json")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var r wire.SignalResult
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxSignalAnswer))
	if err != nil || json.Unmarshal(body, &r) != nil || r.Result == "" {
		return "accepted", nil
	}
	return r.Result, nil
}

// RunDiff copies the unified diff of what a run changed in its worktree
// to w (GET /runs/{id}/diff): part "" is everything (the committed part,
// then the rest), "committed" what a push sends, "uncommitted" the rest.
// It returns the head the diff was taken at.
func (c *Client) RunDiff(ctx context.Context, id, part string, w io.Writer) (string, error) {
	var q url.Values
	if part != "" {
		q = url.Values{"part": {part}}
	}
	req, err := c.newRequest(ctx, http.MethodGet, "/api/v1/runs/"+url.PathEscape(id)+"/diff", q, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.open(req, "text/x-diff")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	return resp.Header.Get(wire.HeadHeader), err
}

// RunDiffStat is GET /runs/{id}/diff?stat=true: the files a run changed,
// of one part or both, and the head of its branch.
func (c *Client) RunDiffStat(ctx context.Context, id, part string) (*wire.DiffStat, error) {
	var out wire.DiffStat
	q := url.Values{"stat": {"true"}}
	if part != "" {
		q.Set("part", part)
	}
	return &out, c.Do(ctx, http.MethodGet, "/api/v1/runs/"+url.PathEscape(id)+"/diff", q, nil, &out)
}

// PushRun is POST /runs/{id}/push: the run's branch pushed by its host;
// with commit, only while the branch is at it (else head_moved).
func (c *Client) PushRun(ctx context.Context, id, commit string) (*wire.PushResult, error) {
	var out wire.PushResult
	var in any
	if commit != "" {
		in = wire.PushInput{Commit: &commit}
	}
	return &out, c.Do(ctx, http.MethodPost, "/api/v1/runs/"+url.PathEscape(id)+"/push", nil, in, &out)
}

// DeleteWorkspace is DELETE /runs/{id}/workspace: the run's worktree
// removed from its host (the branch stays).
func (c *Client) DeleteWorkspace(ctx context.Context, id string) error {
	return c.Do(ctx, http.MethodDelete, "/api/v1/runs/"+url.PathEscape(id)+"/workspace", nil, nil, nil)
}
