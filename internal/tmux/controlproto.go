package tmux

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strconv"
)

// The reading side of tmux's control mode (tmux -C; docs/architecture.md#capture-by-control-mode).
// A control client's output is lines: notifications ("%sessions-changed",
// "%exit …"), and for every command it sent one block
//
//	%begin TIME NUMBER FLAGS
//	… the command's output, raw, one line per line …
//	%end TIME NUMBER FLAGS        (or %error with the same three fields)
//
// The output inside a block is not escaped: a pane line that reads
// "%end …" is copied as is. A block therefore ends only at the line that
// repeats its own %begin fields exactly, which the pane's program would
// have to predict (the command number is the server's); and that program,
// running as pam's user under tmux, could drive the server directly
// anyway. Everything is bounded: a line longer than maxLine is cut (and
// the reply it belongs to marked overflowed), a reply keeps at most
// maxBody bytes.

// Bounds of what one control-mode reply may hold. A full 220×50 screen
// with colour is about 10–30 KiB; a line of a very wide pane with a
// change of attributes on every cell stays well below maxControlLine.
const (
	maxControlLine = 1 << 20
	maxControlBody = 8 << 20
	// maxNoteLine is what is kept of a notification line.
	maxNoteLine = 4 << 10
)

// controlKind says what a controlEvent is.
type controlKind int

const (
	// ctlReply is a %begin … %end (or %error) block.
	ctlReply controlKind = iota + 1
	// ctlNote is a notification outside any block ("%…").
	ctlNote
	// ctlExit is "%exit [reason]": the client is leaving.
	ctlExit
	// ctlStray is a line outside any block that is not a notification
	// (tmux writes none; kept for the error of a failed start).
	ctlStray
)

// controlEvent is one thing a control client's output said.
type controlEvent struct {
	kind controlKind
	// number and flags are a reply's %begin fields: flags is 1 for a
	// command the client sent on its input, 0 for one it was started with.
	number uint64
	flags  int
	// failed: the block ended with %error.
	failed bool
	// body is a reply's output: each line with its "\n", exactly as
	// `tmux capture-pane -p` would have written it to a pipe.
	body string
	// overflow: a line of the reply passed maxControlLine or the reply
	// passed maxControlBody; body is incomplete.
	overflow bool
	// line is a notification, stray line or exit reason (at most
	// maxNoteLine bytes).
	line string
}

// errBlockCut is a control client's output ending inside a block.
var errBlockCut = errors.New("control mode: output ended inside a reply")

// controlReader splits a control client's output into events.
type controlReader struct {
	r       *bufio.Reader
	maxLine int
	maxBody int
	line    []byte       // the current line when it spans reads, reused
	body    bytes.Buffer // the current reply's output, reused
}

func newControlReader(r io.Reader) *controlReader {
	return &controlReader{r: bufio.NewReaderSize(r, 64<<10), maxLine: maxControlLine, maxBody: maxControlBody}
}

// readLine returns the next line without its "\n", valid until the next
// call. long reports that the line passed maxLine: what is returned is
// its first maxLine bytes. A last line without "\n" is not a line: the
// client was cut off while writing it, and io.EOF is returned.
func (p *controlReader) readLine() (line []byte, long bool, err error) {
	chunk, err := p.r.ReadSlice('\n')
	if err == nil && len(chunk) <= p.maxLine+1 {
		return chunk[:len(chunk)-1], false, nil // the usual case: no copy
	}
	p.line = p.line[:0]
	for {
		if room := p.maxLine - len(p.line); room > 0 {
			c := chunk
			if n := len(c); n > 0 && c[n-1] == '\n' && err == nil {
				c = c[:n-1]
			}
			if len(c) > room {
				c, long = c[:room], true
			}
			p.line = append(p.line, c...)
		} else if len(chunk) > 1 || (len(chunk) == 1 && chunk[0] != '\n') {
			long = true
		}
		switch {
		case err == nil:
			return p.line, long, nil
		case errors.Is(err, bufio.ErrBufferFull):
			chunk, err = p.r.ReadSlice('\n')
		case errors.Is(err, io.EOF):
			return nil, false, io.EOF
		default:
			return nil, false, err
		}
	}
}

// next reads up to the next event. It returns io.EOF when the output
// ends between events, errBlockCut when it ends inside a block.
func (p *controlReader) next() (controlEvent, error) {
	line, long, err := p.readLine()
	if err != nil {
		return controlEvent{}, err
	}
	if guard, ok := bytes.CutPrefix(line, []byte("%begin ")); ok && !long {
		number, flags, ok := parseGuard(guard)
		if !ok {
			return controlEvent{kind: ctlStray, line: noteText(line)}, nil
		}
		return p.block(string(guard), number, flags)
	}
	if bytes.Equal(line, []byte("%exit")) {
		return controlEvent{kind: ctlExit}, nil
	}
	if reason, ok := bytes.CutPrefix(line, []byte("%exit ")); ok {
		return controlEvent{kind: ctlExit, line: noteText(reason)}, nil
	}
	if len(line) > 0 && line[0] == '%' {
		return controlEvent{kind: ctlNote, line: noteText(line)}, nil
	}
	return controlEvent{kind: ctlStray, line: noteText(line)}, nil
}

// block reads a reply's output up to the %end or %error line that
// repeats guard.
func (p *controlReader) block(guard string, number uint64, flags int) (controlEvent, error) {
	ev := controlEvent{kind: ctlReply, number: number, flags: flags}
	end, fail := []byte("%end "+guard), []byte("%error "+guard)
	p.body.Reset()
	for {
		line, long, err := p.readLine()
		if errors.Is(err, io.EOF) {
			return controlEvent{}, errBlockCut
		}
		if err != nil {
			return controlEvent{}, err
		}
		if !long && (bytes.Equal(line, end) || bytes.Equal(line, fail)) {
			ev.failed = bytes.Equal(line, fail)
			ev.body = p.body.String()
			return ev, nil
		}
		if long {
			ev.overflow = true
		}
		if ev.overflow || p.body.Len()+len(line)+1 > p.maxBody {
			ev.overflow = true
			continue
		}
		p.body.Write(line)
		p.body.WriteByte('\n')
	}
}

// parseGuard reads "TIME NUMBER FLAGS", the fields of %begin.
func parseGuard(g []byte) (number uint64, flags int, ok bool) {
	f := bytes.Fields(g)
	if len(f) != 3 {
		return 0, 0, false
	}
	if _, err := strconv.ParseInt(string(f[0]), 10, 64); err != nil {
		return 0, 0, false
	}
	number, err := strconv.ParseUint(string(f[1]), 10, 64)
	if err != nil {
		return 0, 0, false
	}
	flags, err = strconv.Atoi(string(f[2]))
	if err != nil {
		return 0, 0, false
	}
	return number, flags, true
}

func noteText(b []byte) string {
	if len(b) > maxNoteLine {
		b = b[:maxNoteLine]
	}
	return string(b)
}
