package apiclient

import (
	"pam/internal/wire"

	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
)

// Client is a typed client of the public API (docs/api.md#resources, docs/api.md#server-sent-events). It is what
// the CLI and black-box tests use, so it speaks exactly the routes and
// shapes the server does. The zero HTTP field means http.DefaultClient.
type Client struct {
	BaseURL string // e.g. http://127.0.0.1:7898, without /api/v1
	Token   string // operator bearer token
	HTTP    *http.Client
}

// WorkItemFilter narrows GET /projects/{ref}/work-items; empty fields are
// not sent.
type WorkItemFilter struct {
	Status   string
	Kind     string
	ParentID string
}

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 1 << 20

// maxSSELine bounds one line of an event stream, so a broken server cannot
// make the client buffer without end.
const maxSSELine = 16 << 20

// New returns a client of the orchestrator at baseURL. caFile, when
// not empty, is a PEM bundle trusted in addition to the system roots
// (PAM_CA_FILE), for orchestrators with a private CA. The client has no
// overall timeout because event streams are long-lived; bound calls with
// their context.
func New(baseURL, token, caFile string) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("orchestrator URL %q: want http://host:port or https://host:port", baseURL)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("CA file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s: no PEM certificates found", caFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &Client{
		BaseURL: strings.TrimRight(baseURL, "/"),
		Token:   token,
		HTTP:    &http.Client{Transport: tr},
	}, nil
}

// Health calls GET /healthz (no token needed). A 503 comes back as an
// *Error with Status 503.
func (c *Client) Health(ctx context.Context) (*wire.Health, error) {
	return decode[wire.Health](c, ctx, http.MethodGet, "/healthz", nil, nil)
}

// ListProjects returns the projects, archived ones too when asked.
func (c *Client) ListProjects(ctx context.Context, includeArchived bool) ([]wire.Project, error) {
	q := url.Values{}
	if includeArchived {
		q.Set("include_archived", "true")
	}
	var out wire.ProjectList
	if err := c.Do(ctx, http.MethodGet, "/api/v1/projects", q, nil, &out); err != nil {
		return nil, err
	}
	return out.Projects, nil
}

// CreateProject creates a project; the server derives the slug from the
// name when none is given.
func (c *Client) CreateProject(ctx context.Context, body wire.CreateProject) (*wire.Project, error) {
	return decode[wire.Project](c, ctx, http.MethodPost, "/api/v1/projects", nil, body)
}

// GetProject fetches a project by id or slug.
func (c *Client) GetProject(ctx context.Context, ref string) (*wire.Project, error) {
	return decode[wire.Project](c, ctx, http.MethodGet, "/api/v1/projects/"+url.PathEscape(ref), nil, nil)
}

// UpdateProject changes the fields set in body.
func (c *Client) UpdateProject(ctx context.Context, ref string, body wire.UpdateProject) (*wire.Project, error) {
	return decode[wire.Project](c, ctx, http.MethodPatch, "/api/v1/projects/"+url.PathEscape(ref), nil, body)
}

// ArchiveProject soft-deletes a project and returns it archived.
func (c *Client) ArchiveProject(ctx context.Context, ref string) (*wire.Project, error) {
	return decode[wire.Project](c, ctx, http.MethodDelete, "/api/v1/projects/"+url.PathEscape(ref), nil, nil)
}

// UnarchiveProject makes an archived project active again.
func (c *Client) UnarchiveProject(ctx context.Context, ref string) (*wire.Project, error) {
	return decode[wire.Project](c, ctx, http.MethodPost, "/api/v1/projects/"+url.PathEscape(ref)+"/unarchive", nil, nil)
}

// ListWorkItems returns a project's work items in tree order (depth-first,
// siblings by position then creation).
func (c *Client) ListWorkItems(ctx context.Context, projectRef string, f WorkItemFilter) ([]wire.WorkItem, error) {
	q := url.Values{}
	if f.Status != "" {
		q.Set("status", f.Status)
	}
	if f.Kind != "" {
		q.Set("kind", f.Kind)
	}
	if f.ParentID != "" {
		q.Set("parent_id", f.ParentID)
	}
	var out wire.WorkItemList
	if err := c.Do(ctx, http.MethodGet, "/api/v1/projects/"+url.PathEscape(projectRef)+"/work-items", q, nil, &out); err != nil {
		return nil, err
	}
	return out.WorkItems, nil
}

// CreateWorkItem adds a work item to a project.
func (c *Client) CreateWorkItem(ctx context.Context, projectRef string, body wire.CreateWorkItem) (*wire.WorkItem, error) {
	return decode[wire.WorkItem](c, ctx, http.MethodPost, "/api/v1/projects/"+url.PathEscape(projectRef)+"/work-items", nil, body)
}

// GetWorkItem fetches one work item.
func (c *Client) GetWorkItem(ctx context.Context, id string) (*wire.WorkItem, error) {
	return decode[wire.WorkItem](c, ctx, http.MethodGet, "/api/v1/work-items/"+url.PathEscape(id), nil, nil)
}

// UpdateWorkItem changes the fields set in body; a set ParentID with a nil
// Value moves the item to the project root.
func (c *Client) UpdateWorkItem(ctx context.Context, id string, body wire.UpdateWorkItem) (*wire.WorkItem, error) {
	return decode[wire.WorkItem](c, ctx, http.MethodPatch, "/api/v1/work-items/"+url.PathEscape(id), nil, body)
}

// DeleteWorkItem deletes a work item without children or runs.
func (c *Client) DeleteWorkItem(ctx context.Context, id string) error {
	return c.Do(ctx, http.MethodDelete, "/api/v1/work-items/"+url.PathEscape(id), nil, nil, nil)
}

// ListEvents returns journal events with seq > after in ascending order;
// topic is a glob ("" = all) and limit ≤ 0 leaves the server's default.
func (c *Client) ListEvents(ctx context.Context, after int64, topic string, limit int) ([]wire.Event, error) {
	evs, _, err := c.ListEventsSeq(ctx, after, topic, limit)
	return evs, err
}

// ListEventsSeq is ListEvents that also returns the journal position the
// read saw (its Pam-Event-Seq header; 0 when the server sent none): every
// event up to it is committed, so streaming from it misses nothing.
func (c *Client) ListEventsSeq(ctx context.Context, after int64, topic string, limit int) ([]wire.Event, int64, error) {
	q := url.Values{}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	if topic != "" {
		q.Set("topic", topic)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out wire.EventList
	h, err := c.do(ctx, http.MethodGet, "/api/v1/events", q, nil, &out)
	if err != nil {
		return nil, 0, err
	}
	seq, _ := strconv.ParseInt(h.Get(wire.HeaderEventSeq), 10, 64)
	return out.Events, seq, nil
}

// StreamEvents reads GET /events/stream and calls fn for every event with
// its name (the topic, or "snapshot"), its id (the last id the stream set,
// i.e. the seq) and its data. after > 0 resumes after that seq (sent as
// Last-Event-ID and ?after=); 0 asks for every retained event first
// (?after=0); a negative after streams live only (no cursor: the events
// committed after the connection).
//
// It returns ctx.Err() when ctx ends, fn's error if fn fails, nil when the
// server closes the stream cleanly, and an *Error for a non-2xx answer.
// Reconnecting is the caller's choice: resume with the last id seen.
func (c *Client) StreamEvents(ctx context.Context, after int64, topic string, fn func(name, id string, data []byte) error) error {
	q := url.Values{}
	if topic != "" {
		q.Set("topic", topic)
	}
	if after >= 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	req, err := c.newRequest(ctx, http.MethodGet, "/api/v1/events/stream", q, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	if after > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(after, 10))
	}
	resp, err := c.httpClient().Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return decodeError(resp)
	}
	err = readSSE(resp.Body, fn)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// readSSE parses an event stream as the HTML standard describes it: lines
// end in LF, CRLF or CR; "field: value" with one optional space after the
// colon; lines starting with ":" are comments; several data lines join
// with "\n"; a blank line dispatches the event when it has data; the id
// persists until changed; an unterminated last event is dropped. It returns
// nil at EOF and fn's error unwrapped.
func readSSE(r io.Reader, fn func(name, id string, data []byte) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	var (
		lastID  string
		name    string
		data    bytes.Buffer
		hasData bool
		first   = true
	)
	for {
		line, err := readLine(br)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if first {
			line = bytes.TrimPrefix(line, []byte("\xEF\xBB\xBF"))
			first = false
		}
		if len(line) == 0 {
			if hasData {
				ev := name
				if ev == "" {
					ev = "message"
				}
				if err := fn(ev, lastID, bytes.Clone(data.Bytes())); err != nil {
					return err
				}
			}
			name, hasData = "", false
			data.Reset()
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, found := bytes.Cut(line, []byte(":"))
		if found {
			value = bytes.TrimPrefix(value, []byte(" "))
		}
		switch string(field) {
		case "event":
			name = string(value)
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.Write(value)
			hasData = true
		case "id":
			if !bytes.ContainsRune(value, 0) {
				lastID = string(value)
			}
		}
	}
}

// readLine returns the next line without its terminator (LF, CRLF or a
// lone CR). A final line without a terminator is reported as io.EOF, since
// an event cut off by a closed stream is incomplete.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		b, err := br.ReadByte()
		if err != nil {
			return nil, err
		}
		switch b {
		case '\n':
			return line, nil
		case '\r':
			if next, err := br.Peek(1); err == nil && next[0] == '\n' {
				_, _ = br.ReadByte()
			}
			return line, nil
		}
		if len(line) >= maxSSELine {
			return nil, fmt.Errorf("event stream line longer than %d bytes", maxSSELine)
		}
		line = append(line, b)
	}
}

// Do performs one API call: it sends in as JSON when not nil, decodes a
// 2xx body into out when not nil, and turns any other answer into an
// *Error. path starts with "/" and has its segments already escaped.
func (c *Client) Do(ctx context.Context, method, path string, q url.Values, in, out any) error {
	_, err := c.do(ctx, method, path, q, in, out)
	return err
}

// do is Do that also returns the answer's header.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, in, out any) (http.Header, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("encode %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := c.newRequest(ctx, method, path, q, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return nil, err
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		resp.Body.Close()
	}()
	if resp.StatusCode/100 != 2 {
		return resp.Header, decodeError(resp)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return resp.Header, nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return resp.Header, fmt.Errorf("decode %s %s response: %w", method, path, err)
	}
	return resp.Header, nil
}

func (c *Client) newRequest(ctx context.Context, method, path string, q url.Values, body io.Reader) (*http.Request, error) {
	u := c.BaseURL + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	return req, nil
}

func (c *Client) httpClient() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

// decodeError turns a non-2xx response into an *Error: the envelope when
// the body is one, otherwise code "internal" with the status text (and
// the start of the body, for a proxy's error page, in details.body).
func decodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var env wire.Envelope
	if json.Unmarshal(b, &env) == nil && env.Error != nil && env.Error.Code != "" {
		env.Error.Status = resp.StatusCode
		return env.Error
	}
	msg := http.StatusText(resp.StatusCode)
	if msg == "" {
		msg = resp.Status
	}
	e := &wire.Error{Status: resp.StatusCode, Code: wire.CodeInternal, Message: msg}
	if s := strings.TrimSpace(string(b)); s != "" {
		if len(s) > 200 {
			s = s[:200]
		}
		e = e.With("body", s)
	}
	return e
}

// ListHosts returns every host, by name.
func (c *Client) ListHosts(ctx context.Context) ([]wire.Host, error) {
	var out wire.HostList
	if err := c.Do(ctx, http.MethodGet, "/api/v1/hosts", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Hosts, nil
}

// CreateHost registers a host; the answer holds its worker token, which
// the server shows this once.
func (c *Client) CreateHost(ctx context.Context, body wire.CreateHost) (*wire.HostCreated, error) {
	return decode[wire.HostCreated](c, ctx, http.MethodPost, "/api/v1/hosts", nil, body)
}

// GetHost fetches a host by id or name, with its active_runs.
func (c *Client) GetHost(ctx context.Context, ref string) (*wire.Host, error) {
	return c.hostCall(ctx, http.MethodGet, ref, "")
}

// DisableHost withholds new dispatch from a host (drain-only).
func (c *Client) DisableHost(ctx context.Context, ref string) (*wire.Host, error) {
	return c.hostCall(ctx, http.MethodPost, ref, "/disable")
}

// EnableHost lifts a disable; the status is derived from last_seen_at.
func (c *Client) EnableHost(ctx context.Context, ref string) (*wire.Host, error) {
	return c.hostCall(ctx, http.MethodPost, ref, "/enable")
}

// ClearSuspect accepts the host's latest instance id as pinned.
func (c *Client) ClearSuspect(ctx context.Context, ref string) (*wire.Host, error) {
	return c.hostCall(ctx, http.MethodPost, ref, "/clear-suspect")
}

// SetHostMaxRuns changes how many runs a host may hold at once (1 to 1000)
// and returns the host as it now reads.
func (c *Client) SetHostMaxRuns(ctx context.Context, ref string, maxRuns int) (*wire.Host, error) {
	return decode[wire.Host](c, ctx, http.MethodPatch, "/api/v1/hosts/"+url.PathEscape(ref), nil, wire.UpdateHost{MaxRuns: &maxRuns})
}

func (c *Client) hostCall(ctx context.Context, method, ref, action string) (*wire.Host, error) {
	return decode[wire.Host](c, ctx, method, "/api/v1/hosts/"+url.PathEscape(ref)+action, nil, nil)
}

// RotateToken gives a host a new worker token (the old one stops working
// at once) and returns it.
func (c *Client) RotateToken(ctx context.Context, ref string) (string, error) {
	var out wire.WorkerToken
	if err := c.Do(ctx, http.MethodPost, "/api/v1/hosts/"+url.PathEscape(ref)+"/rotate-token", nil, nil, &out); err != nil {
		return "", err
	}
	return out.WorkerToken, nil
}

// DeleteHost removes a host without active runs.
func (c *Client) DeleteHost(ctx context.Context, ref string) error {
	return c.Do(ctx, http.MethodDelete, "/api/v1/hosts/"+url.PathEscape(ref), nil, nil, nil)
}

// ListProviders returns each provider some host offers, with those hosts.
func (c *Client) ListProviders(ctx context.Context) ([]wire.ProviderHosts, error) {
	var out wire.ProviderList
	if err := c.Do(ctx, http.MethodGet, "/api/v1/providers", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Providers, nil
}

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
	req.Header.Set("Accept", "text/plain")
	resp, err := c.httpClient().Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return decodeError(resp)
	}
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

// decode sends a request and decodes the JSON answer into a new T.
func decode[T any](c *Client, ctx context.Context, method, path string, q url.Values, body any) (*T, error) {
	var v T
	if err := c.Do(ctx, method, path, q, body, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// CreateWSTicket asks for a WebSocket ticket for a run and purpose.
func (c *Client) CreateWSTicket(ctx context.Context, runID, purpose string) (*wire.WSTicket, error) {
	var out wire.WSTicket
	if err := c.Do(ctx, http.MethodPost, "/api/v1/ws-tickets", nil, wire.CreateWSTicket{RunID: runID, Purpose: purpose}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RevokeLease takes the attach lease of a run away from its holder.
func (c *Client) RevokeLease(ctx context.Context, runID string) error {
	return c.Do(ctx, http.MethodDelete, "/api/v1/runs/"+url.PathEscape(runID)+"/lease", nil, nil, nil)
}

// TerminalURL is the ws:// or wss:// URL of a run's terminal socket
// (kind "pane" or "attach"), with q as its query.
func (c *Client) TerminalURL(runID, kind string, q url.Values) string {
	u := c.BaseURL + "/api/v1/runs/" + url.PathEscape(runID) + "/" + kind + "/ws"
	switch {
	case strings.HasPrefix(u, "https://"):
		u = "wss://" + strings.TrimPrefix(u, "https://")
	case strings.HasPrefix(u, "http://"):
		u = "ws://" + strings.TrimPrefix(u, "http://")
	}
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// AuthHeader is the header that authenticates a WebSocket handshake of a
// non-browser client.
func (c *Client) AuthHeader() http.Header {
	return http.Header{"Authorization": {"Bearer " + c.Token}}
}

// HTTPClient is the client's HTTP client (with its CA bundle), for
// WebSocket dialers.
func (c *Client) HTTPClient() *http.Client { return c.httpClient() }

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
	req.Header.Set("Accept", "application/json")
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return "", decodeError(resp)
	}
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
	req.Header.Set("Accept", "text/x-diff")
	resp, err := c.httpClient().Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return "", decodeError(resp)
	}
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

// ListChannels lists the notification channels.
func (c *Client) ListChannels(ctx context.Context) ([]wire.Channel, error) {
	var out wire.ChannelList
	if err := c.Do(ctx, http.MethodGet, "/api/v1/notifications", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Channels, nil
}

// CreateChannel adds a notification channel; the answer holds its
// signing secret, which the server shows this once.
func (c *Client) CreateChannel(ctx context.Context, body wire.CreateChannel) (*wire.ChannelCreated, error) {
	return decode[wire.ChannelCreated](c, ctx, http.MethodPost, "/api/v1/notifications", nil, body)
}

// TestChannel queues a test message to a channel.
func (c *Client) TestChannel(ctx context.Context, id string) error {
	return c.Do(ctx, http.MethodPost, "/api/v1/notifications/"+url.PathEscape(id)+"/test", nil, nil, nil)
}

// ChannelDeliveries lists a channel's last 100 delivery attempts.
func (c *Client) ChannelDeliveries(ctx context.Context, id string) ([]wire.Delivery, error) {
	var out wire.DeliveryList
	if err := c.Do(ctx, http.MethodGet, "/api/v1/notifications/"+url.PathEscape(id)+"/deliveries", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Deliveries, nil
}

// DeleteChannel removes a notification channel.
func (c *Client) DeleteChannel(ctx context.Context, id string) error {
	return c.Do(ctx, http.MethodDelete, "/api/v1/notifications/"+url.PathEscape(id), nil, nil, nil)
}
