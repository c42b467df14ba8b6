package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// AllowedKeys are the named keys programmatic input may send (docs/api.md#resources).
var AllowedKeys = map[string]bool{"Enter": true, "C-c": true, "C-d": true, "BSpace": true, "DC": true}

// Limits of one keys request (docs/api.md#resources).
const (
	MaxKeyEntries = 64
	MaxKeyText    = 4 << 10
)

// ValidateKeys applies the allowlist of docs/api.md#resources: named keys from AllowedKeys,
// text of printable ASCII without | & ; $ or backtick, at most 64 entries
// and 4 KiB of text. The server checks it and the worker checks it again
// before tmux runs. The error is 400 key_not_allowed naming the entry.
func ValidateKeys(keys []Key) error {
	if len(keys) == 0 {
		return Invalid("keys", "keys must hold at least one entry")
	}
	if len(keys) > MaxKeyEntries {
		return Invalid("keys", "at most %d key entries per request", MaxKeyEntries)
	}
	total := 0
	for i, k := range keys {
		refuse := func(why string) error {
			return Errorf(CodeKeyNotAllowed, "keys[%d]: %s", i, why).With("index", i)
		}
		switch {
		case k.Key != "" && k.Text != "":
			return refuse("an entry is either a key or a text, not both")
		case k.Key != "":
			if !AllowedKeys[k.Key] {
				return refuse(fmt.Sprintf("key %s is not allowed (Enter, C-c, C-d, BSpace, DC)", quote(k.Key)))
			}
		case k.Text != "":
			total += len(k.Text)
			if total > MaxKeyText {
				return refuse(fmt.Sprintf("more than %d bytes of text", MaxKeyText))
			}
			for _, c := range []byte(k.Text) {
				if c < 0x20 || c > 0x7e || strings.IndexByte("|&;$`", c) >= 0 {
					return refuse(fmt.Sprintf("text holds a character that is not allowed (0x%02x)", c))
				}
			}
		default:
			return refuse("an entry needs a key or a text")
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
