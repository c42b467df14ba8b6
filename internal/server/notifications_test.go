package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"pam/internal/eventually"
	"pam/internal/notify"
	"pam/internal/wire"
)

// hookReceiver is a webhook receiver that keeps every payload.
type hookReceiver struct {
	*httptest.Server
	mu  sync.Mutex
	got []wire.WebhookPayload
}

func newHookReceiver(t *testing.T) *hookReceiver {
	h := &hookReceiver{}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var p wire.WebhookPayload
		if err := json.Unmarshal(body, &p); err != nil {
			t.Errorf("webhook body %s: %v", body, err)
		}
		h.mu.Lock()
		h.got = append(h.got, p)
		h.mu.Unlock()
	}))
	t.Cleanup(h.Close)
	return h
}

// wait waits for the n-th payload (from 1) and returns it.
func (h *hookReceiver) wait(t *testing.T, n int) wire.WebhookPayload {
	t.Helper()
	var p wire.WebhookPayload
	eventually.Wait(t, 20*time.Second, "webhook payload", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		if len(h.got) >= n {
			p = h.got[n-1]
			return true
		}
		return false
	})
	return p
}

// startNotifier runs a notifier on e's store whose links point at e.
func (e *runEnv) startNotifier(t *testing.T) {
	n := notify.New(notify.Options{Store: e.store, PublicURL: e.url, Poll: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = n.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// The channel routes: add (the secret shown once), list, validation,
// test (202, then the attempt is listed), remove.
func TestNotificationChannelRoutes(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	e.startNotifier(t)
	hook := newHookReceiver(t)
	for field, body := range map[string]map[string]any{
		"url":    {"name": "x", "kind": "webhook", "url": "ftp://example.com/", "events": []string{"run.*"}},
		"kind":   {"name": "x", "kind": "email", "url": hook.URL, "events": []string{"run.*"}},
		"events": {"name": "x", "kind": "webhook", "url": hook.URL, "events": []string{}},
	} {
		code, out := e.call("POST", "/api/v1/notifications", body)
		if er := errorOf(t, out); code != 400 || er.Code != wire.CodeValidationFailed || er.Details["field"] != field {
			t.Fatalf("bad %s: %d %s", field, code, out)
		}
	}
	var created wire.ChannelCreated
	e.must(201, "POST", "/api/v1/notifications", map[string]any{"name": "phone", "kind": "webhook", "url": hook.URL, "events": []string{"run.attention"}}, &created)
	if len(created.Secret) != 64 || created.Channel.Name != "phone" || created.Channel.ProjectID != nil {
		t.Fatalf("created %+v", created)
	}
	if code, _ := e.call("POST", "/api/v1/notifications", map[string]any{"name": "phone", "kind": "slack", "url": hook.URL, "events": []string{"run.*"}}); code != 409 {
		t.Fatalf("a taken name: %d", code)
	}
	var list wire.ChannelList
	e.must(200, "GET", "/api/v1/notifications", nil, &list)
	if len(list.Channels) != 1 || list.Channels[0].ID != created.Channel.ID {
		t.Fatalf("list %+v", list)
	}
	e.must(202, "POST", "/api/v1/notifications/"+created.Channel.ID+"/test", nil, nil)
	if p := hook.wait(t, 1); p.Event.Topic != "notification.test" {
		t.Fatalf("test payload %+v", p)
	}
	var ds wire.DeliveryList
	eventually.Wait(t, eventually.Medium, "the test attempt recorded", func() bool {
		e.must(200, "GET", "/api/v1/notifications/"+created.Channel.ID+"/deliveries", nil, &ds)
		return len(ds.Deliveries) == 1 && ds.Deliveries[0].Status == wire.DeliveryDelivered
	})
	e.must(204, "DELETE", "/api/v1/notifications/"+created.Channel.ID, nil, nil)
	if code, _ := e.call("GET", "/api/v1/notifications/"+created.Channel.ID+"/deliveries", nil); code != 404 {
		t.Fatalf("deliveries of a removed channel: %d", code)
	}
}

// answer posts an answer URL without any token.
func (e *runEnv) answer(url string) (int, []byte) {
	e.t.Helper()
	if !strings.HasPrefix(url, e.url+"/api/v1/answers/") {
		e.t.Fatalf("answer_url %q is not under PAM_PUBLIC_URL %s", url, e.url)
	}
	return e.callAs("", "POST", strings.TrimPrefix(url, e.url), nil)
}

func expectGone(t *testing.T, what string, code int, body []byte) {
	t.Helper()
	if er := errorOf(t, body); code != http.StatusGone || er.Code != wire.CodeAnswerExpired {
		t.Fatalf("%s: %d %s, want 410 answer_expired", what, code, body)
	}
}

// Answer from the notification: a webhook gets a question with its
// choices and one answer URL each; POSTing one (no bearer token) presses
// that key in the run, and the answer that lands clears the question,
// journaled with source answer and the channel as actor. The same URL
// again, an expired one and one of a question no longer asked are 410.
func TestAnswerFromTheNotification(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	e.startNotifier(t)
	hook := newHookReceiver(t)
	e.must(201, "POST", "/api/v1/notifications", map[string]any{"name": "phone", "kind": "webhook", "url": hook.URL, "events": []string{"run.attention"}}, nil)
	w := e.worker("host-a", 4, "shell")
	r, d := e.attendedRun(w)
	yn := []wire.Choice{{Key: "y", Label: "Yes"}, {Key: "n", Label: "No"}}

	w.snapshot(d, "Continue? (y/n) ")
	w.screen(d, 1, wire.AttentionNeedsInput, "Continue? (y/n)", yn...)
	p := hook.wait(t, 1)
	if p.Run == nil || p.Run.ID != r.ID || p.Link == nil || *p.Link != e.url+"/runs/"+r.ID || len(p.Answers) != 2 ||
		p.Answers[0].Key != "y" || p.Answers[0].Label != "Yes" || p.Answers[1].Key != "n" || !strings.Contains(p.Text, "Continue? (y/n)") {
		t.Fatalf("payload %+v", p)
	}
	if code, _ := e.callAs("", "POST", "/api/v1/runs/"+r.ID+"/keys", map[string]any{"keys": []map[string]any{{"key": "y"}}}); code != 401 {
		t.Fatalf("keys without a token: %d", code)
	}

	type result struct {
		code int
		body []byte
	}
	done := make(chan result, 1)
	go func() { c, b := e.answer(p.Answers[0].AnswerURL); done <- result{c, b} }()
	if f := w.expect(wire.FrameSendKeys); f.RunID != r.ID || len(f.Keys) != 1 || f.Keys[0].Key != "y" {
		t.Fatalf("send_keys %+v", f)
	}
	w.snapshot(d, "Continue? (y/n) y\nworking\n")
	res := <-done
	var kr wire.KeysResult
	if res.code != 202 || json.Unmarshal(res.body, &kr) != nil || kr.Delivery != wire.DeliveryObserved {
		t.Fatalf("answer: %d %s", res.code, res.body)
	}
	e.waitAttention(r.ID, wire.AttentionNone)
	var l wire.EventList
	e.must(200, "GET", "/api/v1/runs/"+r.ID+"/events", nil, &l)
	last := l.Events[len(l.Events)-1]
	if last.Topic != string(wire.TopicRunAttention) || last.Actor == nil || *last.Actor != "phone" || !strings.Contains(string(last.Payload), `"source":"answer"`) {
		t.Fatalf("the answer's event: %s actor %v %s", last.Topic, last.Actor, last.Payload)
	}
	code, body := e.answer(p.Answers[0].AnswerURL)
	expectGone(t, "the same URL again", code, body)
	code, body = e.answer(p.Answers[1].AnswerURL)
	expectGone(t, "the other choice of an answered question", code, body)

	// An hour later the link no longer holds.
	w.screen(d, 1, wire.AttentionNeedsInput, "Delete build/? (y/n)", yn...)
	p = hook.wait(t, 3) // 2 was the clearing
	if len(p.Answers) != 2 {
		t.Fatalf("second question %+v", p)
	}
	if _, err := e.store.Pool.Exec(context.Background(), `UPDATE answer_tokens SET expires_at = now() - interval '1 second' WHERE used_at IS NULL`); err != nil {
		t.Fatal(err)
	}
	code, body = e.answer(p.Answers[0].AnswerURL)
	expectGone(t, "an expired URL", code, body)

	// A question no longer asked.
	w.screen(d, 1, wire.AttentionNeedsInput, "Push now? (y/n)", yn...)
	p = hook.wait(t, 4)
	w.screen(d, 1, wire.AttentionNeedsInput, "Really push? (y/n)", yn...)
	e.waitRun(r.ID, "the next question", func(r wire.Run) bool {
		return r.AttentionDetail != nil && r.AttentionDetail.Text == "Really push? (y/n)"
	})
	code, body = e.answer(p.Answers[0].AnswerURL)
	expectGone(t, "another question's URL", code, body)
	code, body = e.answer(e.url + "/api/v1/answers/00112233445566778899aabbccddeeff")
	expectGone(t, "an unknown token", code, body)
	w.barrier()
	if got := e.run(r.ID); got.Attention != wire.AttentionNeedsInput {
		t.Fatalf("refused answers changed the run: %s", got.Attention)
	}
}

// On ntfy a question with choices carries one http action button per
// choice, each POSTing its answer URL; pressing one answers the run.
func TestAnswerButtonsOnNtfy(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	e.startNotifier(t)
	var mu sync.Mutex
	var headers []http.Header
	var bodies []string
	rc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		headers, bodies = append(headers, r.Header.Clone()), append(bodies, string(b))
		mu.Unlock()
	}))
	defer rc.Close()
	e.must(201, "POST", "/api/v1/notifications", map[string]any{"name": "ntfy-phone", "kind": "ntfy", "url": rc.URL + "/pam", "events": []string{"run.attention"}}, nil)
	w := e.worker("host-a", 4, "shell")
	r, d := e.attendedRun(w)
	w.snapshot(d, "Run make? (y/n) ")
	w.screen(d, 1, wire.AttentionNeedsInput, "Run make? (y/n)", wire.Choice{Key: "y", Label: "Yes, run it"}, wire.Choice{Key: "n", Label: "No"})
	var h http.Header
	var body string
	eventually.Wait(t, 20*time.Second, "the ntfy message", func() bool {
		mu.Lock()
		defer mu.Unlock()
		if len(headers) > 0 {
			h, body = headers[0], bodies[0]
			return true
		}
		return false
	})
	if h.Get("Title") != "pam: needs input" || h.Get("Click") != e.url+"/runs/"+r.ID || !strings.Contains(body, "Run make? (y/n)") {
		t.Fatalf("ntfy message %v %q", h, body)
	}
	actions := strings.Split(h.Get("Actions"), "; ")
	if len(actions) != 2 {
		t.Fatalf("Actions %q", h.Get("Actions"))
	}
	var urls []string
	for i, label := range []string{"Yes  run it", "No"} {
		f := strings.Split(actions[i], ", ")
		if len(f) != 5 || f[0] != "http" || f[1] != label || f[3] != "method=POST" || f[4] != "clear=true" {
			t.Fatalf("action %d: %q", i, actions[i])
		}
		urls = append(urls, f[2])
	}
	done := make(chan int, 1)
	go func() { c, _ := e.answer(urls[1]); done <- c }()
	if f := w.expect(wire.FrameSendKeys); len(f.Keys) != 1 || f.Keys[0].Key != "n" {
		t.Fatalf("send_keys %+v", f)
	}
	w.snapshot(d, "Run make? (y/n) n\n")
	if c := <-done; c != 202 {
		t.Fatalf("the button's POST: %d", c)
	}
}

// When the screen reports the question gone while an answer URL's key is
// being checked, the clearing is the answer's: source answer, the
// channel as actor (a real CLI redraws before the pane change is seen).
func TestAnswerLinkClearsWhenTheScreenDoes(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	e.startNotifier(t)
	hook := newHookReceiver(t)
	e.must(201, "POST", "/api/v1/notifications", map[string]any{"name": "pager", "kind": "webhook", "url": hook.URL, "events": []string{"run.attention"}}, nil)
	w := e.worker("host-a", 4, "shell")
	r, d := e.attendedRun(w)
	w.snapshot(d, "Proceed? (y/n) ")
	w.screen(d, 1, wire.AttentionNeedsInput, "Proceed? (y/n)", wire.Choice{Key: "y", Label: "Yes"}, wire.Choice{Key: "n", Label: "No"})
	p := hook.wait(t, 1)
	done := make(chan int, 1)
	go func() { c, _ := e.answer(p.Answers[0].AnswerURL); done <- c }()
	w.expect(wire.FrameSendKeys)
	w.screen(d, 1, wire.AttentionNone, "")
	w.snapshot(d, "Proceed? (y/n) y\n")
	if c := <-done; c != 202 {
		t.Fatalf("answer: %d", c)
	}
	e.waitAttention(r.ID, wire.AttentionNone)
	var l wire.EventList
	e.must(200, "GET", "/api/v1/runs/"+r.ID+"/events", nil, &l)
	var cleared []string
	for _, ev := range l.Events {
		if ev.Topic == string(wire.TopicRunAttention) && strings.Contains(string(ev.Payload), `"attention":"none"`) {
			actor := "<nil>"
			if ev.Actor != nil {
				actor = *ev.Actor
			}
			cleared = append(cleared, actor+" "+string(ev.Payload))
		}
	}
	if len(cleared) != 1 || !strings.HasPrefix(cleared[0], "pager ") || !strings.Contains(cleared[0], `"source":"answer"`) {
		t.Fatalf("clearing events %q", cleared)
	}
}

// An answer URL used while the run's host is not connected presses
// nothing (503) and stays usable: once the worker is back, the same URL
// answers.
func TestAnswerLinkKeptWhileTheHostIsAway(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	e.startNotifier(t)
	hook := newHookReceiver(t)
	e.must(201, "POST", "/api/v1/notifications", map[string]any{"name": "phone", "kind": "webhook", "url": hook.URL, "events": []string{"run.attention"}}, nil)
	w := e.worker("host-a", 4, "shell")
	r, d := e.attendedRun(w)
	w.snapshot(d, "Go? (y/n) ")
	w.screen(d, 1, wire.AttentionNeedsInput, "Go? (y/n)", wire.Choice{Key: "y", Label: "Yes"}, wire.Choice{Key: "n", Label: "No"})
	url := hook.wait(t, 1).Answers[0].AnswerURL
	w.ws.CloseNow()
	eventually.Wait(t, eventually.Medium, "the host disconnected", func() bool { return !e.fleet.Connected(w.hostID) })
	if code, body := e.answer(url); code != 503 {
		t.Fatalf("with the host away: %d %s", code, body)
	}
	w.reconnect()
	done := make(chan int, 1)
	go func() { c, _ := e.answer(url); done <- c }()
	if f := w.expect(wire.FrameSendKeys); f.RunID != r.ID || f.Keys[0].Key != "y" {
		t.Fatalf("send_keys %+v", f)
	}
	w.snapshot(d, "Go? (y/n) y\n")
	if c := <-done; c != 202 {
		t.Fatalf("the same URL with the host back: %d", c)
	}
}
