package store

import (
	"context"
	"errors"
	"fmt"
)

// OperatorToken returns the operator token stored in the database, or ""
// when no server has stored one yet. The token lives in the database, not
// in a server's data dir, so that every serve of one database accepts the
// same credential and a failover does not change it
// (docs/architecture.md#security-model).
func (s *Store) OperatorToken(ctx context.Context) (string, error) {
	var tok *string
	if err := s.Pool.QueryRow(ctx, `SELECT operator_token FROM server_state`).Scan(&tok); err != nil {
		return "", fmt.Errorf("read the operator token: %w", translate(err))
	}
	if tok == nil {
		return "", nil
	}
	return *tok, nil
}

// InitOperatorToken stores candidate as the operator token unless the
// database has one already, and returns the one it has then. Servers
// racing to store theirs all return the same winner: the write only fills
// an empty column, and the answer is read back by a statement of its own,
// whose snapshot sees whichever write committed first.
func (s *Store) InitOperatorToken(ctx context.Context, candidate string) (string, error) {
	if _, err := s.Pool.Exec(ctx, `UPDATE server_state SET operator_token = $1 WHERE operator_token IS NULL`, candidate); err != nil {
		return "", fmt.Errorf("store the operator token: %w", translate(err))
	}
	tok, err := s.OperatorToken(ctx)
	if err == nil && tok == "" {
		err = errors.New("read the operator token: none stored")
	}
	return tok, err
}
