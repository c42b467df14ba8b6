package screen

import (
	"strings"
	"unicode/utf8"
)

// maxLine bounds the plain text kept of one line: wider than any
// terminal's line, so a hostile capture costs no more than a screenful.
const maxLine = 4096

// bottom is the bottom block of a capture (BlockLines non-blank lines,
// top to bottom), read from its end: the lines above it cost nothing.
func bottom(capture string) []line {
	var rev []line
	end := len(capture)
	for end >= 0 && len(rev) < BlockLines {
		start := strings.LastIndexByte(capture[:end], '\n') + 1
		if l, ok := plainLine(capture[start:end]); ok {
			rev = append(rev, l)
		}
		end = start - 1
	}
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	return rev
}

// plainLine is one line of a capture as plain text, and whether it is
// not blank. Escape sequences and control characters are removed (a tab
// and a no-break space read as a space), and so is a box's border on
// either side; indent counts the spaces left of the text inside it.
func plainLine(raw string) (line, bool) {
	s := strings.TrimRight(Plain(raw), " ")
	lead := len(s) - len(strings.TrimLeft(s, " "))
	if r, n := utf8.DecodeRuneInString(s[lead:]); n > 0 && isBoxSide(r) {
		s = s[lead+n:]
	}
	if r, n := utf8.DecodeLastRuneInString(s); n > 0 && isBoxSide(r) {
		s = strings.TrimRight(s[:len(s)-n], " ")
	}
	indent := len(s) - len(strings.TrimLeft(s, " "))
	s = s[indent:]
	if s == "" || onlyRules(s) {
		return line{}, false
	}
	return line{text: s, indent: indent}, true
}

// Plain removes from s every escape sequence (CSI, OSC, DCS and the
// other ESC sequences), every C0 and C1 control character, DEL and the
// Unicode bidirectional controls, turns tabs and no-break spaces into
// spaces and invalid UTF-8 into U+FFFD, and cuts the result to maxLine
// bytes. What it returns can be shown in a browser or a terminal as it
// is. s is one line: a newline is removed like any control.
func Plain(s string) string {
	if len(s) > maxLine*8 {
		s = s[:maxLine*8] // escape sequences included: a line's worth at most
	}
	if clean(s) {
		if len(s) > maxLine {
			return s[:maxLine]
		}
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s) && b.Len() < maxLine; {
		c := s[i]
		switch {
		case c == 0x1b:
			i = skipEscape(s, i+1)
			continue
		case c == '\t':
			b.WriteByte(' ')
			i++
			continue
		case c < 0x20 || c == 0x7f:
			i++
			continue
		case c < utf8.RuneSelf:
			b.WriteByte(c)
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteRune(utf8.RuneError)
		case r == '\u00a0':
			b.WriteByte(' ')
		case r >= 0x80 && r <= 0x9f, isBidi(r):
		default:
			b.WriteRune(r)
		}
	}
	out := b.String()
	if len(out) > maxLine {
		cut := maxLine
		for cut > 0 && !utf8.RuneStart(out[cut]) {
			cut--
		}
		out = out[:cut]
	}
	return out
}

// clean reports whether s is printable ASCII: nothing to remove.
func clean(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return false
		}
	}
	return true
}

// skipEscape returns the index after the escape sequence whose ESC is
// just before s[i].
func skipEscape(s string, i int) int {
	if i >= len(s) {
		return i
	}
	switch s[i] {
	case '[': // CSI: parameters, then one final byte
		for i++; i < len(s); i++ {
			if c := s[i]; c >= 0x40 && c <= 0x7e {
				return i + 1
			}
		}
		return i
	case ']', 'P', 'X', '^', '_': // a string, ended by BEL or ST
		for i++; i < len(s); i++ {
			if s[i] == 0x07 {
				return i + 1
			}
			if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '\\' {
				return i + 2
			}
		}
		return i
	case '(', ')', '*', '+', '-', '.', '/', '#', '%', ' ': // one more byte
		return min(i+2, len(s))
	}
	return i + 1
}

// isBidi reports the Unicode bidirectional controls, which would let a
// label reorder the text around it.
func isBidi(r rune) bool {
	return r == 0x061c || r == 0x200e || r == 0x200f || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

// isBoxSide reports a box's vertical border.
func isBoxSide(r rune) bool {
	switch r {
	case '│', '┃', '║', '╎', '╏', '┆', '┇', '┊', '┋':
		return true
	}
	return false
}

// onlyRules reports whether s holds nothing but box-drawing characters
// and spaces: a frame or a rule, blank for reading.
func onlyRules(s string) bool {
	for _, r := range s {
		if r != ' ' && (r < 0x2500 || r > 0x257f) {
			return false
		}
	}
	return true
}
