package e2e

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"pam/internal/cli"
	"pam/internal/pamtest"
	"pam/internal/serve"
	"pam/internal/store/storetest"
)

// movableClock is the clock of serve's continue duty in a test: real
// time moved forward by what the test says, so that a usage limit that
// resets in hours resets now.
type movableClock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *movableClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// moveTo moves the clock forward so that it reads at least t.
func (c *movableClock) moveTo(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := time.Until(t); d > c.offset {
		c.offset = d
	}
}

// newClockSystem runs `pam serve` in the test's own process (the same
// command line, with its settings from extraEnv as newFaultSystem's
// serve has them), on a fresh database, with the continue duty's clock
// the returned one and its pass every 500 ms. Everything else — the
// workers, the CLIs — runs as processes as elsewhere.
func newClockSystem(t *testing.T, extraEnv ...string) (*system, *movableClock) {
	t.Helper()
	pamtest.Require(t, "tmux")
	clock := &movableClock{}
	env := append([]string{"PAM_DATA_DIR=" + pamtest.ShortDir(t, "pams-"), "PAM_DATABASE_URL=" + storetest.URL(t),
		"PAM_BIND=127.0.0.1", "PAM_PORT=0", "PAM_LOG_LEVEL=debug",
		"PAM_DISPATCH_ACK_TIMEOUT=5s", "PAM_RESTART_INITIAL_DELAY=100ms", "PAM_RESTART_MAX_DELAY=500ms"}, extraEnv...)
	type listening struct{ url, token string }
	ready := make(chan listening, 1)
	e := cli.Env{Environ: env, Serve: func(ctx context.Context, o serve.Options) error {
		o.Clock, o.ContinueTick = clock.now, 500*time.Millisecond
		o.Ready = func(url, token string) { ready <- listening{url, token} }
		return serve.Run(ctx, o)
	}}
	ctx, cancel := context.WithCancel(context.Background())
	var out, errs pamtest.Buffer
	done := make(chan int, 1)
	go func() { done <- e.Main(ctx, []string{"serve"}, &out, &errs) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pam serve (in process) log, last lines:\n%s", lastLines(errs.String(), 200))
		}
		cancel()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Errorf("pam serve (in process) did not stop within 60s")
		}
	})
	select {
	case l := <-ready:
		return &system{t: t, url: l.url, token: l.token}, clock
	case code := <-done:
		t.Fatalf("pam serve (in process) exited %d before listening: %s", code, lastLines(errs.String(), 20))
	case <-time.After(pamtest.ListenTimeout):
		t.Fatalf("pam serve (in process) did not listen within %s: %s", pamtest.ListenTimeout, lastLines(errs.String(), 20))
	}
	return nil, nil
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
