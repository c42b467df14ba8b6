package apiclient

import (
	"pam/internal/wire"

	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

type sseEvent struct {
	Name, ID, Data string
}

func TestReadSSE(t *testing.T) {
	tests := []struct {
		name  string
		input string
		want  []sseEvent
	}{
		{
			name:  "one event",
			input: "id: 7\nevent: run.started\ndata: {\"seq\":7}\n\n",
			want:  []sseEvent{{"run.started", "7", `{"seq":7}`}},
		},
		{
			name:  "multi-line data joins with newline",
			input: "event: x\ndata: line one\ndata: line two\ndata:\n\n",
			want:  []sseEvent{{"x", "", "line one\nline two\n"}},
		},
		{
			name:  "comments are ignored, also between fields",
			input: ": keepalive\n\nid: 1\n: hello\ndata: a\n\n:another\n",
			want:  []sseEvent{{"message", "1", "a"}},
		},
		{
			name:  "id persists until changed",
			input: "id: 5\ndata: a\n\ndata: b\n\nid: 6\ndata: c\n\n",
			want:  []sseEvent{{"message", "5", "a"}, {"message", "5", "b"}, {"message", "6", "c"}},
		},
		{
			name:  "event name resets after dispatch",
			input: "event: snapshot\ndata: {}\n\ndata: plain\n\n",
			want:  []sseEvent{{"snapshot", "", "{}"}, {"message", "", "plain"}},
		},
		{
			name:  "CRLF and lone CR line endings",
			input: "id: 9\r\nevent: a\r\ndata: x\r\n\r\nevent: b\rdata: y\r\r",
			want:  []sseEvent{{"a", "9", "x"}, {"b", "9", "y"}},
		},
		{
			name:  "no space after colon and only one space stripped",
			input: "data:tight\ndata:  two spaces\n\n",
			want:  []sseEvent{{"message", "", "tight\n two spaces"}},
		},
		{
			name:  "event without data is not dispatched",
			input: "event: nothing\nid: 3\n\ndata: after\n\n",
			want:  []sseEvent{{"message", "3", "after"}},
		},
		{
			name:  "unterminated last event is dropped",
			input: "data: complete\n\ndata: cut off",
			want:  []sseEvent{{"message", "", "complete"}},
		},
		{
			name:  "unknown fields and retry are ignored",
			input: "retry: 1000\nfoo: bar\nfield-without-colon\ndata: d\n\n",
			want:  []sseEvent{{"message", "", "d"}},
		},
		{
			name:  "leading BOM is skipped",
			input: "\xEF\xBB\xBFdata: bom\n\n",
			want:  []sseEvent{{"message", "", "bom"}},
		},
		{
			name:  "data containing colons",
			input: "data: {\"a\":\"b:c\"}\n\n",
			want:  []sseEvent{{"message", "", `{"a":"b:c"}`}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []sseEvent
			err := readSSE(strings.NewReader(tt.input), func(name, id string, data []byte) error {
				got = append(got, sseEvent{name, id, string(data)})
				return nil
			})
			if err != nil {
				t.Fatalf("readSSE: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestReadSSECallbackErrorStops(t *testing.T) {
	stop := errors.New("stop")
	n := 0
	err := readSSE(strings.NewReader("data: 1\n\ndata: 2\n\n"), func(string, string, []byte) error {
		n++
		return stop
	})
	if !errors.Is(err, stop) || n != 1 {
		t.Fatalf("err %v after %d events, want stop after 1", err, n)
	}
}

func FuzzReadSSE(f *testing.F) {
	f.Add("id: 1\nevent: a\ndata: x\n\n")
	f.Add(": c\r\ndata:\r\r\n")
	f.Fuzz(func(t *testing.T, s string) {
		_ = readSSE(strings.NewReader(s), func(name, id string, data []byte) error {
			if strings.ContainsAny(name, "\r\n") || strings.ContainsAny(id, "\r\n\x00") {
				t.Fatalf("name %q or id %q holds a line break", name, id)
			}
			return nil
		})
	})
}

func TestErrorDecoding(t *testing.T) {
	tests := []struct {
		name        string
		status      int
		contentType string
		body        string
		want        *wire.Error
	}{
		{
			name: "envelope", status: 404, contentType: "application/json",
			body: `{"error":{"code":"not_found","message":"project \"x\" not found","details":null}}`,
			want: &wire.Error{Status: 404, Code: "not_found", Message: `project "x" not found`},
		},
		{
			name: "envelope with details", status: 400, contentType: "application/json",
			body: `{"error":{"code":"validation_failed","message":"name too long","details":{"field":"name"}}}`,
			want: &wire.Error{Status: 400, Code: "validation_failed", Message: "name too long", Details: map[string]any{"field": "name"}},
		},
		{
			name: "proxy HTML page", status: 502, contentType: "text/html",
			body: "<html>bad gateway</html>",
			want: &wire.Error{Status: 502, Code: wire.CodeInternal, Message: "Bad Gateway", Details: map[string]any{"body": "<html>bad gateway</html>"}},
		},
		{
			name: "empty body", status: 503,
			want: &wire.Error{Status: 503, Code: wire.CodeInternal, Message: "Service Unavailable"},
		},
		{
			name: "JSON that is not an envelope", status: 500, contentType: "application/json",
			body: `{"oops":true}`,
			want: &wire.Error{Status: 500, Code: wire.CodeInternal, Message: "Internal Server Error", Details: map[string]any{"body": `{"oops":true}`}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.contentType != "" {
					w.Header().Set("Content-Type", tt.contentType)
				}
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			}))
			defer srv.Close()
			c, err := New(srv.URL, "tok", "")
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.GetProject(t.Context(), "x")
			got, ok := wire.AsError(err)
			if !ok {
				t.Fatalf("error %v (%T) is not a *wire.Error", err, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

// recorder is a fake API: it remembers each request and answers from a
// table keyed by "METHOD path".
type recorder struct {
	t       *testing.T
	answers map[string]string
	got     []string // "METHOD escaped-path?query body"
	auth    []string
}

func (rc *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	line := r.Method + " " + r.URL.EscapedPath()
	if r.URL.RawQuery != "" {
		line += "?" + r.URL.RawQuery
	}
	if len(b) > 0 {
		line += " " + string(b)
	}
	rc.got = append(rc.got, line)
	rc.auth = append(rc.auth, r.Header.Get("Authorization"))
	ans, ok := rc.answers[r.Method+" "+r.URL.Path]
	if !ok {
		w.WriteHeader(404)
		io.WriteString(w, `{"error":{"code":"not_found","message":"no route","details":null}}`)
		return
	}
	if ans == "" {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, ans)
}

func TestClientRoutes(t *testing.T) {
	project := `{"id":"p1","name":"N","slug":"n","description":"","status":"active","auto_done":true,"created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}`
	item := `{"id":"w1","project_id":"p1","parent_id":null,"kind":"task","title":"T","body":"","status":"todo","path":"w1","position":0,"created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}`
	rc := &recorder{t: t, answers: map[string]string{
		"GET /healthz":                              `{"status":"ok"}`,
		"GET /api/v1/projects":                      `{"projects":[` + project + `]}`,
		"POST /api/v1/projects":                     project,
		"GET /api/v1/projects/a/b":                  project,
		"PATCH /api/v1/projects/n":                  project,
		"DELETE /api/v1/projects/n":                 project,
		"GET /api/v1/projects/n/work-items":         `{"work_items":[` + item + `]}`,
		"POST /api/v1/projects/n/work-items":        item,
		"GET /api/v1/work-items/w1":                 item,
		"PATCH /api/v1/work-items/w1":               item,
		"DELETE /api/v1/work-items/w1":              "",
		"GET /api/v1/events":                        `{"events":[{"seq":3,"topic":"project.created","run_id":null,"project_id":"p1","host_id":null,"actor":null,"payload":{},"created_at":"2026-01-01T00:00:00Z"}]}`,
		"GET /api/internal/runs/r1/work-items":      `{"work_items":[` + item + `]}`,
		"POST /api/internal/runs/r1/work-items":     item,
		"GET /api/internal/runs/r1/work-items/w1":   item,
		"PATCH /api/internal/runs/r1/work-items/w1": item,
		"POST /api/internal/runs/r1/progress":       `{"result":"applied"}`,
	}}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	c, err := New(srv.URL+"/", "secret", "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	str := func(s string) *string { return &s }
	no := false
	pos := 2

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	h, err := c.Health(ctx)
	must(err)
	if h.Status != "ok" {
		t.Errorf("health %q", h.Status)
	}
	ps, err := c.ListProjects(ctx, true)
	must(err)
	if len(ps) != 1 || ps[0].Slug != "n" {
		t.Errorf("projects %+v", ps)
	}
	_, err = c.ListProjects(ctx, false)
	must(err)
	_, err = c.CreateProject(ctx, wire.CreateProject{Name: "N", AutoDone: &no})
	must(err)
	_, err = c.GetProject(ctx, "a/b")
	must(err)
	_, err = c.UpdateProject(ctx, "n", wire.UpdateProject{Description: str("d")})
	must(err)
	_, err = c.ArchiveProject(ctx, "n")
	must(err)
	items, err := c.ListWorkItems(ctx, "n", WorkItemFilter{Status: "todo", Kind: "task"})
	must(err)
	if len(items) != 1 || items[0].ParentID != nil {
		t.Errorf("items %+v", items)
	}
	_, err = c.CreateWorkItem(ctx, "n", wire.CreateWorkItem{Kind: "task", Title: "T", ParentID: str("m1")})
	must(err)
	_, err = c.GetWorkItem(ctx, "w1")
	must(err)
	_, err = c.UpdateWorkItem(ctx, "w1", wire.UpdateWorkItem{ParentID: wire.Optional{Set: true}})
	must(err)
	_, err = c.UpdateWorkItem(ctx, "w1", wire.UpdateWorkItem{Position: &pos})
	must(err)
	must(c.DeleteWorkItem(ctx, "w1"))
	evs, err := c.ListEvents(ctx, 2, "project.*", 10)
	must(err)
	if len(evs) != 1 || evs[0].Seq != 3 || string(evs[0].Payload) != "{}" {
		t.Errorf("events %+v", evs)
	}
	items, err = c.AgentWorkItems(ctx, "r1", "doing")
	must(err)
	if len(items) != 1 || items[0].ID != "w1" {
		t.Errorf("agent items %+v", items)
	}
	_, err = c.AgentWorkItems(ctx, "r1", "")
	must(err)
	_, err = c.AgentCreateWorkItem(ctx, "r1", wire.AgentCreateWorkItem{Title: "T"})
	must(err)
	_, err = c.AgentCreateWorkItem(ctx, "r1", wire.AgentCreateWorkItem{Title: "T", Kind: str("epic"), ParentID: wire.Optional{Set: true}})
	must(err)
	_, err = c.AgentWorkItem(ctx, "r1", "w1")
	must(err)
	_, err = c.AgentUpdateWorkItem(ctx, "r1", "w1", wire.AgentUpdateWorkItem{Status: str("done")})
	must(err)
	must(c.AgentProgress(ctx, "r1", "half"))

	want := []string{
		"GET /healthz",
		"GET /api/v1/projects?include_archived=true",
		"GET /api/v1/projects",
		`POST /api/v1/projects {"name":"N","auto_done":false}`,
		"GET /api/v1/projects/a%2Fb",
		`PATCH /api/v1/projects/n {"description":"d"}`,
		"DELETE /api/v1/projects/n",
		"GET /api/v1/projects/n/work-items?kind=task&status=todo",
		`POST /api/v1/projects/n/work-items {"kind":"task","title":"T","parent_id":"m1"}`,
		"GET /api/v1/work-items/w1",
		`PATCH /api/v1/work-items/w1 {"parent_id":null}`,
		`PATCH /api/v1/work-items/w1 {"position":2}`,
		"DELETE /api/v1/work-items/w1",
		"GET /api/v1/events?after=2&limit=10&topic=project.%2A",
		"GET /api/internal/runs/r1/work-items?status=doing",
		"GET /api/internal/runs/r1/work-items",
		`POST /api/internal/runs/r1/work-items {"title":"T"}`,
		`POST /api/internal/runs/r1/work-items {"title":"T","kind":"epic","parent_id":null}`,
		"GET /api/internal/runs/r1/work-items/w1",
		`PATCH /api/internal/runs/r1/work-items/w1 {"status":"done"}`,
		`POST /api/internal/runs/r1/progress {"text":"half"}`,
	}
	if !reflect.DeepEqual(rc.got, want) {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(rc.got, "\n"), strings.Join(want, "\n"))
	}
	for i, a := range rc.auth {
		if a != "Bearer secret" {
			t.Errorf("request %d: Authorization %q", i, a)
		}
	}
}

func TestStreamEvents(t *testing.T) {
	var gotLastID, gotQuery string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/events/stream" || r.Header.Get("Accept") != "text/event-stream" {
			t.Errorf("request %s %s, Accept %q", r.Method, r.URL, r.Header.Get("Accept"))
		}
		gotLastID, gotQuery = r.Header.Get("Last-Event-ID"), r.URL.RawQuery
		w.Header().Set("Content-Type", "text/event-stream")
		for i := int64(5); i <= 6; i++ {
			ev := wire.Event{Seq: i, Topic: "run.started", Payload: json.RawMessage(`{"run_id":"r"}`), CreatedAt: time.Unix(0, 0).UTC()}
			b, _ := json.Marshal(ev)
			fmt.Fprintf(w, ": ping\nid: %d\nevent: %s\ndata: %s\n\n", ev.Seq, ev.Topic, b)
		}
	}))
	defer srv.Close()
	c, _ := New(srv.URL, "t", "")
	var ids []string
	err := c.StreamEvents(t.Context(), 4, "run.*", func(name, id string, data []byte) error {
		var ev wire.Event
		if err := json.Unmarshal(data, &ev); err != nil {
			t.Errorf("data %q: %v", data, err)
		}
		if name != ev.Topic || id != fmt.Sprint(ev.Seq) {
			t.Errorf("name %q id %q for event %+v", name, id, ev)
		}
		ids = append(ids, id)
		return nil
	})
	if err != nil {
		t.Fatalf("StreamEvents: %v (want nil when the server closes the stream)", err)
	}
	if !reflect.DeepEqual(ids, []string{"5", "6"}) {
		t.Errorf("ids %v", ids)
	}
	if gotLastID != "4" || gotQuery != "after=4&topic=run.%2A" {
		t.Errorf("Last-Event-ID %q, query %q", gotLastID, gotQuery)
	}
}

// The server streams live only without a cursor (docs/api.md#server-sent-events):
// after 0 must still ask for the whole history, as ?after=0, and a
// negative after sends no cursor at all.
func TestStreamEventsCursor(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Last-Event-ID")+"|"+r.URL.RawQuery)
		w.Header().Set("Content-Type", "text/event-stream")
	}))
	defer srv.Close()
	c, _ := New(srv.URL, "t", "")
	for _, after := range []int64{0, -1, 7} {
		if err := c.StreamEvents(t.Context(), after, "", func(string, string, []byte) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if want := []string{"|after=0", "|", "7|after=7"}; !reflect.DeepEqual(got, want) {
		t.Errorf("requests %q, want %q", got, want)
	}
}

func TestStreamEventsEndsWithContext(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "id: 1\ndata: {}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	c, _ := New(srv.URL, "t", "")
	ctx, cancel := context.WithCancel(t.Context())
	err := c.StreamEvents(ctx, 0, "", func(name, id string, data []byte) error {
		cancel()
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
}

func TestStreamEventsRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(401)
		io.WriteString(w, `{"error":{"code":"unauthorized","message":"bad token","details":null}}`)
	}))
	defer srv.Close()
	c, _ := New(srv.URL, "t", "")
	err := c.StreamEvents(t.Context(), 0, "", func(string, string, []byte) error { return nil })
	if !wire.HasCode(err, wire.CodeUnauthorized) {
		t.Fatalf("err %v, want unauthorized", err)
	}
	if e, _ := wire.AsError(err); e.Status != 401 {
		t.Errorf("status %d", e.Status)
	}
}

func TestNewValidates(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:7898", "ftp://x", "http://"} {
		if _, err := New(u, "", ""); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
	if _, err := New("http://x", "", "/nonexistent/ca.pem"); err == nil {
		t.Error("missing CA file accepted")
	}
	bad := t.TempDir() + "/ca.pem"
	if err := writeFile(bad, "not a certificate"); err != nil {
		t.Fatal(err)
	}
	if _, err := New("http://x", "", bad); err == nil || !strings.Contains(err.Error(), "no PEM certificates") {
		t.Errorf("CA file without certificates: %v", err)
	}
}

func TestCAFileTrustsServer(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"status":"ok"}`)
	}))
	defer srv.Close()
	// Without the CA the server's certificate is refused.
	c, _ := New(srv.URL, "", "")
	if _, err := c.Health(t.Context()); err == nil {
		t.Fatal("untrusted certificate accepted")
	}
	ca := t.TempDir() + "/ca.pem"
	if err := writeFile(ca, string(pemCert(srv.Certificate().Raw))); err != nil {
		t.Fatal(err)
	}
	c, err := New(srv.URL, "", ca)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Health(t.Context()); err != nil {
		t.Fatalf("with PAM_CA_FILE: %v", err)
	}
}

func writeFile(path, s string) error { return os.WriteFile(path, []byte(s), 0o600) }

func pemCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
