package store_test

import (
	"math"
	"testing"

	"go.uber.org/goleak"

	"pam/internal/store"
	"pam/internal/store/storetest"
)

// TestMain fails the package when a goroutine outlives its tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(storetest.M(m)) }

func TestJournalAppendAndRead(t *testing.T) {
	t.Parallel()
	s := storetest.New(t)
	ctx := t.Context()
	for i := 0; i < 3; i++ {
		if err := s.InTx(ctx, func(tx *store.Tx) error {
			return tx.Journal(ctx, store.NewEvent{Topic: "project.created", Payload: map[string]int{"i": i}})
		}); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := s.EventsAfter(ctx, 1, math.MaxInt64, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Seq != 2 || evs[1].Seq != 3 {
		t.Fatalf("events after 1: %+v", evs)
	}
}

// TestJournalActor: an event's actor is kept whether the transaction
// writes its events at once or pipelines them, and is null when unset.
func TestJournalActor(t *testing.T) {
	t.Parallel()
	s := storetest.New(t)
	ctx := t.Context()
	for _, pipelined := range []bool{false, true} {
		if err := s.InTx(ctx, func(tx *store.Tx) error {
			if pipelined {
				tx.Pipeline()
			}
			if err := tx.Journal(ctx, store.NewEvent{Topic: "work_item.created", Actor: "agent:0123abcd"},
				store.NewEvent{Topic: "work_item.updated"}); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `SELECT 1`) // sends what the pipeline queued
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := s.EventsAfter(ctx, 0, math.MaxInt64, nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 4 {
		t.Fatalf("%d events, want 4", len(evs))
	}
	for i, ev := range evs {
		switch {
		case i%2 == 0 && (ev.Actor == nil || *ev.Actor != "agent:0123abcd"):
			t.Errorf("event %d (%s): actor %v, want agent:0123abcd", i, ev.Topic, ev.Actor)
		case i%2 == 1 && ev.Actor != nil:
			t.Errorf("event %d (%s): actor %q, want null", i, ev.Topic, *ev.Actor)
		}
	}
}
