package serve_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"

	"pam/internal/pamtest"
	"pam/internal/store/storetest"
	"pam/internal/wire"
)

// TestAdminTokenAdoptedAndRotated: a database from before named tokens
// (an operator token in server_state, no api_tokens row) gets it as the
// admin token named admin at serve's start, its hash stored and never the
// secret; rotating admin rewrites the token file of the serve that did it
// and of the next serve that starts, and the old secret is refused.
func TestAdminTokenAdoptedAndRotated(t *testing.T) {
	t.Parallel()
	dbURL := storetest.URL(t)
	const mine = "00112233445566778899aabbccddeeff"
	db, err := pgx.Connect(t.Context(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(t.Context())
	if _, err := db.Exec(t.Context(), `UPDATE server_state SET operator_token = $1`, mine); err != nil {
		t.Fatal(err)
	}
	dir := dataDir(t)
	p := pamtest.StartServe(t, pamtest.ServeOptions{DataDir: dir, DatabaseURL: dbURL})
	var name, role string
	var hash []byte
	if err := db.QueryRow(t.Context(), `SELECT name, role, secret_hash FROM api_tokens`).Scan(&name, &role, &hash); err != nil {
		t.Fatalf("the adopted token: %v", err)
	}
	sum := sha256.Sum256([]byte(mine))
	if name != "admin" || role != "admin" || !bytes.Equal(hash, sum[:]) {
		t.Fatalf("adopted %s/%s, hash %x", name, role, hash)
	}
	code, body := get(t, p.URL+"/api/v1/tokens/self", mine)
	var self wire.Token
	if code != 200 || json.Unmarshal(body, &self) != nil || self.Name != "admin" || self.Role != "admin" {
		t.Fatalf("self: %d %s", code, body)
	}

	code, body = post(t, p.URL+"/api/v1/tokens/"+self.ID+"/rotate", mine, "")
	var rot wire.TokenSecret
	if code != 200 || json.Unmarshal(body, &rot) != nil {
		t.Fatalf("rotate: %d %s", code, body)
	}
	if tok := readToken(t, dir); tok != rot.Secret {
		t.Fatalf("token file after rotating admin: %q, want the new secret", tok)
	}
	if code, _ := get(t, p.URL+"/api/v1/projects", mine); code != 401 {
		t.Fatalf("old admin secret: %d, want 401", code)
	}
	p.Stop(syscall.SIGTERM, stopWait)
	if strings.Contains(p.Stderr.String(), rot.Secret) || strings.Contains(p.Stderr.String(), mine) {
		t.Fatal("a secret appears in serve's log")
	}
	p.Wait(stopWait)

	other := dataDir(t)
	q := pamtest.StartServe(t, pamtest.ServeOptions{DataDir: other, DatabaseURL: dbURL})
	if tok := readToken(t, other); tok != rot.Secret {
		t.Fatalf("token file of the next serve: %q, want the rotated secret", tok)
	}
	if code, _ := get(t, q.URL+"/api/v1/projects", rot.Secret); code != 200 {
		t.Fatalf("rotated admin secret on the next serve: %d", code)
	}
	var n int
	if err := db.QueryRow(t.Context(), `SELECT count(*) FROM api_tokens`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d api_tokens rows after a restart, want 1 (%v)", n, err)
	}
}
