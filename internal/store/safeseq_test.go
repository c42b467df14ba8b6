package store_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"pam/internal/store"
	"pam/internal/store/storetest"
	"pam/internal/wire"
)

// openJournalTx begins a transaction that journals one event and stays
// open until the returned commit or rollback is called.
func openJournalTx(t *testing.T, s *store.Store, topic string) (commit, rollback func()) {
	t.Helper()
	ctx := t.Context()
	ptx, err := s.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx := &store.Tx{Tx: ptx}
	// A failing test must not leave the connection busy: the pool's Close
	// would wait for it forever.
	t.Cleanup(func() { _ = ptx.Rollback(ctx) })
	if err := tx.Journal(ctx, store.NewEvent{Topic: wire.Topic(topic)}); err != nil {
		t.Fatal(err)
	}
	return func() {
			if err := ptx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}, func() {
			_ = ptx.Rollback(ctx)
		}
}

func journal(t *testing.T, s *store.Store, topic string) {
	t.Helper()
	ctx := t.Context()
	if err := s.InTx(ctx, func(tx *store.Tx) error { return tx.Journal(ctx, store.NewEvent{Topic: wire.Topic(topic)}) }); err != nil {
		t.Fatal(err)
	}
}

// A committed seq must not be deliverable while a transaction holding a
// smaller seq is still open; once it commits (or aborts), it is.
func TestSafeSeqWaitsForAnOpenSmallerSeq(t *testing.T) {
	t.Parallel()
	for _, abort := range []bool{false, true} {
		s := storetest.New(t)
		commitA, rollbackA := openJournalTx(t, s, "project.created") // seq 1, open
		journal(t, s, "project.updated")                             // seq 2, committed

		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		safe, err := s.SafeSeq(ctx)
		cancel()
		if err == nil {
			t.Fatalf("SafeSeq returned %d while seq 1 was still open", safe)
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("SafeSeq: %v", err)
		}
		if abort {
			rollbackA()
		} else {
			commitA()
		}
		safe, err = s.SafeSeq(t.Context())
		if err != nil || safe != 2 {
			t.Fatalf("after the open transaction ended: safe %d, err %v; want 2", safe, err)
		}
		evs, _ := s.EventsAfter(t.Context(), 0, safe, nil, 10)
		want := 2
		if abort {
			want = 1
		}
		if len(evs) != want {
			t.Fatalf("abort=%v: %d events visible, want %d", abort, len(evs), want)
		}
	}
}

// Writers commit out of seq order on purpose; a reader that only ever asks
// for seq > last up to SafeSeq must still see every committed event.
func TestSafeSeqReaderMissesNothingUnderConcurrentWriters(t *testing.T) {
	t.Parallel()
	s := storetest.New(t)
	ctx := t.Context()
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Go(func() {
			for i := 0; i < 60; i++ {
				ptx, err := s.Pool.Begin(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				tx := &store.Tx{Tx: ptx}
				if err := tx.Journal(ctx, store.NewEvent{Topic: "run.progress"}); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
				if rand.IntN(10) == 0 {
					_ = ptx.Rollback(ctx)
				} else if err := ptx.Commit(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	writersDone := make(chan struct{})
	go func() { wg.Wait(); close(writersDone) }()

	var delivered []int64
	var last int64
	for finished := false; !finished; {
		select {
		case <-writersDone:
			finished = true
		default:
		}
		safe, err := s.SafeSeq(ctx)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := s.EventsAfter(ctx, last, safe, nil, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			delivered = append(delivered, e.Seq)
			last = e.Seq
		}
	}
	all, err := s.EventsAfter(ctx, 0, math.MaxInt64, nil, 100000)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(delivered) {
		t.Fatalf("reader delivered %d events, %d committed: a smaller seq committed after a larger one was delivered", len(delivered), len(all))
	}
	for i := range all {
		if all[i].Seq != delivered[i] {
			t.Fatalf("delivery %d: seq %d, want %d", i, delivered[i], all[i].Seq)
		}
	}
	if len(all) < 150 {
		t.Fatalf("only %d events committed; the test did not exercise concurrency", len(all))
	}
}

// TestFullXid: a 32-bit xid of pg_stat_activity is placed in the epoch
// of a snapshot's xmax, across the 2^32 boundary both ways.
func TestFullXid(t *testing.T) {
	const epoch = uint64(7) << 32
	for _, c := range []struct {
		near uint64
		x    uint32
		want uint64
	}{
		{epoch + 1000, 990, epoch + 990},     // older, same epoch
		{epoch + 1000, 1005, epoch + 1005},   // assigned after the snapshot's xmax
		{epoch + 5, 0xffff_fff0, epoch - 16}, // older, previous epoch
		{epoch - 3, 4, epoch + 4},            // newer, next epoch
		{epoch + 1<<31 - 1, 0, epoch},        // as far below as it goes
		{epoch + 100, 100, epoch + 100},      // xmax itself
	} {
		if got := store.FullXid(c.near, c.x); got != c.want {
			t.Errorf("FullXid(%#x, %#x) = %#x, want %#x", c.near, c.x, got, c.want)
		}
	}
}
