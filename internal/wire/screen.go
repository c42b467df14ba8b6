package wire

import "unicode/utf8"

// MaxChoices bounds AttentionDetail.Choices: one per key of
// ValidChoiceKey.
const MaxChoices = 12

// ValidChoiceKey reports whether k may press a choice: a digit 0–9, y or
// n, each typed as text by the keys allowlist (docs/api.md#resources).
func ValidChoiceKey(k string) bool {
	return len(k) == 1 && (k[0] >= '0' && k[0] <= '9' || k == "y" || k == "n")
}

// CheckAttentionText holds a question's text (multiline) or a choice's
// label (one line) to what attention_detail stores: at most
// MaxAttentionText bytes of valid UTF-8 without control characters (but
// newlines in a text), escape sequences or bidirectional controls, so
// that a browser or a terminal can show it as it is.
func CheckAttentionText(field, s string, multiline bool) error {
	if len(s) > MaxAttentionText {
		return Invalid(field, "%s must be at most %d bytes", field, MaxAttentionText)
	}
	if !utf8.ValidString(s) {
		return Invalid(field, "%s must be valid UTF-8", field)
	}
	for _, r := range s {
		if (r < 0x20 && !(multiline && r == '\n')) || (r >= 0x7f && r <= 0x9f) ||
			r == 0x061c || r == 0x200e || r == 0x200f || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069) {
			return Invalid(field, "%s must be plain text: a control character is not allowed (U+%04X)", field, r)
		}
	}
	return nil
}
