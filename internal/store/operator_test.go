package store_test

import (
	"fmt"
	"sync"
	"testing"

	"pam/internal/store/storetest"
)

// TestOperatorTokenStoredOnce: the operator token is the database's,
// stored by the first serve and kept: servers racing to store their own
// candidates all come back with the one that won, a later candidate
// changes nothing, and a token of the wrong shape is refused by the
// schema.
func TestOperatorTokenStoredOnce(t *testing.T) {
	t.Parallel()
	s := storetest.New(t)
	ctx := t.Context()
	if tok, err := s.OperatorToken(ctx); err != nil || tok != "" {
		t.Fatalf("a new database's operator token: %q %v, want none", tok, err)
	}
	if _, err := s.InitOperatorToken(ctx, "NOT-A-TOKEN"); err == nil {
		t.Fatal("a token of the wrong shape was stored")
	}
	const racers = 8
	got := make([]string, racers)
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() { got[i], errs[i] = s.InitOperatorToken(ctx, fmt.Sprintf("%032x", i+1)) })
	}
	wg.Wait()
	for i := range racers {
		if errs[i] != nil || got[i] != got[0] {
			t.Fatalf("racer %d got %q (%v), racer 0 %q: they must agree", i, got[i], errs[i], got[0])
		}
	}
	if tok, err := s.InitOperatorToken(ctx, "ffffffffffffffffffffffffffffffff"); err != nil || tok != got[0] {
		t.Fatalf("a later candidate: %q %v, want the stored %q", tok, err, got[0])
	}
	if tok, err := s.OperatorToken(ctx); err != nil || tok != got[0] {
		t.Fatalf("read back %q %v, want %q", tok, err, got[0])
	}
}
