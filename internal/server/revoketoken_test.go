package server_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"pam/internal/eventually"
	"pam/internal/journal"
	"pam/internal/server"
	"pam/internal/store/storetest"
	"pam/internal/wire"
)

// openStream opens GET /events/stream with secret and returns a channel
// closed when the stream ends (its body reaches EOF or an error).
func openStream(t *testing.T, url, secret string) <-chan struct{} {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", url+"/api/v1/events/stream", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream: %v %v", resp, err)
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
	}()
	return ended
}

// socketEnded returns a channel closed when c's reads fail (the server
// closed it), and the last frame read before.
func socketEnded(c *websocket.Conn) (<-chan struct{}, *[]byte) {
	ended := make(chan struct{})
	var last []byte
	go func() {
		defer close(ended)
		for {
			_, b, err := c.Read(context.Background())
			if err != nil {
				return
			}
			last = b
		}
	}()
	return ended, &last
}

func within(t *testing.T, what string, ch <-chan struct{}, from time.Time, d time.Duration) {
	t.Helper()
	select {
	case <-ch:
		if el := time.Since(from); el > d {
			t.Errorf("%s ended after %s, want within %s", what, el, d)
		}
	case <-time.After(d + 10*time.Second):
		t.Errorf("%s still open %s after the revocation", what, time.Since(from))
	}
}

// TestRevokeClosesStreamsAndSockets: revoking a token ends, within a
// second, its SSE stream, its pane WebSockets (by header and by ticket)
// and its attach socket (with token_revoked, the lease released with that
// reason); the lease and its audit name the token; a ticket issued to it
// before is refused after.
func TestRevokeClosesStreamsAndSockets(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{hub: true})
	w := e.worker("host-rev", 4, "shell")
	r := e.runningRun(w)
	var ts wire.TokenSecret
	e.must(201, "POST", "/api/v1/tokens", wire.CreateToken{Name: "alice", Role: wire.RoleOperator}, &ts)
	wsURL := "ws" + strings.TrimPrefix(e.url, "http") + "/api/v1/runs/" + r.ID
	hdr := &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + ts.Secret}}}

	stream := openStream(t, e.url, ts.Secret)
	pane, _, err := websocket.Dial(t.Context(), wsURL+"/pane/ws", hdr)
	if err != nil {
		t.Fatal(err)
	}
	defer pane.CloseNow()
	ticket := func() string {
		var tk wire.WSTicket
		code, body := e.callAs(ts.Secret, "POST", "/api/v1/ws-tickets", wire.CreateWSTicket{RunID: r.ID, Purpose: wire.PurposePane})
		if code != 201 || json.Unmarshal(body, &tk) != nil {
			t.Fatalf("ticket: %d %s", code, body)
		}
		return tk.Ticket
	}
	paneTk, _, err := websocket.Dial(t.Context(), wsURL+"/pane/ws?ticket="+ticket(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer paneTk.CloseNow()
	spare := ticket() // issued before the revocation, used after
	attach, _, err := websocket.Dial(t.Context(), wsURL+"/attach/ws", hdr)
	if err != nil {
		t.Fatal(err)
	}
	defer attach.CloseNow()
	attach.SetReadLimit(4 << 20)
	f, err := readTerm(t, attach, eventually.Short)
	if err != nil || f.Type != wire.WSLeaseAcquired {
		t.Fatalf("attach: %+v %v", f, err)
	}
	paneEnded, _ := socketEnded(pane)
	paneTkEnded, _ := socketEnded(paneTk)
	attachEnded, last := socketEnded(attach)

	from := time.Now()
	e.must(204, "DELETE", "/api/v1/tokens/"+ts.Token.ID, nil, nil)
	within(t, "the SSE stream", stream, from, time.Second)
	within(t, "the pane socket", paneEnded, from, time.Second)
	within(t, "the pane socket opened by ticket", paneTkEnded, from, time.Second)
	within(t, "the attach socket", attachEnded, from, time.Second)
	var final wire.TermFrame
	if err := json.Unmarshal(*last, &final); err != nil || final.Code != wire.CodeTokenRevoked {
		t.Errorf("attach socket's last frame %s, want error token_revoked", *last)
	}
	if _, resp, err := websocket.Dial(t.Context(), wsURL+"/pane/ws?ticket="+spare, nil); err == nil || resp == nil || resp.StatusCode != 401 {
		t.Errorf("a ticket of the revoked token: %v %v, want 401", resp, err)
	}

	acq := e.events(string(wire.TopicRunLeaseAcquired))
	var held struct {
		Holder wire.LeaseHolder `json:"holder"`
	}
	if len(acq) != 1 || acq[0].Actor == nil || *acq[0].Actor != "alice" || json.Unmarshal(acq[0].Payload, &held) != nil || held.Holder.Token != "alice" {
		t.Fatalf("run.lease_acquired %v", acq)
	}
	var rel []wire.Event
	eventually.Wait(t, eventually.Medium, "run.lease_released", func() bool {
		rel = e.events(string(wire.TopicRunLeaseReleased))
		return len(rel) == 1
	})
	var p struct {
		Reason string           `json:"reason"`
		Holder wire.LeaseHolder `json:"holder"`
	}
	if json.Unmarshal(rel[0].Payload, &p) != nil || p.Reason != "token_revoked" || p.Holder.Token != "alice" || rel[0].Actor == nil || *rel[0].Actor != "alice" {
		t.Fatalf("run.lease_released %s actor %v", rel[0].Payload, rel[0].Actor)
	}
}

// TestRotateReachesOtherServe: two serves of one database; a token
// rotated through one has its stream on the other ended within a second
// (the journal's token.revoked), and its old secret refused there.
func TestRotateReachesOtherServe(t *testing.T) {
	t.Parallel()
	st := storetest.New(t)
	serveOne := func() string {
		hub := journal.NewHub(st, journal.Options{PollInterval: 50 * time.Millisecond})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = hub.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		srv := server.New(server.Options{Store: st, Token: testToken, Events: hub,
			Logger: slog.New(slog.NewTextHandler(testLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		hub.Observe(srv.ObserveEvents)
		return serve(t, srv).URL
	}
	a := &env{t: t, url: serveOne(), store: st}
	b := &env{t: t, url: serveOne(), store: st}
	var ts wire.TokenSecret
	a.must(201, "POST", "/api/v1/tokens", wire.CreateToken{Name: "bob", Role: wire.RoleViewer}, &ts)
	if code, _ := b.callAs(ts.Secret, "GET", "/api/v1/projects", nil); code != 200 {
		t.Fatalf("bob on b: %d", code) // and b has it cached now
	}
	stream := openStream(t, b.url, ts.Secret)
	from := time.Now()
	var rot wire.TokenSecret
	a.must(200, "POST", "/api/v1/tokens/"+ts.Token.ID+"/rotate", nil, &rot)
	within(t, "the stream on the other serve", stream, from, time.Second)
	if code, _ := b.callAs(ts.Secret, "GET", "/api/v1/projects", nil); code != 401 {
		t.Fatalf("old secret on the other serve: %d, want 401", code)
	}
	if code, _ := b.callAs(rot.Secret, "GET", "/api/v1/projects", nil); code != 200 {
		t.Fatalf("new secret on the other serve: %d", code)
	}
}
