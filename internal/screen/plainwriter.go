package screen

import (
	"bytes"
	"io"
	"strconv"
	"strings"
)

// PlainWriter turns a stream of captured screens — a run log: lines with
// colours and other escape sequences, as capture-pane -p -e or the PTY
// holder's model render them — into plain text, line by line, for a
// reader that is not a terminal (grep, a file). A sequence inside a word
// never splits it: "hel\x1b[1mlo" reads "hello". A cursor move forward
// (CSI n C, which a renderer may use for a run of blanks) becomes that
// many spaces; every other sequence and control character goes (Plain),
// and spaces at a line's end are dropped. A line is written when its
// newline arrives; Close writes a last line that has none.
type PlainWriter struct {
	w    io.Writer
	line []byte
}

// NewPlainWriter returns a PlainWriter writing to w.
func NewPlainWriter(w io.Writer) *PlainWriter { return &PlainWriter{w: w} }

// maxPending bounds the bytes kept of one line: Plain reads no more.
const maxPending = maxLine * 8

// Write takes any part of the stream; it reports all of b written unless
// w fails.
func (p *PlainWriter) Write(b []byte) (int, error) {
	n := len(b)
	for {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			p.add(b)
			return n, nil
		}
		p.add(b[:i])
		if err := p.emit("\n"); err != nil {
			return 0, err
		}
		b = b[i+1:]
	}
}

// Close writes the last line if it had no newline. It does not close w.
func (p *PlainWriter) Close() error {
	if len(p.line) == 0 {
		return nil
	}
	return p.emit("")
}

func (p *PlainWriter) add(b []byte) {
	if room := maxPending - len(p.line); room > 0 {
		p.line = append(p.line, b[:min(len(b), room)]...)
	}
}

func (p *PlainWriter) emit(end string) error {
	s := strings.TrimRight(Plain(cursorForward(string(p.line))), " ")
	p.line = p.line[:0]
	_, err := io.WriteString(p.w, s+end)
	return err
}

// cursorForward replaces each CSI n C (cursor forward n columns, 1 when
// n is omitted) in s with n spaces, at most a line's width in all.
func cursorForward(s string) string {
	if !strings.Contains(s, "\x1b[") {
		return s
	}
	var b strings.Builder
	added := 0
	for {
		i := strings.Index(s, "\x1b[")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		j := i + 2
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		if j < len(s) && s[j] == 'C' && j-(i+2) <= 4 {
			n, err := strconv.Atoi(s[i+2 : j])
			if err != nil || n == 0 {
				n = 1 // omitted or 0: one column
			}
			n = min(n, maxLine-added)
			b.WriteString(s[:i])
			b.WriteString(strings.Repeat(" ", max(n, 0)))
			added += max(n, 0)
			s = s[j+1:]
			continue
		}
		b.WriteString(s[:i+2])
		s = s[i+2:]
	}
}
