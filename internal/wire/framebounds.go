// The bounds of uplink frame fields and the checks the frame types'
// Validate share (framecheck.go), with the text helpers senders use to
// stay within them.

package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Bounds of uplink frame fields. Both ends hold every frame to them, so a
// peer's bug is refused at the edge instead of reaching tmux, a file or
// the database.
const (
	// MaxText bounds the free text a frame carries (run_state detail,
	// reason, message), in characters: every free-text field stored from a
	// worker is bounded (docs/architecture.md#security-model).
	MaxText = 1000
	// MaxPrompt bounds a run's prompt (docs/architecture.md#data-model).
	MaxPrompt = 64 << 10
	// MaxArgs and MaxArg bound a run's extra arguments, as POST /runs does.
	MaxArgs = 64
	MaxArg  = 4096
	// MaxPath bounds a run's cwd.
	MaxPath = 4096
	// MaxTitle bounds a task title (names are 1–200 characters, docs/api.md#resources).
	MaxTitle = 200
	// MaxToken bounds a signal token: it travels in an HTTP header.
	MaxToken = 256
	// MaxPayload bounds a signal's payload.
	MaxPayload = 64 << 10
	// MaxProgressPayload bounds a progress signal's payload: progress
	// comes often and each may be journaled (docs/architecture.md#bounded-journal).
	MaxProgressPayload = 4 << 10
	// MaxCapture bounds a snapshot's capture: what one frame can carry.
	// The check is explicit so that a frame built in memory is held to it
	// as a decoded one is.
	MaxCapture = MaxFrame
	// MaxLogChunk bounds the text of one log_chunk.
	MaxLogChunk = 256 << 10
	// MaxAttachChunk bounds the bytes of one attach_input or
	// attach_output (the relays send at most 32 KiB at a time).
	MaxAttachChunk = 256 << 10
	// maxCode bounds an error code; maxEcho bounds the fields an error
	// answer echoes from the frame it refuses.
	maxCode = 64
	maxEcho = 64
)

var (
	sessionNameRe = regexp.MustCompile(`^pam-[0-9a-f]{8}$`)
	providerRe    = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
	codeRe        = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
)

// CheckSignalPayload is CheckPayload for a signal of kind: a progress
// signal's payload is held to MaxProgressPayload bytes besides, and a
// bigger one is refused (validation_failed), never cut: a cut payload
// would not be JSON, and a journal entry that says less than its sender
// meant is worse than an answer that says why.
func CheckSignalPayload(kind string, p json.RawMessage) error {
	if kind == SignalProgress && len(p) > MaxProgressPayload {
		return Invalid("payload", "a progress signal's payload must be at most 4 KiB")
	}
	return CheckPayload(p)
}

// CheckPayload applies the bounds of a signal's payload on both
// transports: at most MaxPayload bytes of JSON, and, because the payload
// is journaled as it came, every string in it (key or value) free text of
// at most MaxText characters without NUL (docs/architecture.md#security-model).
func CheckPayload(p json.RawMessage) error {
	if len(p) == 0 {
		return nil
	}
	if len(p) > MaxPayload {
		return Invalid("payload", "payload must be at most 64 KiB")
	}
	if !json.Valid(p) {
		return Invalid("payload", "payload must be JSON")
	}
	if jsonHoldsNUL(p) {
		return Invalid("payload", "payload must not hold a NUL character")
	}
	dec := json.NewDecoder(bytes.NewReader(p))
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return Invalid("payload", "payload must be JSON")
		}
		if s, ok := tok.(string); ok && utf8.RuneCountInString(s) > MaxText {
			return Invalid("payload", "every string of a payload must be at most %d characters", MaxText)
		}
	}
}

// checkRunAttempt: run_id is a run's id and attempt is set, 1 or more.
func checkRunAttempt(runID string, attempt *int) error {
	if err := needUUID("run_id", runID); err != nil {
		return err
	}
	if attempt == nil {
		return Invalid("attempt", "attempt is required")
	}
	if *attempt < 1 {
		return Invalid("attempt", "attempt must be 1 or more")
	}
	return nil
}

func checkAttachBytes(attachID string, b []byte) error {
	if err := needUUID("attach_id", attachID); err != nil {
		return err
	}
	if len(b) > MaxAttachChunk {
		return Invalid("bytes", "bytes must be at most %d", MaxAttachChunk)
	}
	return nil
}

// checkSession: a session name is pam-<8 lowercase hex> and, since the
// name derives from the run's id (docs/architecture.md#data-model), the name of that run.
func checkSession(runID, name string) error {
	if !sessionNameRe.MatchString(name) {
		return Invalid("session_name", "session_name %s is not pam-<8 lowercase hex>", quote(name))
	}
	if want := "pam-" + runID[:8]; name != want {
		return Invalid("session_name", "session_name %s is not %s, the session of this run", quote(name), want)
	}
	return nil
}

func checkTermSize(rows, cols int) error {
	if !ValidTermSize(rows, cols) {
		field := "rows"
		if rows >= MinTermSize && rows <= MaxTermSize {
			field = "cols"
		}
		return Invalid(field, "size %dx%d is out of bounds: rows and cols must be %d to %d", rows, cols, MinTermSize, MaxTermSize)
	}
	return nil
}

func checkSeq(seq *int64) error {
	if seq != nil && *seq < 0 {
		return Invalid("seq", "seq must not be negative")
	}
	return nil
}

func checkCode(code string) error {
	if len(code) > maxCode || !codeRe.MatchString(code) {
		return Invalid("code", "code %s is not a lowercase code of at most %d characters", quote(code), maxCode)
	}
	return nil
}

// checkText bounds a free-text field to max characters of valid UTF-8
// without NUL, which PostgreSQL cannot store.
func checkText(field, s string, max int) error {
	if len(s) > max*utf8.UTFMax || utf8.RuneCountInString(s) > max {
		return Invalid(field, "%s must be at most %d characters", field, max)
	}
	if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
		return Invalid(field, "%s must be valid UTF-8 without NUL", field)
	}
	return nil
}

func checkTimestamp(t *time.Time) error {
	if t != nil && (t.Year() < 0 || t.Year() > 9999) {
		return Invalid("timestamp", "timestamp is out of range")
	}
	return nil
}

func needUUID(field, s string) error {
	if !ValidUUID(s) {
		return Invalid(field, "%s %s is not a lowercase UUID", field, quote(s))
	}
	return nil
}

// ValidUUID reports whether s is a UUID in canonical lowercase form, the
// form pam gives every id it makes and the only one it puts into tmux
// options, file names and frames.
func ValidUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	u, err := uuid.Parse(s)
	return err == nil && u.String() == s
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// jsonHoldsNUL reports whether a JSON value (valid) has a string, key or
// value, holding U+0000, which PostgreSQL's jsonb refuses.
func jsonHoldsNUL(raw []byte) bool {
	if !bytes.Contains(raw, []byte(`\u0000`)) {
		return false // the only way to spell NUL in JSON
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return false
		}
		if err != nil {
			return true // not reached for valid JSON; refuse rather than guess
		}
		if s, ok := tok.(string); ok && strings.ContainsRune(s, 0) {
			return true
		}
	}
}

// quote shows a value from a frame in a message: quoted, and cut short so
// that a message about a huge field stays small.
func quote(s string) string {
	const max = 40
	if len(s) <= max {
		return fmt.Sprintf("%q", s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q…", s[:cut])
}

// BoundText makes s fit a frame's free-text field: valid UTF-8, NUL
// bytes dropped, and cut to MaxText characters. Senders pass error
// messages and details through it, so that their frames pass Validate.
func BoundText(s string) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
	if utf8.RuneCountInString(s) <= MaxText {
		return s
	}
	n := 0
	for i := range s {
		if n == MaxText-1 {
			return s[:i] + "…"
		}
		n++
	}
	return s
}
