package store_test

import (
	"testing"
	"time"

	"pam/internal/clock"
	"pam/internal/runs"
	"pam/internal/store"
	"pam/internal/store/storetest"
	"pam/internal/wire"
)

// The timer queries judge at the store's clock, and the times they compare
// against are written from it: with the clock years away from the
// database's, the refusal hold, the ack and spawn timeouts and the host
// offline timer each hold until the clock passes them, then act. A query
// left on PostgreSQL's now() would act at once or never.
func TestTimersJudgeAtTheStoreClock(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := storetest.New(t)
	clk := clock.NewManual(time.Date(2040, 3, 4, 5, 6, 7, 0, time.UTC))
	s.Clock = clk.Now
	s.Policy = store.Policy{MaxAttempts: 3, RestartInitialDelay: time.Minute, RestartMaxDelay: time.Minute}
	p, err := s.CreateProject(ctx, wire.CreateProject{Name: "Clock"})
	if err != nil {
		t.Fatal(err)
	}
	task, err := s.CreateWorkItem(ctx, p.Slug, wire.CreateWorkItem{Kind: "task", Title: "Work"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.CreateHost(ctx, wire.CreateHost{Name: "h"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Register(ctx, h.Host, wire.Register{HostName: "h", InstanceID: instanceA, Providers: []string{"shell"}, Protocol: wire.UplinkProtocol}, 90*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Heartbeat(ctx, h.Host.ID); err != nil {
		t.Fatal(err)
	}
	hostID := h.Host.ID
	rs := runs.New(s)
	all := func(string) bool { return true }
	const ack, spawn = time.Minute, time.Minute
	offer := func(want int) {
		t.Helper()
		offers, err := rs.ClaimAndOffer(ctx, all, 10, ack)
		if err != nil || len(offers) != want {
			t.Fatalf("at %s: %d offers (%v), want %d", clk.Now(), len(offers), err, want)
		}
	}
	sweep := func(want int) {
		t.Helper()
		if n, err := rs.Sweep(ctx, ack, time.Hour, spawn); err != nil || n != want {
			t.Fatalf("at %s: sweep changed %d (%v), want %d", clk.Now(), n, err, want)
		}
	}
	r, err := rs.CreateRun(ctx, wire.CreateRun{TaskID: task.ID, Provider: "shell"})
	if err != nil {
		t.Fatal(err)
	}

	// Refused: not offered to the host again within the ack timeout.
	offer(1)
	no := false
	if _, err := rs.AckOffer(ctx, hostID, wire.RunDispatchAckFrame{RunID: r.ID, Attempt: wire.IntPtr(1), Accepted: &no, Reason: "full"}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(ack - time.Second)
	offer(0)
	clk.Advance(2 * time.Second)

	// Not acked: withdrawn at the ack timeout, not before.
	offer(1)
	clk.Advance(ack - time.Second)
	sweep(0)
	clk.Advance(2 * time.Second)
	sweep(1)
	if got, _ := s.GetRun(ctx, r.ID); got.Status != wire.RunPending || got.HostID != nil {
		t.Fatalf("after the ack timeout: %s on %v", got.Status, got.HostID)
	}

	// Acked but never started: spawn_failed at the spawn timeout, and
	// requeued with its backoff from the clock.
	offer(1)
	yes := true
	if _, err := rs.AckOffer(ctx, hostID, wire.RunDispatchAckFrame{RunID: r.ID, Attempt: wire.IntPtr(1), Accepted: &yes}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(spawn - time.Second)
	sweep(0)
	clk.Advance(2 * time.Second)
	sweep(1)
	got, _ := s.GetRun(ctx, r.ID)
	if got.Status != wire.RunPending || got.Attempt != 2 || got.NextAttemptAt == nil || !got.NextAttemptAt.Equal(clk.Now().Add(time.Minute)) {
		t.Fatalf("after the spawn timeout: %s attempt %d next %v, want pending attempt 2 at %s", got.Status, got.Attempt, got.NextAttemptAt, clk.Now().Add(time.Minute))
	}
	if due, err := s.NextDue(ctx); err != nil || !due.Equal(*got.NextAttemptAt) {
		t.Fatalf("next due %s (%v), want %s", due, err, got.NextAttemptAt)
	}
	offer(0) // backing off
	clk.Advance(time.Minute)
	offer(1)

	// Offline once silent past offlineAfter by the clock.
	if _, err := s.Heartbeat(ctx, hostID); err != nil {
		t.Fatal(err)
	}
	clk.Advance(90*time.Second - time.Second)
	if n, err := s.MarkOffline(ctx, 90*time.Second); err != nil || n != 0 {
		t.Fatalf("within offline-after: %d hosts offline (%v)", n, err)
	}
	clk.Advance(2 * time.Second)
	if n, err := s.MarkOffline(ctx, 90*time.Second); err != nil || n != 1 {
		t.Fatalf("past offline-after: %d hosts offline (%v), want 1", n, err)
	}
}
