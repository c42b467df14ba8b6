package store_test

import (
	"math"
	"testing"

	"pam/internal/store"
	"pam/internal/store/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

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
