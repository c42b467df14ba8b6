package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"pam/internal/eventually"
	"pam/internal/store/storetest"
	"pam/internal/wire"
)

// TestItemEditsDoNotWaitForTheProject: an edit of one card (title,
// status, body) locks only that item, so it goes through while another
// transaction holds the project's lock (as a create or a move does); a
// move still waits for it, which is what keeps two moves from making a
// cycle. Every edit took the project's lock before, so edits of
// different cards of one project ran one at a time.
func TestItemEditsDoNotWaitForTheProject(t *testing.T) {
	t.Parallel()
	s := storetest.New(t)
	ctx := t.Context()
	p, err := s.CreateProject(ctx, wire.CreateProject{Name: "Locks"})
	if err != nil {
		t.Fatal(err)
	}
	epic, err := s.CreateWorkItem(ctx, p.Slug, wire.CreateWorkItem{Kind: "epic", Title: "Epic"})
	if err != nil {
		t.Fatal(err)
	}
	task, err := s.CreateWorkItem(ctx, p.Slug, wire.CreateWorkItem{Kind: "task", Title: "Task"})
	if err != nil {
		t.Fatal(err)
	}

	holder, err := s.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(context.Background())
	if _, err := holder.Exec(ctx, `SELECT id FROM projects WHERE id = $1 FOR NO KEY UPDATE`, p.ID); err != nil {
		t.Fatal(err)
	}

	title, status := "Task, renamed", "doing"
	edit, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	got, err := s.UpdateWorkItem(edit, task.ID, wire.UpdateWorkItem{Title: &title, Status: &status})
	if err != nil {
		t.Fatalf("an edit while the project is locked: %v (it waited for the project's lock)", err)
	}
	if got.Title != title || got.Status != status {
		t.Fatalf("edit: %+v", got)
	}

	moved := make(chan error, 1)
	go func() {
		_, err := s.UpdateWorkItem(ctx, task.ID, wire.UpdateWorkItem{ParentID: wire.Optional{Set: true, Value: &epic.ID}})
		moved <- err
	}()
	// The move waits on a lock (the project's) while the holder is open.
	eventually.Wait(t, eventually.Medium, "the move to wait on the project's lock", func() bool {
		var waiting int
		err := s.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%FROM projects%'`).Scan(&waiting)
		return err == nil && waiting == 1
	})
	select {
	case err := <-moved:
		t.Fatalf("a move went through while the project was locked (err %v)", err)
	default:
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-moved:
		if err != nil {
			t.Fatalf("move: %v", err)
		}
	case <-time.After(eventually.Medium):
		t.Fatal(errors.New("the move did not finish once the project's lock was released"))
	}
	after, err := s.GetWorkItem(ctx, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	if after.ParentID == nil || *after.ParentID != epic.ID {
		t.Fatalf("after the move: parent %v, want %s", after.ParentID, epic.ID)
	}
}
