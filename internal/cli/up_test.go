package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pam/internal/serve"
	"pam/internal/worker"
)

// fakeUp is an environment whose serve.Run and worker.Run are fakes, for
// one test of pam up. The
// worker token file is in place, so pam up starts its worker without
// asking the (fake) serve for one.
func fakeUp(t *testing.T, serveFn func(context.Context, serve.Options) error, workerFn func(context.Context, worker.Options) error) *testEnv {
	t.Helper()
	e := isolate(t)
	if err := os.MkdirAll(filepath.Join(e.dir, "worker"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.dir, "worker", "token"), []byte(strings.Repeat("a", 64)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.serve, e.worker = serveFn, workerFn
	return e
}

// A worker that fails ends serve; pam up returns only after serve has, with
// the worker's error.
func TestUpWorkerFailureStopsServe(t *testing.T) {
	t.Parallel()
	serveDone := make(chan struct{})
	e := fakeUp(t, func(ctx context.Context, o serve.Options) error {
		defer close(serveDone)
		o.Ready("http://127.0.0.1:1", testToken)
		<-ctx.Done()
		return nil
	}, func(ctx context.Context, o worker.Options) error {
		return errors.New("tmux is missing")
	})
	r := e.pam("up", "--port", "0")
	select {
	case <-serveDone:
	default:
		t.Error("pam up returned while serve still ran")
	}
	if r.code != 1 || !strings.Contains(r.stderr, "worker: tmux is missing") {
		t.Errorf("want exit 1 naming the worker's failure: %v", r)
	}
}

// A serve that fails ends the worker; pam up returns only after the worker
// has, with serve's error.
func TestUpServeFailureStopsWorker(t *testing.T) {
	t.Parallel()
	workerRunning, workerDone := make(chan struct{}), make(chan struct{})
	e := fakeUp(t, func(ctx context.Context, o serve.Options) error {
		o.Ready("http://127.0.0.1:1", testToken)
		select {
		case <-workerRunning:
		case <-ctx.Done():
			return ctx.Err()
		}
		return errors.New("lost the database")
	}, func(ctx context.Context, o worker.Options) error {
		defer close(workerDone)
		close(workerRunning)
		<-ctx.Done()
		return nil
	})
	r := e.pam("up", "--port", "0")
	select {
	case <-workerDone:
	default:
		t.Error("pam up returned while its worker still ran")
	}
	if r.code != 1 || !strings.Contains(r.stderr, "serve: lost the database") {
		t.Errorf("want exit 1 naming serve's failure: %v", r)
	}
}
