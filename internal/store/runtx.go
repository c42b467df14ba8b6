package store

import (
	"context"

	"pam/internal/runwrite"
	"pam/internal/wire"
)

// What the layer above store (package runs) decides with: it opens the
// transaction (InTx), reads a run under its row lock (LockRun) and the
// facts a decision needs, asks lifecycle, and has store write the
// decision (Apply). Store itself decides nothing.

// ErrGuardLost means a guarded status write found the run no longer in
// the status it was decided from: someone else moved it first.
var ErrGuardLost = errGuardLost

// LockRun reads run id under its row lock.
func (tx *Tx) LockRun(ctx context.Context, id string) (wire.Run, error) {
	return runByID(ctx, tx, id, true)
}

// Apply carries out decision d about run r inside tx (the caller holds
// r's row lock) and returns the run as it ends up.
func (s *Store) Apply(ctx context.Context, tx *Tx, r wire.Run, d runwrite.Decision) (wire.Run, error) {
	return s.apply(ctx, tx, r, d)
}
