package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// KeyNames are the named keys programmatic input may press, in the order
// docs/api.md#keys lists them: what agents' menus and questions take
// (arrows, digits, y and n) and the editing keys of a prompt. Each is a
// tmux key name, and the pty executor maps each to the bytes a terminal
// sends for it.
var KeyNames = []string{
	"Enter", "Escape", "Tab", "BTab", "Space", "BSpace", "DC",
	"Up", "Down", "Left", "Right", "Home", "End", "PageUp", "PageDown",
	"C-c", "C-d",
	"0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "y", "n",
}

// AllowedKeys is KeyNames as a set.
var AllowedKeys = func() map[string]bool {
	m := make(map[string]bool, len(KeyNames))
	for _, k := range KeyNames {
		m[k] = true
	}
	return m
}()

// allowedKeysText is the allowlist as a refusal names it.
const allowedKeysText = "Enter, Escape, Tab, BTab, Space, BSpace, DC, Up, Down, Left, Right, Home, End, PageUp, PageDown, C-c, C-d, 0-9, y, n"

// Limits of one keys request (docs/api.md#keys): entries, and bytes of
// text and paste together.
const (
	MaxKeyEntries = 64
	MaxKeyText    = 4 << 10
)

// textRefused are the printable ASCII characters a typed text may not
// hold: what a shell would read as its own, should the text ever reach
// one.
const textRefused = "|&;$`"

// ValidateKeys applies the keys allowlist of docs/api.md#keys. Each entry
// is exactly one of:
//
//   - key: a name from KeyNames;
//   - text: printable ASCII (0x20–0x7E) without | & ; $ or backtick,
//     typed key by key;
//   - paste: valid UTF-8 of printable characters and newlines (no other
//     control or format character, so no escape sequence and nothing that
//     ends a bracketed paste), pasted as one piece;
//
// at most MaxKeyEntries entries and MaxKeyText bytes of text and paste.
// The server checks it and the worker checks it again before any tmux
// call or holder write. A refused entry is key_not_allowed naming it
// (details.index); a list too short or too long is validation_failed.
func ValidateKeys(keys []Key) error {
	if len(keys) == 0 {
		return Invalid("keys", "keys must hold at least one entry")
	}
	if len(keys) > MaxKeyEntries {
		return Invalid("keys", "at most %d key entries per request", MaxKeyEntries)
	}
	total := 0
	for i, k := range keys {
		refuse := func(format string, args ...any) error {
			return Errorf(CodeKeyNotAllowed, "keys[%d]: %s", i, fmt.Sprintf(format, args...)).With("index", i)
		}
		set := 0
		for _, s := range []string{k.Key, k.Text, k.Paste} {
			if s != "" {
				set++
			}
		}
		switch {
		case set > 1:
			return refuse("an entry is one of key, text or paste, not several")
		case k.Key != "":
			if !AllowedKeys[k.Key] {
				return refuse("key %s is not allowed; the keys are %s (text goes in \"text\")", quote(k.Key), allowedKeysText)
			}
		case k.Text != "":
			total += len(k.Text)
			if total > MaxKeyText {
				return refuse("more than %d bytes of text and paste in one request", MaxKeyText)
			}
			for j := 0; j < len(k.Text); j++ {
				c := k.Text[j]
				switch {
				case c < 0x20 || c > 0x7e:
					return refuse("text holds a byte that is not printable ASCII (0x%02x at %d); send keys by name, or several lines as a paste", c, j)
				case strings.IndexByte(textRefused, c) >= 0:
					return refuse("text holds %q at %d: | & ; $ and backtick cannot be typed", string(c), j)
				}
			}
		case k.Paste != "":
			total += len(k.Paste)
			if total > MaxKeyText {
				return refuse("more than %d bytes of text and paste in one request", MaxKeyText)
			}
			if !utf8.ValidString(k.Paste) {
				return refuse("paste is not valid UTF-8")
			}
			for j, r := range k.Paste {
				if r != '\n' && !unicode.IsGraphic(r) {
					return refuse("paste holds a control character (%U at byte %d); only printable text and newlines are pasted", r, j)
				}
			}
		default:
			return refuse("an entry needs a key, a text or a paste")
		}
	}
	return nil
}

// CodeKeyNotAllowed is the error code of a refused key entry.
const CodeKeyNotAllowed = "key_not_allowed"

// decodeStrictBytes decodes exactly one JSON value with unknown fields
// refused.
func decodeStrictBytes(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}
