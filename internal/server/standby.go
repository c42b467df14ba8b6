package server

import (
	"net/http"

	"pam/internal/wire"
)

// standbyMessage says why a standby refuses: it holds none of the active
// server's state (uplinks, leases, the pane cache), so nothing it answered
// could be trusted.
const standbyMessage = "this pam serve is a standby: another pam serve is active on this database"

// Standby is the handler of a serve that waits as a standby
// (docs/architecture.md#single-active-server). The standby listens so that
// a load balancer can tell it from the active server by its /healthz, 503
// {"status":"standby"} with the error the database-down answer carries;
// every other request is 503 `unavailable` in the error envelope, so that
// a client or a worker that reaches it retries rather than acting on an
// answer. It needs no credential and takes none: the operator token is the
// database's, and the standby reads it only once it becomes active.
func Standby() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "1")
		if r.URL.Path == "/healthz" {
			writeJSON(w, http.StatusServiceUnavailable, map[string]any{
				"status": "standby",
				"error":  wire.Error{Code: wire.CodeUnavailable, Message: standbyMessage, Details: map[string]any{}},
			})
			return
		}
		writeError(w, wire.Errorf(wire.CodeUnavailable, standbyMessage))
	})
}
