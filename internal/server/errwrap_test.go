package server_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"

	"pam/internal/runs"
	"pam/internal/wire"
)

// TestWrappedRefusalsAnswerWithTheirCode: the store wraps its errors
// with what it was doing ("stop run …: …"); a refusal inside such a
// wrap still answers with its own status, code and message over HTTP —
// the wrapping is for the logs, never the client's envelope.
func TestWrappedRefusalsAnswerWithTheirCode(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	p := e.project("Wrapped refusals")
	e.must(200, "DELETE", "/api/v1/projects/"+p.Slug, nil, nil)

	for _, c := range []struct {
		name         string
		store        func() error
		method, path string
		body         any
		status       int
		code         string
	}{
		{
			name: "a run that does not exist",
			store: func() error {
				_, _, err := runs.New(e.store).StopRun(ctx, "00000000-0000-4000-8000-000000000000", false)
				return err
			},
			method: "POST", path: "/api/v1/runs/00000000-0000-4000-8000-000000000000/stop", body: map[string]any{},
			status: 404, code: wire.CodeNotFound,
		},
		{
			name: "an archived project",
			store: func() error {
				_, err := e.store.CreateWorkItem(ctx, p.Slug, wire.CreateWorkItem{Kind: "task", Title: "new"})
				return err
			},
			method: "POST", path: "/api/v1/projects/" + p.Slug + "/work-items", body: map[string]any{"kind": "task", "title": "new"},
			status: 409, code: wire.CodeProjectArchived,
		},
		{
			name: "a host that does not exist",
			store: func() error {
				_, err := e.store.DisableHost(ctx, uuid.Nil.String())
				return err
			},
			method: "POST", path: "/api/v1/hosts/" + uuid.Nil.String() + "/disable",
			status: 404, code: wire.CodeNotFound,
		},
	} {
		// The store's error is wrapped, and is the wire error inside.
		err := c.store()
		we, ok := wire.AsError(err)
		if !ok || we.Code != c.code {
			t.Fatalf("%s: store error %v, want a %s wire error", c.name, err, c.code)
		}
		if err.Error() == we.Error() {
			t.Fatalf("%s: the store's error is not wrapped (%v): this test checks nothing", c.name, err)
		}
		// Over HTTP: the refusal's status, code and message, without the
		// wrapping's words.
		status, body := e.call(c.method, c.path, c.body)
		got := errorOf(t, body)
		if status != c.status || got.Code != c.code {
			t.Errorf("%s: %d %s, want %d %s", c.name, status, body, c.status, c.code)
		}
		if got.Message != we.Message || strings.Contains(string(body), strings.TrimSuffix(err.Error(), we.Error())) {
			t.Errorf("%s: message %q, want %q (the wire error's own)", c.name, got.Message, we.Message)
		}
	}
}
