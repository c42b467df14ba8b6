// Package runs decides about runs: one layer above store, it opens the
// transaction (store.InTx), reads the run under its row lock and the facts
// a decision needs through store, decides through lifecycle (and
// placement), and has store write the decision (store.Apply). Store runs
// SQL and transactions only; the rules are lifecycle's and placement's,
// and this package is where they meet the database
// (docs/architecture.md#start-here).
package runs

import (
	"pam/internal/store"
)

// Service makes the run decisions of the server and the dispatcher
// against one store.
type Service struct {
	st *store.Store
}

// New returns the run decisions over st (its Policy and Clock apply).
func New(st *store.Store) *Service { return &Service{st: st} }
