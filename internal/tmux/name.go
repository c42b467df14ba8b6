package tmux

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/google/uuid"
)

// ErrInvalidName is returned, before tmux runs, for a session name that
// does not match ^pam-[0-9a-f]{8}$ (a tmux safety rule, docs/architecture.md#tmux-safety).
var ErrInvalidName = errors.New("invalid session name")

var (
	sessionRe = regexp.MustCompile(`^pam-[0-9a-f]{8}$`)
	titleRe   = regexp.MustCompile(`^[a-z0-9-]{1,40}$`)
)

// SessionName is a validated session name, pam-<8 lowercase hex>. The
// field is unexported so that a name can only come from ParseSessionName
// or SessionForRun; every operation still checks it again before tmux
// runs, so the zero value is refused too.
type SessionName struct{ s string }

// ParseSessionName validates s against ^pam-[0-9a-f]{8}$.
func ParseSessionName(s string) (SessionName, error) {
	if !sessionRe.MatchString(s) {
		return SessionName{}, fmt.Errorf("%w %q: want pam-<8 lowercase hex>", ErrInvalidName, s)
	}
	return SessionName{s: s}, nil
}

// SessionForRun is the session name of a run: pam- and the first 8 hex
// characters of its UUID, which must be in canonical lowercase form.
func SessionForRun(runID string) (SessionName, error) {
	if !ValidRunID(runID) {
		return SessionName{}, fmt.Errorf("%w: run id %q is not a lowercase UUID", ErrInvalidName, runID)
	}
	return ParseSessionName("pam-" + runID[:8])
}

// String is the name as tmux knows it.
func (n SessionName) String() string { return n.s }

// IsZero reports whether n is the zero (invalid) name.
func (n SessionName) IsZero() bool { return n.s == "" }

// check is run before every tmux invocation that names a session.
func (n SessionName) check() error {
	if !sessionRe.MatchString(n.s) {
		return fmt.Errorf("%w %q", ErrInvalidName, n.s)
	}
	return nil
}

// target is the -t argument naming the session's current pane (or
// window, or the session itself). The leading "=" asks tmux for an exact
// match: without it tmux falls back to prefix and fnmatch matching, and
// pam-0123abcd could resolve to a foreign session called pam-0123abcd-x.
// The trailing ":" makes the form valid for pane and window targets too.
func (n SessionName) target() string { return "=" + n.s + ":" }

// ValidRunID reports whether s is a UUID in canonical lowercase form, the
// only form pam puts into tmux options and file names.
func ValidRunID(s string) bool {
	u, err := uuid.Parse(s)
	return err == nil && u.String() == s
}

// ValidTitle reports whether s may be a window title: ^[a-z0-9-]{1,40}$.
func ValidTitle(s string) bool { return titleRe.MatchString(s) }

// DefaultTitle is the window title used when a task has no usable slug.
const DefaultTitle = "run"

// Slug turns a task title into a window title: lowercase ASCII letters
// and digits, every other run of characters one "-", at most 40
// characters, DefaultTitle when nothing is left.
func Slug(title string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(title) {
		if b.Len() >= 40 {
			break
		}
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') {
			dash = true
			continue
		}
		if dash && b.Len() > 0 {
			b.WriteByte('-')
		}
		dash = false
		b.WriteRune(r)
	}
	s := b.String()
	if len(s) > 40 {
		s = s[:40]
	}
	s = strings.Trim(s, "-")
	if !ValidTitle(s) {
		return DefaultTitle
	}
	return s
}
