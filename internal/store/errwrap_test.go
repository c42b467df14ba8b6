package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"

	"pam/internal/eventually"
	"pam/internal/runs"
	"pam/internal/store"
	"pam/internal/store/storetest"
	"pam/internal/wire"
)

// TestFailedQueriesNameWhatWasBeingDone: an error out of the store says
// which operation failed and on what, at the transaction's boundary and
// at the query helper inside it, so that a "deadlock detected" or a
// cancelled statement in a log points at one call, not at any query. The
// wrapping keeps the cause: errors.Is finds the context's error, and a
// refusal is still the *wire.Error the server answers with, its message
// untouched.
func TestFailedQueriesNameWhatWasBeingDone(t *testing.T) {
	t.Parallel()
	s := storetest.New(t)
	ctx := t.Context()
	p, err := s.CreateProject(ctx, wire.CreateProject{Name: "Wrapped"})
	if err != nil {
		t.Fatal(err)
	}
	task, err := s.CreateWorkItem(ctx, p.Slug, wire.CreateWorkItem{Kind: "task", Title: "Task"})
	if err != nil {
		t.Fatal(err)
	}
	r, err := runs.New(s).CreateRun(ctx, wire.CreateRun{TaskID: task.ID, Provider: "shell"})
	if err != nil {
		t.Fatal(err)
	}

	// A statement that fails inside the transaction: StopRun waits for
	// the run's row lock, held here, and its context is cancelled while
	// it waits.
	holder, err := s.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(context.Background())
	if _, err := holder.Exec(ctx, `SELECT id FROM runs WHERE id = $1 FOR UPDATE`, r.ID); err != nil {
		t.Fatal(err)
	}
	stopCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopped := make(chan error, 1)
	go func() {
		_, _, err := runs.New(s).StopRun(stopCtx, r.ID, false)
		stopped <- err
	}()
	eventually.Wait(t, eventually.Long, "StopRun to wait for the run's row lock", func() bool {
		var waiting bool
		err := s.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%FROM runs WHERE id = $1 FOR NO KEY UPDATE%')`).Scan(&waiting)
		return err == nil && waiting
	})
	cancel()
	err = <-stopped
	if err == nil {
		t.Fatal("StopRun succeeded under a held row lock with its context cancelled")
	}
	for _, want := range []string{"stop run " + r.ID + ": ", "read run " + r.ID + ": "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("the wrapping lost the cause (context.Canceled): %v", err)
	}
	if errors.Is(err, store.ErrUnavailable) {
		t.Errorf("a cancelled statement reads as the database being away: %v", err)
	}

	// A context cancelled before anything ran: the boundary still names
	// the operation.
	gone, stop := context.WithCancel(ctx)
	stop()
	if _, err := runs.New(s).RetryRun(gone, r.ID, false); err == nil || !strings.HasPrefix(err.Error(), "retry run "+r.ID+": ") ||
		!errors.Is(err, context.Canceled) {
		t.Errorf("retry with a cancelled context: %v", err)
	}

	// A refusal is wrapped too, and stays the wire error it was.
	missing := uuid.NewString()
	_, _, err = runs.New(s).StopRun(ctx, missing, false)
	e, ok := wire.AsError(err)
	if !ok || e.Code != wire.CodeNotFound || e.Message != "run not found" {
		t.Fatalf("stop of no run: %v, want the not_found wire error", err)
	}
	if !strings.HasPrefix(err.Error(), "stop run "+missing+": ") {
		t.Errorf("stop of no run does not name the operation: %v", err)
	}
}
