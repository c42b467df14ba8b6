package wire

import (
	"errors"
	"fmt"
)

// Error codes of docs/api.md#resources and docs/architecture.md#internal-api. Black-box tests match these strings.
const (
	CodeUnauthorized      = "unauthorized"
	CodeNotFound          = "not_found"
	CodeValidationFailed  = "validation_failed"
	CodeMalformedJSON     = "malformed_json"
	CodeBodyTooLarge      = "body_too_large"
	CodeConflict          = "conflict"
	CodeSlugTaken         = "slug_taken"
	CodeIllegalTransition = "illegal_transition"
	CodeHasChildren       = "has_children"
	CodeHasRuns           = "has_runs"
	CodeHasActiveRuns     = "has_active_runs"
	CodeLeaseHeld         = "lease_held"
	CodeInternal          = "internal"
	CodeUnavailable       = "unavailable"
	CodeMethodNotAllowed  = "method_not_allowed"
	CodeMissingAttempt    = "missing_attempt"
	CodeInvalidAttempt    = "invalid_attempt"
	CodeMissingSeq        = "missing_seq"
	CodeProtocolMismatch  = "protocol_mismatch"
	// CodeProjectArchived refuses a change to the work items or runs of
	// an archived project (409).
	CodeProjectArchived = "project_archived"
)

// Error is a refusal in the contract's vocabulary: a code, a message and
// details. Domain code (store, lifecycle) returns it without any notion of
// HTTP; the server maps the code to a status in one place and writes the
// envelope; the client decodes the envelope back into it, so both sides
// compare codes, not messages.
type Error struct {
	// Status is the HTTP status the error travelled with: set by the
	// client from the response it decoded, and by the server only for an
	// answer whose status its code does not imply (a gateway timeout).
	// Domain code leaves it zero.
	Status  int            `json:"-"`
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details"`
}

// Envelope is the JSON shape of every error response.
type Envelope struct {
	Error *Error `json:"error"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf builds an Error with a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// With returns a copy of e carrying one more detail.
func (e *Error) With(key string, value any) *Error {
	c := *e
	c.Details = make(map[string]any, len(e.Details)+1)
	for k, v := range e.Details {
		c.Details[k] = v
	}
	c.Details[key] = value
	return &c
}

// NotFound is the error for an id or ref that names nothing.
func NotFound(what string) *Error {
	return Errorf(CodeNotFound, "%s not found", what)
}

// Invalid is a validation failure naming the offending field.
func Invalid(field, format string, args ...any) *Error {
	return Errorf(CodeValidationFailed, format, args...).With("field", field)
}

// Conflict is a refusal because of the current state, with the given code
// (illegal_transition, has_runs, …).
func Conflict(code, format string, args ...any) *Error {
	return Errorf(code, format, args...)
}

// AsError reports whether err is (or wraps) an *Error and returns it.
func AsError(err error) (*Error, bool) {
	var e *Error
	ok := errors.As(err, &e)
	return e, ok
}

// HasCode reports whether err carries the given wire code.
func HasCode(err error, code string) bool {
	e, ok := AsError(err)
	return ok && e.Code == code
}
