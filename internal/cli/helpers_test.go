package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"pam/internal/store/storetest"
)

// TestMain fails the package when a goroutine outlives its tests: the
// commands that run loops (serve, up, worker, watch) must wait for them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(storetest.M(m)) }

const testToken = "0123456789abcdef0123456789abcdef"

// isolate clears every PAM_* variable (an empty value counts as unset)
// and points HOME and the data dir at a fresh folder, so the developer's
// environment cannot leak into a test. It returns the data dir.
func isolate(t *testing.T) string {
	t.Helper()
	for _, s := range settings {
		t.Setenv(s.Env, "")
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("XDG_DATA_HOME", "")
	t.Setenv("XDG_CONFIG_HOME", "")
	dir := filepath.Join(home, "data")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PAM_DATA_DIR", dir)
	return dir
}

// writeToken puts an operator token file into dir.
func writeToken(t *testing.T, dir, tok string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// result is what one pam invocation produced.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// pam runs the command line in-process.
func pam(t *testing.T, args ...string) result {
	t.Helper()
	return pamCtx(context.Background(), args...)
}

func pamCtx(ctx context.Context, args ...string) result {
	var out, errb bytes.Buffer
	code := Main(ctx, args, &out, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// mustPam runs a command that must succeed and returns its stdout.
func mustPam(t *testing.T, args ...string) string {
	t.Helper()
	r := pam(t, args...)
	if r.code != 0 {
		t.Fatalf("pam %s: %v", strings.Join(args, " "), r)
	}
	return r.stdout
}

// syncBuffer is a bytes.Buffer safe for a command writing in one
// goroutine while the test reads in another.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
