package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"pam/internal/serve"
	"pam/internal/store/storetest"
	"pam/internal/worker"
)

// TestMain fails the package when a goroutine outlives its tests: the
// commands that run loops (serve, up, worker, watch) must wait for them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(storetest.M(m)) }

const testToken = "0123456789abcdef0123456789abcdef"

// testEnv is one test's process environment: its own variables (none of
// the developer's), data dir, stdin and the services commands would
// start. Commands run through it in-process and side by side with other
// tests' (Env.Main), so tests may be parallel.
type testEnv struct {
	t   *testing.T
	dir string // PAM_DATA_DIR

	mu     sync.Mutex
	vars   map[string]string
	stdin  io.Reader
	serve  func(context.Context, serve.Options) error
	worker func(context.Context, worker.Options) error
	// reconnectMin is the first reconnect delay of events --follow.
	reconnectMin time.Duration
}

// isolate returns a fresh environment: no PAM_* variable but
// PAM_DATA_DIR, a fresh folder under a fresh HOME, and an empty stdin.
func isolate(t *testing.T) *testEnv {
	t.Helper()
	home := t.TempDir()
	dir := filepath.Join(home, "data")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return &testEnv{t: t, dir: dir, stdin: strings.NewReader(""), vars: map[string]string{
		"HOME": home, "PAM_DATA_DIR": dir, "PATH": os.Getenv("PATH"),
	}}
}

// setenv sets a variable of this environment; "" counts as unset for
// the settings, as in the process.
func (e *testEnv) setenv(k, v string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.vars[k] = v
}

// env is the Env a command runs in now.
func (e *testEnv) env() Env {
	e.mu.Lock()
	defer e.mu.Unlock()
	environ := []string{}
	for k, v := range e.vars {
		environ = append(environ, k+"="+v)
	}
	return Env{Environ: environ, Stdin: e.stdin, Serve: e.serve, Worker: e.worker, ReconnectMin: e.reconnectMin}
}

// pam runs the command line in-process.
func (e *testEnv) pam(args ...string) result {
	e.t.Helper()
	return e.pamCtx(e.t.Context(), args...)
}

func (e *testEnv) pamCtx(ctx context.Context, args ...string) result {
	var out, errb bytes.Buffer
	code := e.env().Main(ctx, args, &out, &errb)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// mustPam runs a command that must succeed and returns its stdout.
func (e *testEnv) mustPam(args ...string) string {
	e.t.Helper()
	r := e.pam(args...)
	if r.code != 0 {
		e.t.Fatalf("pam %s: %v", strings.Join(args, " "), r)
	}
	return r.stdout
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
