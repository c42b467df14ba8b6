package store_test

import (
	"strings"
	"testing"

	"pam/internal/store"
	"pam/internal/store/storetest"
	"pam/internal/wire"
)

func TestHostByToken(t *testing.T) {
	t.Parallel()
	s := storetest.New(t)
	ctx := t.Context()
	a, err := s.CreateHost(ctx, wire.CreateHost{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.CreateHost(ctx, wire.CreateHost{Name: "b"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		token string
		want  string // host id, "" = not found
	}{
		{a.WorkerToken, a.Host.ID},
		{b.WorkerToken, b.Host.ID},
		{strings.ToUpper(a.WorkerToken), ""},
		{a.WorkerToken[:63] + "x", ""},
		{strings.Repeat("0", 64), ""},
		{a.WorkerToken[:32], ""},
		{"", ""},
		{a.WorkerToken + "00", ""},
	} {
		h, err := s.HostByToken(ctx, c.token)
		switch {
		case c.want == "" && !wire.HasCode(err, wire.CodeNotFound):
			t.Errorf("token %q: %+v %v, want not_found", c.token, h, err)
		case c.want != "" && (err != nil || h.ID != c.want):
			t.Errorf("token %q: %+v %v, want host %s", c.token, h, err, c.want)
		}
	}

	rot, err := s.RotateToken(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.HostByToken(ctx, a.WorkerToken); !wire.HasCode(err, wire.CodeNotFound) {
		t.Errorf("the rotated-out token still finds a host: %v", err)
	}
	if h, err := s.HostByToken(ctx, rot.WorkerToken); err != nil || h.ID != a.Host.ID {
		t.Errorf("new token: %+v %v", h, err)
	}
	if h, err := s.HostByToken(ctx, b.WorkerToken); err != nil || h.ID != b.Host.ID {
		t.Errorf("another host's token after a rotation: %+v %v", h, err)
	}

	if err := s.DeleteHost(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.HostByToken(ctx, b.WorkerToken); !wire.HasCode(err, wire.CodeNotFound) {
		t.Errorf("a removed host's token still works: %v", err)
	}
}

// The stored hash is the SHA-256 of the token text, so that the worker
// side and any tooling agree on it.
func TestWorkerTokenHash(t *testing.T) {
	tok, hash, err := store.NewWorkerToken()
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) != 64 || strings.Trim(tok, "0123456789abcdef") != "" {
		t.Fatalf("token %q", tok)
	}
	if string(hash) != string(store.HashWorkerToken(tok)) || len(hash) != 32 {
		t.Fatalf("hash %x", hash)
	}
	tok2, _, _ := store.NewWorkerToken()
	if tok2 == tok {
		t.Fatal("two tokens alike")
	}
}
