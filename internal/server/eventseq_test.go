package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"pam/internal/eventually"
	"pam/internal/journal"
	"pam/internal/server"
	"pam/internal/store/storetest"
	"pam/internal/wire"
)

// newStreamEnv is a server with the journal hub running, wired as pam
// serve wires them (the hub woken after each commit).
func newStreamEnv(t *testing.T) (*env, *server.Server, *journal.Hub) {
	t.Helper()
	st := storetest.New(t)
	hub := journal.NewHub(st, journal.Options{PollInterval: 50 * time.Millisecond})
	st.AfterCommit = hub.Wake
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = hub.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done }) // after the server's own cleanup
	srv := server.New(server.Options{Store: st, Token: testToken, Events: hub})
	ts := serve(t, srv)
	return &env{t: t, url: ts.URL, store: st}, srv, hub
}

// sseClient is one connection to GET /api/v1/events/stream.
type sseClient struct {
	t      *testing.T
	body   *bufio.Reader
	cancel context.CancelFunc
}

// sseEvent is one event of the stream.
type sseEvent struct {
	id    int64
	topic string
	ev    wire.Event
}

func (e *env) stream(t *testing.T, query, lastEventID string) *sseClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	req, err := http.NewRequestWithContext(ctx, "GET", e.url+"/api/v1/events/stream"+query, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		cancel()
		t.Fatalf("stream%s: %v %v", query, resp, err)
	}
	c := &sseClient{t: t, body: bufio.NewReader(resp.Body), cancel: cancel}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	return c
}

// next reads one event, skipping comments.
func (c *sseClient) next() sseEvent {
	c.t.Helper()
	var out sseEvent
	seen := false
	for {
		line, err := c.body.ReadString('\n')
		if err != nil {
			c.t.Fatalf("read the stream: %v", err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if seen {
				return out
			}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			out.id, _ = strconv.ParseInt(line[4:], 10, 64)
			seen = true
		case strings.HasPrefix(line, "event: "):
			out.topic, seen = line[7:], true
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(line[6:]), &out.ev); err != nil {
				c.t.Fatalf("data %q: %v", line, err)
			}
			seen = true
		}
	}
}

// eventSeq is the Pam-Event-Seq of a response, or -1 without one.
func eventSeq(t *testing.T, h http.Header) int64 {
	t.Helper()
	v := h.Get(wire.HeaderEventSeq)
	if v == "" {
		return -1
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		t.Fatalf("Pam-Event-Seq %q", v)
	}
	return n
}

// get sends a GET with the operator token and returns its status, its
// Pam-Event-Seq and its body.
func (e *env) get(t *testing.T, path string) (int, int64, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", e.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
	checkAgainstSpec(t, "GET", resp, []byte(b.String()))
	return resp.StatusCode, eventSeq(t, resp.Header), []byte(b.String())
}

// headSeq is the largest seq in the journal.
func (e *env) headSeq(t *testing.T) int64 {
	t.Helper()
	var n int64
	if err := e.store.Pool.QueryRow(t.Context(), `SELECT coalesce(max(seq), 0) FROM events`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPamEventSeqHeader (docs/api.md#server-sent-events): every REST GET
// answers with Pam-Event-Seq, a journal position no smaller than any
// event its answer shows; and a client that loads state and streams
// ?after=<it> misses nothing and sees nothing twice, while writers
// journal all along: every event up to the position is reflected in the
// read, and the stream carries exactly the events after it, in order,
// once each.
func TestPamEventSeqHeader(t *testing.T) {
	t.Parallel()
	e, srv, _ := newStreamEnv(t)
	p := e.project("Seq")
	item := e.item(p.Slug, "task", "T", nil)
	var run wire.Run
	e.must(202, "POST", "/api/v1/runs", map[string]any{"task_id": item.ID, "provider": "shell"}, &run)
	var host wire.HostCreated
	e.must(201, "POST", "/api/v1/hosts", map[string]any{"name": "seq-host"}, &host)

	fill := strings.NewReplacer("{ref}", "", "{id}", "")
	examples := map[string]string{
		"/projects/{ref}": "/projects/" + p.Slug, "/projects/{ref}/work-items": "/projects/" + p.Slug + "/work-items",
		"/work-items/{id}": "/work-items/" + item.ID, "/hosts/{ref}": "/hosts/seq-host",
	}
	reads := 0
	for _, pattern := range srv.Routes() {
		method, path, _ := strings.Cut(pattern, " ")
		rel, ok := strings.CutPrefix(path, "/api/v1")
		if method != "GET" || !ok || rel == "/events/stream" || strings.HasSuffix(rel, "/ws") {
			continue
		}
		url := examples[rel]
		if url == "" {
			url = strings.ReplaceAll(rel, "{id}", run.ID)
		}
		if strings.ContainsAny(fill.Replace(url), "{}") {
			t.Fatalf("no example for %s", rel)
		}
		head := e.headSeq(t)
		code, seq, body := e.get(t, "/api/v1"+url)
		if seq < head {
			t.Errorf("GET %s: %d, Pam-Event-Seq %d, want at least the journal's head %d (%s)", url, code, seq, head, body)
		}
		reads++
	}
	if reads < 12 {
		t.Fatalf("only %d REST reads found among the routes", reads)
	}
	// GET /events: the position covers every event it lists.
	_, seq, body := e.get(t, "/api/v1/events?after=0&limit=1000")
	var l wire.EventList
	if err := json.Unmarshal(body, &l); err != nil || len(l.Events) == 0 || l.Events[len(l.Events)-1].Seq > seq {
		t.Fatalf("GET /events listed up to %v with Pam-Event-Seq %d: %v", l.Events, seq, err)
	}

	// Load, then stream from the position, while four writers journal.
	const writers, perWriter = 4, 20
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				if code, out := e.call("POST", "/api/v1/projects", map[string]any{"name": fmt.Sprintf("w%d-%d", w, i)}); code != 201 {
					t.Errorf("create: %d %s", code, out)
					return
				}
			}
		})
	}
	type load struct {
		seq     int64
		visible map[string]bool
		stream  *sseClient
	}
	var loads []load
	for len(loads) < 8 {
		_, seq, body := e.get(t, "/api/v1/projects")
		var pl wire.ProjectList
		if err := json.Unmarshal(body, &pl); err != nil {
			t.Fatal(err)
		}
		visible := map[string]bool{}
		for _, p := range pl.Projects {
			visible[p.ID] = true
		}
		loads = append(loads, load{seq, visible, e.stream(t, "?topic=project.created&after="+strconv.FormatInt(seq, 10), "")})
		// A journal read lists up to its own position, never beyond.
		_, seq, body = e.get(t, "/api/v1/events?after=0&limit=1000")
		var evs wire.EventList
		if err := json.Unmarshal(body, &evs); err != nil {
			t.Fatal(err)
		}
		if n := len(evs.Events); n > 0 && evs.Events[n-1].Seq > seq {
			t.Errorf("GET /events listed up to %d with Pam-Event-Seq %d", evs.Events[n-1].Seq, seq)
		}
	}
	wg.Wait()
	created, err := e.store.EventsAfter(t.Context(), 0, e.headSeq(t), mustGlob(t, "project.created"), 1000)
	if err != nil || len(created) != 1+writers*perWriter {
		t.Fatalf("%d project.created events, %v", len(created), err)
	}
	for i, ld := range loads {
		var want []int64
		for _, ev := range created {
			if ev.Seq <= ld.seq {
				if !ld.visible[*ev.ProjectID] {
					t.Errorf("load %d at %d: project %s (event %d) is not in the read", i, ld.seq, *ev.ProjectID, ev.Seq)
				}
				continue
			}
			want = append(want, ev.Seq)
		}
		var got []int64
		for len(got) < len(want) {
			got = append(got, ld.stream.next().id)
		}
		if !slices.Equal(got, want) {
			t.Errorf("load %d at %d: the stream sent %v, want %v", i, ld.seq, got, want)
		}
	}
}

// TestSSEWithoutCursorIsLiveOnly (docs/api.md#server-sent-events): a
// stream opened without a cursor sends no history, only the events
// committed after it connected; its ids let a reconnect resume there.
func TestSSEWithoutCursorIsLiveOnly(t *testing.T) {
	t.Parallel()
	e, _, hub := newStreamEnv(t)
	for i := range 3 {
		e.project(fmt.Sprintf("before %d", i))
	}
	head := e.headSeq(t)
	st := e.stream(t, "", "")
	eventually.Wait(t, eventually.Medium, "the subscriber", func() bool { return hub.Subscribers() == 1 })
	live := e.project("live")
	got := st.next()
	if got.topic != "project.created" || got.id <= head || got.ev.ProjectID == nil || *got.ev.ProjectID != live.ID {
		t.Fatalf("first event %+v (journal head before it %d), want the creation of %s", got, head, live.ID)
	}
	// A reconnect from that id gets what followed, and nothing before.
	next := e.project("next")
	if again := e.stream(t, "", strconv.FormatInt(got.id, 10)).next(); again.ev.ProjectID == nil || *again.ev.ProjectID != next.ID {
		t.Fatalf("resumed with %+v, want the creation of %s", again, next.ID)
	}
}

// TestSSEAfterZeroIsWholeHistory: ?after=0 (or Last-Event-ID: 0) is a
// cursor — every retained event from the first, then live — not the
// absence of one.
func TestSSEAfterZeroIsWholeHistory(t *testing.T) {
	t.Parallel()
	e, _, _ := newStreamEnv(t)
	for i := range 3 {
		e.project(fmt.Sprintf("p%d", i))
	}
	for _, cursor := range []struct{ query, lastEventID string }{{"?after=0", ""}, {"", "0"}} {
		all, err := e.store.EventsAfter(t.Context(), 0, e.headSeq(t), nil, 1000)
		if err != nil || len(all) < 3 {
			t.Fatalf("journal %v %v", all, err)
		}
		st := e.stream(t, cursor.query, cursor.lastEventID)
		for _, want := range all {
			if got := st.next(); got.id != want.Seq || got.topic != want.Topic {
				t.Fatalf("got event %d %s, want %d %s", got.id, got.topic, want.Seq, want.Topic)
			}
		}
		live := e.project("after the history")
		if got := st.next(); got.ev.ProjectID == nil || *got.ev.ProjectID != live.ID {
			t.Fatalf("then %+v, want the creation of %s live", got, live.ID)
		}
	}
}
