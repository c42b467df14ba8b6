package server

import (
	"context"
	"fmt"

	"pam/internal/signaltoken"
	"pam/internal/wire"
)

// verifySignalToken checks a signal token for runID and returns the host
// and attempt it is bound to. A token that is not good for runID is
// unauthorized, told without a query (the secret is read once); any other
// error is the database's, so that a caller answers 503 rather than 401.
func (s *Server) verifySignalToken(ctx context.Context, runID, token string) (hostID string, attempt int, err error) {
	bad := wire.Errorf(wire.CodeUnauthorized, "invalid signal token")
	t, ok := signaltoken.Parse(token)
	if !ok {
		return "", 0, bad
	}
	key, err := s.store.SignalSecret(ctx)
	if err != nil {
		return "", 0, fmt.Errorf("verify the signal token of run %s: %w", runID, err)
	}
	if !t.Good(key, runID) {
		return "", 0, bad
	}
	return t.HostID, t.Attempt, nil
}
