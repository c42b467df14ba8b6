// Package signaltoken mints and verifies the run-scoped signal tokens of
// docs/architecture.md#internal-api and docs/architecture.md#security-model:
// HMAC-SHA256 of (run, attempt, host) with the server's secret, prefixed
// by the host and attempt it speaks for so the server can recompute it.
// The secret lives in the database (store.SignalSecret); this package
// only computes, so that the rule is one place and testable without one.
package signaltoken

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

const prefix = "pst1"

// Mint is the signal token of runID's attempt on hostID under key.
func Mint(key []byte, runID string, attempt int, hostID string) string {
	return fmt.Sprintf("%s.%s.%d.%s", prefix, hostID, attempt, mac(key, runID, attempt, hostID))
}

// Token is a well-formed signal token, not yet checked against a key.
type Token struct {
	HostID  string
	Attempt int
	mac     string
}

// Parse reads token's form: what it claims to be bound to. ok is false
// for anything that cannot be a signal token, which needs no key to tell.
func Parse(token string) (t Token, ok bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 4 || parts[0] != prefix {
		return Token{}, false
	}
	if _, err := uuid.Parse(parts[1]); err != nil {
		return Token{}, false
	}
	n, err := strconv.Atoi(parts[2])
	if err != nil || n < 1 {
		return Token{}, false
	}
	return Token{HostID: parts[1], Attempt: n, mac: parts[3]}, true
}

// Good reports whether t was minted for runID under key. The comparison
// is constant-time (hmac.Equal).
func (t Token) Good(key []byte, runID string) bool {
	return hmac.Equal([]byte(mac(key, runID, t.Attempt, t.HostID)), []byte(t.mac))
}

// Verify checks token for runID under key and returns the host and
// attempt it is bound to; ok is false for a token not good for runID.
func Verify(key []byte, runID, token string) (hostID string, attempt int, ok bool) {
	t, ok := Parse(token)
	if !ok || !t.Good(key, runID) {
		return "", 0, false
	}
	return t.HostID, t.Attempt, true
}

func mac(key []byte, runID string, attempt int, hostID string) string {
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s|%d|%s", runID, attempt, hostID)
	return hex.EncodeToString(m.Sum(nil))
}
