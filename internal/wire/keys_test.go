package wire

import (
	"strings"
	"testing"
)

// TestValidateKeys: the allowlist of docs/api.md#keys, entry by entry:
// every named key of a menu or a prompt, typed text, a paste of lines;
// and what is refused, with the entry it names and a message that says
// why.
func TestValidateKeys(t *testing.T) {
	for _, k := range []string{"Enter", "Escape", "Tab", "BTab", "Space", "BSpace", "DC", "Up", "Down", "Left", "Right",
		"Home", "End", "PageUp", "PageDown", "C-c", "C-d", "0", "1", "5", "9", "y", "n"} {
		if err := ValidateKeys([]Key{{Key: k}}); err != nil {
			t.Errorf("key %s refused: %v", k, err)
		}
	}
	ok := [][]Key{
		{{Text: "hello"}, {Key: "Enter"}},
		{{Text: "-t"}, {Text: "Enter"}, {Text: "C-c"}, {Text: "x -- y"}},
		{{Paste: "line one\nline two; $(not run) | `nor this` & café ✓"}, {Key: "Enter"}},
		{{Text: strings.Repeat("a", 2048)}, {Paste: strings.Repeat("b", 2048)}},
		make([]Key, MaxKeyEntries),
	}
	for i := range ok[len(ok)-1] {
		ok[len(ok)-1][i] = Key{Key: "Down"}
	}
	for _, keys := range ok {
		if err := ValidateKeys(keys); err != nil {
			t.Errorf("%.80q refused: %v", keys, err)
		}
	}
	bad := []struct {
		keys  []Key
		index int    // -1: validation_failed
		says  string // in the message
	}{
		{nil, -1, "at least one"},
		{make([]Key, MaxKeyEntries+1), -1, "at most 64"},
		{[]Key{{Key: "Enter"}, {Key: "F1"}}, 1, `key "F1" is not allowed; the keys are Enter, Escape`},
		{[]Key{{Key: "C-b"}}, 0, "not allowed"},
		{[]Key{{Key: "Y"}}, 0, "not allowed"},
		{[]Key{{Key: "10"}}, 0, "not allowed"},
		{[]Key{{Key: "Enter;"}}, 0, "not allowed"},
		{[]Key{{Key: "-t"}}, 0, "not allowed"},
		{[]Key{{Key: "Enter", Text: "x"}}, 0, "not several"},
		{[]Key{{Text: "x", Paste: "y"}}, 0, "not several"},
		{[]Key{{}}, 0, "needs a key"},
		{[]Key{{Text: "rm -rf / ; echo"}}, 0, `";"`},
		{[]Key{{Text: "$(touch /tmp/x)"}}, 0, `"$"`},
		{[]Key{{Text: "`id`"}}, 0, "\"`\""},
		{[]Key{{Text: "a|b"}}, 0, `"|"`},
		{[]Key{{Text: "a&"}}, 0, `"&"`},
		{[]Key{{Text: "two\nlines"}}, 0, "0x0a"},
		{[]Key{{Text: "\x1b[2J"}}, 0, "0x1b"},
		{[]Key{{Text: "café"}}, 0, "not printable ASCII"},
		{[]Key{{Key: "Enter"}, {Paste: "ok\x1b[201~then keys"}}, 1, "U+001B"},
		{[]Key{{Paste: "a\rb"}}, 0, "U+000D"},
		{[]Key{{Paste: "a\tb"}}, 0, "U+0009"},
		{[]Key{{Paste: "\u009b2J"}}, 0, "U+009B"},
		{[]Key{{Paste: "a\u202eb"}}, 0, "U+202E"},
		{[]Key{{Paste: "a\x00b"}}, 0, "U+0000"},
		{[]Key{{Paste: "bad \xff utf-8"}}, 0, "UTF-8"},
		{[]Key{{Text: strings.Repeat("a", 4000)}, {Paste: strings.Repeat("b", 97)}}, 1, "more than 4096 bytes"},
	}
	for _, c := range bad {
		err := ValidateKeys(c.keys)
		e, isWire := AsError(err)
		switch {
		case !isWire:
			t.Errorf("%.60q: %v, want a refusal", c.keys, err)
			continue
		case c.index < 0 && e.Code != CodeValidationFailed,
			c.index >= 0 && (e.Code != CodeKeyNotAllowed || e.Details["index"] != c.index):
			t.Errorf("%.60q: %s %v, want entry %d refused", c.keys, e.Code, e.Details, c.index)
		}
		if !strings.Contains(e.Message, c.says) {
			t.Errorf("%.60q: message %q does not say %q", c.keys, e.Message, c.says)
		}
	}
}
