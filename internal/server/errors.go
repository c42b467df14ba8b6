package server

import (
	"net/http"

	"pam/internal/wire"
)

// StatusOf is the one place where a refusal's code becomes an HTTP status:
// the store and the lifecycle decisions speak in codes (the contract's
// vocabulary, see docs/api.md "Errors"), never in statuses. An error that
// carries its own status (set by the server for the rare answer whose
// status the code does not imply) keeps it; an unknown code is a 500, so a
// new code cannot pass as success or as the client's fault by accident.
func StatusOf(e *wire.Error) int {
	if e.Status != 0 {
		return e.Status
	}
	switch e.Code {
	case wire.CodeValidationFailed, wire.CodeMalformedJSON, wire.CodeMissingAttempt, wire.CodeMissingSeq,
		wire.CodeProtocolMismatch, wire.CodeKeyNotAllowed:
		return http.StatusBadRequest
	case wire.CodeUnauthorized:
		return http.StatusUnauthorized
	case wire.CodeForbidden:
		return http.StatusForbidden
	case wire.CodeNotFound, wire.CodeNoWorkspace:
		return http.StatusNotFound
	case wire.CodeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case wire.CodeConflict, wire.CodeSlugTaken, wire.CodeIllegalTransition, wire.CodeHasChildren, wire.CodeHasRuns,
		wire.CodeHasActiveRuns, wire.CodeLeaseHeld, wire.CodeInvalidAttempt, wire.CodeNotResumable,
		wire.CodeProjectArchived, wire.CodeHeadMoved:
		return http.StatusConflict
	case wire.CodeAnswerExpired:
		return http.StatusGone
	case wire.CodeBodyTooLarge:
		return http.StatusRequestEntityTooLarge
	case wire.CodeRateLimited:
		return http.StatusTooManyRequests
	case wire.CodeUnavailable, wire.CodeHostUnreachable:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}
