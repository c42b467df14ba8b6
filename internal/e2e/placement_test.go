package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"pam/internal/eventually"
	"pam/internal/wire"
)

// TestPlacementWhileTheAPIIsBusy: the dispatcher has connections of its
// own, so a run is placed while every connection of the API's pool waits
// (here on a row lock the test holds, as a storm of slow requests would).
// Before, the claim queued for one of the API's connections and no run
// was placed until they freed up.
func TestPlacementWhileTheAPIIsBusy(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.worker("e2e-busy")
	s.must(200, "PATCH", "/api/v1/hosts/e2e-busy", map[string]any{"max_runs": 1}, nil)
	task := s.task()
	var first, second wire.Run
	s.must(202, "POST", "/api/v1/runs", map[string]any{"task_id": task.ID, "provider": "shell", "prompt": "sleep 300", "cwd": t.TempDir()}, &first)
	s.waitRun(first.ID, "running", 60*time.Second, func(r wire.Run) bool { return r.Status == "running" })
	s.must(202, "POST", "/api/v1/runs", map[string]any{"task_id": task.ID, "provider": "shell", "prompt": "sleep 300", "cwd": t.TempDir()}, &second)

	ctx := t.Context()
	db, err := pgx.Connect(ctx, s.db)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	placed := func() bool {
		var host *string
		if err := db.QueryRow(ctx, `SELECT host_id::text FROM runs WHERE id = $1`, second.ID).Scan(&host); err != nil {
			t.Fatal(err)
		}
		return host != nil
	}
	if placed() {
		t.Fatal("the second run was placed on a host with room for one")
	}

	// Every connection of the API's pool (8) waits on the task's row.
	holder, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, `SELECT id FROM work_items WHERE id = $1 FOR UPDATE`, task.ID); err != nil {
		t.Fatal(err)
	}
	var edits sync.WaitGroup
	defer edits.Wait()
	for i := range 12 {
		edits.Go(func() {
			title := "busy " + string(rune('a'+i))
			s.call("PATCH", "/api/v1/work-items/"+task.ID, map[string]any{"title": title})
		})
	}
	watcher, err := pgx.Connect(ctx, s.db)
	if err != nil {
		t.Fatal(err)
	}
	defer watcher.Close(context.Background())
	eventually.Wait(t, eventually.Long, "every connection of the API's pool to wait on the row", func() bool {
		var waiting int
		err := watcher.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		return err == nil && waiting >= 8
	})

	// Room for the second run, written under the API: the dispatcher's
	// next pass (a tick) places it.
	if _, err := watcher.Exec(ctx, `UPDATE hosts SET max_runs = 2 WHERE name = 'e2e-busy'`); err != nil {
		t.Fatal(err)
	}
	ok := eventually.Within(15*time.Second, placed)
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if !ok {
		t.Fatal("no run was placed while the API's connections were all busy")
	}
	s.waitRun(second.ID, "running once the API is free", 60*time.Second, func(r wire.Run) bool { return r.Status == "running" })
}
