package serve

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"pam/internal/eventually"
	"pam/internal/store"
	"pam/internal/store/storetest"
)

// These tests run serve in-process, so the race detector and goleak see
// its goroutines (the other tests of this package run the pam binary).
// They are not parallel: goleak.VerifyNone looks at the whole process.

// inProcess is one Run on an external database.
type inProcess struct {
	base   string
	cancel context.CancelFunc
	done   chan error
}

// runInProcess starts Run on dbURL with the lock's connection checked
// every millisecond, so its watcher is busy when Run shuts down.
func runInProcess(t *testing.T, dbURL string) *inProcess {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	p := &inProcess{cancel: cancel, done: make(chan error, 1)}
	o := Options{
		Bind: "127.0.0.1", DataDir: t.TempDir(), DatabaseURL: dbURL, Stdout: io.Discard,
		Ready:            func(base, _ string) { ready <- base },
		checkLeaderEvery: time.Millisecond,
	}
	go func() { p.done <- Run(ctx, o) }()
	select {
	case p.base = <-ready:
	case err := <-p.done:
		cancel()
		t.Fatalf("serve ended before listening: %v", err)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("serve did not listen within 60s")
	}
	return p
}

// stop cancels Run and returns its error.
func (p *inProcess) stop(t *testing.T) error {
	t.Helper()
	p.cancel()
	select {
	case err := <-p.done:
		return err
	case <-time.After(eventually.Long):
		t.Fatalf("serve did not stop within %s", eventually.Long)
		return nil
	}
}

// lockHolder returns the backend pid holding the active-server lock of
// the database conn is on, or 0.
func lockHolder(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	var pid int
	err := conn.QueryRow(context.Background(), `SELECT pid FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND ((classid::bigint << 32) | objid::bigint) = $1
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, store.LockActiveServer).Scan(&pid)
	if err == pgx.ErrNoRows {
		return 0
	}
	if err != nil {
		t.Fatalf("read pg_locks: %v", err)
	}
	return pid
}

// waitUnlocked waits for the active-server lock to be free: a closed
// connection's backend lets go of it a moment later, a leaked one never.
func waitUnlocked(t *testing.T, probe *pgx.Conn) {
	t.Helper()
	eventually.Wait(t, eventually.Medium, "the active-server lock released", func() bool { return lockHolder(t, probe) == 0 })
}

// Run returns only once all its parts have: no goroutine is left, and the
// lock is free. The lock watcher pings its connection every millisecond,
// so it is often mid-ping when Run shuts down. When Run did not wait for
// it, that ping raced with Run's deferred Close of the same pgx.Conn (the
// race detector caught it in about one shutdown of four); 20 rounds make
// a regression all but certain to show under go test -race.
func TestRunWaitsForItsParts(t *testing.T) {
	dbURL := storetest.URL(t) // starts the test cluster, whose waiter stays
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	probe, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close(context.Background())
	for range 20 {
		p := runInProcess(t, dbURL)
		resp, err := http.Get(p.base + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("healthz %d", resp.StatusCode)
		}
		if pid := lockHolder(t, probe); pid == 0 {
			t.Fatal("serve listens without holding the active-server lock")
		}
		if err := p.stop(t); err != nil {
			t.Fatalf("Run after cancel: %v", err)
		}
		waitUnlocked(t, probe)
	}
	http.DefaultClient.CloseIdleConnections()
}

// A lost lock connection is replaced by the watcher, which takes the
// lock again; the replacement is the connection Run closes at the end.
func TestRunRetakesLostLock(t *testing.T) {
	dbURL := storetest.URL(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	probe, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close(context.Background())
	p := runInProcess(t, dbURL)
	for range 3 {
		old := lockHolder(t, probe)
		if old == 0 {
			t.Fatal("no active-server lock")
		}
		if _, err := probe.Exec(context.Background(), "SELECT pg_terminate_backend($1)", old); err != nil {
			t.Fatal(err)
		}
		eventually.Wait(t, eventually.Medium, "the lock retaken on a new connection", func() bool {
			pid := lockHolder(t, probe)
			return pid != 0 && pid != old
		})
	}
	if err := p.stop(t); err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	waitUnlocked(t, probe)
}

// syncBuffer is an io.Writer the test reads while Run writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
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

// TestFailoverInProcess is the failover under the race detector and
// goleak: a second Run on the database stands by and answers /healthz
// 503 standby; cancelled, it returns nil and leaves nothing behind; a
// third one takes over when the active one stops, with the same operator
// token (Ready hands it over), and answers /healthz 200.
func TestFailoverInProcess(t *testing.T) {
	dbURL := storetest.URL(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	defer http.DefaultClient.CloseIdleConnections()
	type started struct {
		out    *syncBuffer
		ready  chan [2]string
		cancel context.CancelFunc
		done   chan error
	}
	start := func() *started {
		ctx, cancel := context.WithCancel(context.Background())
		s := &started{out: &syncBuffer{}, ready: make(chan [2]string, 1), cancel: cancel, done: make(chan error, 1)}
		o := Options{Bind: "127.0.0.1", DataDir: t.TempDir(), DatabaseURL: dbURL, Stdout: s.out,
			Ready: func(base, tok string) { s.ready <- [2]string{base, tok} }}
		go func() { s.done <- Run(ctx, o) }()
		return s
	}
	healthz := func(base string) (int, string) {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	standbyURL := func(s *started) string {
		var base string
		eventually.Wait(t, eventually.Long, "a standby", func() bool {
			out := s.out.String()
			if i := strings.Index(out, "pam serve standing by on "); i >= 0 {
				base = strings.Fields(out[i+len("pam serve standing by on "):])[0]
				return true
			}
			return false
		})
		return base
	}
	wait := func(s *started) error {
		select {
		case err := <-s.done:
			return err
		case <-time.After(eventually.Long):
			t.Fatalf("serve did not stop within %s", eventually.Long)
			return nil
		}
	}

	active := start()
	var first [2]string
	select {
	case first = <-active.ready:
	case err := <-active.done:
		t.Fatalf("serve ended before listening: %v", err)
	}

	quitter := start()
	if code, body := healthz(standbyURL(quitter)); code != 503 || !strings.Contains(body, `"standby"`) {
		t.Fatalf("standby healthz: %d %s", code, body)
	}
	quitter.cancel()
	if err := wait(quitter); err != nil {
		t.Fatalf("a cancelled standby returned %v", err)
	}

	next := start()
	base := standbyURL(next)
	active.cancel()
	if err := wait(active); err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	var second [2]string
	select {
	case second = <-next.ready:
	case err := <-next.done:
		t.Fatalf("the standby ended instead of taking over: %v", err)
	case <-time.After(eventually.Long):
		t.Fatalf("the standby did not take over within %s", eventually.Long)
	}
	if second[0] != base || second[1] != first[1] {
		t.Fatalf("took over at %s (stood by at %s); same token: %v", second[0], base, second[1] == first[1])
	}
	if code, body := healthz(base); code != 200 {
		t.Fatalf("healthz after takeover: %d %s", code, body)
	}
	next.cancel()
	if err := wait(next); err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
}
