package wire

import (
	"errors"
	"fmt"
	"net/http"
)

// Error codes of contract §7 and §10. Black-box tests match these strings.
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
)

// Error is a failure that knows its HTTP status and wire code. Domain code
// returns it; the server writes it as the envelope and the client decodes
// the envelope back into it, so both sides compare codes, not messages.
type Error struct {
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
func Errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
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
	return Errorf(http.StatusNotFound, CodeNotFound, "%s not found", what)
}

// Invalid is a validation failure naming the offending field.
func Invalid(field, format string, args ...any) *Error {
	return Errorf(http.StatusBadRequest, CodeValidationFailed, format, args...).With("field", field)
}

// Conflict is a 409 with the given code.
func Conflict(code, format string, args ...any) *Error {
	return Errorf(http.StatusConflict, code, format, args...)
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
