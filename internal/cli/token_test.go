package cli

import (
	"regexp"
	"strings"
	"testing"

	"pam/internal/wire"
)

// TestTokenCommands against a real pam serve: the operator token is the
// admin token named admin; create prints the secret once (and --json
// holds it), list never shows a secret, the token works with its role,
// rotate refuses the old secret, revoke refuses it for good.
func TestTokenCommands(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	realServe(t, e)

	list := pamJSON[wire.TokenList](e, "token", "list")
	if len(list.Tokens) != 1 || list.Tokens[0].Name != "admin" || list.Tokens[0].Role != "admin" {
		t.Fatalf("tokens of a fresh serve: %+v", list.Tokens)
	}

	out := e.mustPam("token", "create", "dana", "--role", "viewer")
	secret := regexp.MustCompile(`(?m)^  ([0-9a-f]{32})$`).FindStringSubmatch(out)
	if secret == nil || !strings.Contains(out, "role viewer") || strings.Count(out, secret[1]) != 1 {
		t.Fatalf("create:\n%s", out)
	}
	table := e.mustPam("token", "list")
	if !strings.Contains(table, "dana") || !strings.Contains(table, "viewer") || strings.Contains(table, secret[1]) {
		t.Fatalf("list:\n%s", table)
	}

	// The viewer reads, and is refused what its role cannot do.
	e.mu.Lock()
	adminTok := e.vars["PAM_TOKEN"]
	e.mu.Unlock()
	e.setenv("PAM_TOKEN", secret[1])
	e.mustPam("project", "list")
	if r := e.pam("project", "create", "--name", "Nope"); r.code != 1 || !strings.Contains(r.stderr, "viewer") {
		t.Fatalf("viewer creates a project: %v", r)
	}
	if r := e.pam("token", "list"); r.code != 1 {
		t.Fatalf("viewer lists tokens: %v", r)
	}
	e.setenv("PAM_TOKEN", adminTok)

	rot := pamJSON[wire.TokenSecret](e, "token", "rotate", "dana")
	if rot.Secret == secret[1] || rot.Token.Name != "dana" {
		t.Fatalf("rotate: %+v", rot)
	}
	e.setenv("PAM_TOKEN", secret[1])
	if r := e.pam("project", "list"); r.code != 1 {
		t.Fatalf("old secret after rotate: %v", r)
	}
	e.setenv("PAM_TOKEN", rot.Secret)
	e.mustPam("project", "list")
	e.setenv("PAM_TOKEN", adminTok)

	if out := e.mustPam("token", "revoke", "dana"); !strings.Contains(out, "revoked token dana") {
		t.Fatalf("revoke: %s", out)
	}
	e.setenv("PAM_TOKEN", rot.Secret)
	if r := e.pam("project", "list"); r.code != 1 {
		t.Fatalf("revoked secret: %v", r)
	}
	e.setenv("PAM_TOKEN", adminTok)
	if r := e.pam("token", "revoke", "dana"); r.code != 1 {
		t.Fatalf("revoke twice: %v", r)
	}
	if r := e.pam("token", "create", "x", "--role", "root"); r.code != 2 {
		t.Fatalf("--role root: %v", r)
	}
}
