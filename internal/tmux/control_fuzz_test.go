package tmux

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

// readAll parses a whole control-mode stream with small bounds.
func readAll(data []byte, maxLine, maxBody int) ([]controlEvent, error) {
	p := newControlReader(bytes.NewReader(data))
	p.maxLine, p.maxBody = maxLine, maxBody
	var evs []controlEvent
	for {
		ev, err := p.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return evs, err
		}
		evs = append(evs, ev)
	}
}

// FuzzControlModeStream feeds arbitrary bytes to the control-mode reader,
// as a tmux server (or whatever sits on the pipe) might write them: no
// panic, an end, and every bound kept — no line in a reply longer than
// maxLine, no reply longer than maxBody, no notification longer than
// maxNoteLine — whatever the input. The list-panes parser gets the same
// bytes.
func FuzzControlModeStream(f *testing.F) {
	for _, s := range []string{
		"%begin 1 2 1\nhello\n%end 1 2 1\n",
		"%begin 1 2 0\n%end 1 2 0\n%session-changed $0 x\n%exit\n",
		"%begin 1 2 1\n%end 1 2 0\n%end 1 3 1\nstill body\n%error 1 2 1\n",
		"%begin 1 2 1\n" + strings.Repeat("x", 300) + "\n%end 1 2 1\n",
		"%begin x y z\nstray\n%begin 1 2\n%exit too long\n",
		"%begin 1 2 1\nunterminated",
		"%begin 99999999999999999999 1 1\n%end 99999999999999999999 1 1\n",
		"1 1 %0 80x24 1796111838 pam-0123abcd\n1 1 %1 80x24 x pam-0123abce\n0 1 %2 80x24 1 pam-0123abcf\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const maxLine, maxBody = 64, 256
		evs, err := readAll(data, maxLine, maxBody)
		if err != nil && !errors.Is(err, errBlockCut) {
			t.Fatalf("unexpected error %v", err)
		}
		for _, ev := range evs {
			switch ev.kind {
			case ctlReply:
				if len(ev.body) > maxBody {
					t.Fatalf("reply of %d bytes past the bound %d", len(ev.body), maxBody)
				}
				for l := range strings.SplitSeq(strings.TrimSuffix(ev.body, "\n"), "\n") {
					if len(l) > maxLine {
						t.Fatalf("reply line of %d bytes past the bound %d", len(l), maxLine)
					}
				}
				if len(ev.body) > 0 && ev.body[len(ev.body)-1] != '\n' {
					t.Fatalf("reply body %q does not end its last line", ev.body)
				}
			case ctlNote, ctlExit, ctlStray:
				if len(ev.line) > maxNoteLine {
					t.Fatalf("note of %d bytes", len(ev.line))
				}
			default:
				t.Fatalf("event of kind %d", ev.kind)
			}
		}
		for name, m := range parseMarks(string(data)) {
			if name.check() != nil || strings.ContainsAny(m.pane+m.size, " \n") {
				t.Fatalf("mark %v %+v from malformed input", name, m)
			}
		}
	})
}

// FuzzControlModeReplies builds a well-formed control-mode stream — the
// replies of several commands, whose output lines come from the fuzzer
// (anything: escapes, "%end …", "%begin …", "%exit", binary), with
// notifications between them — and reads it back: each reply comes out
// whole and in order, its body byte for byte what was put in, its
// %error kept, its flags kept. The one ambiguity of the protocol, a body
// line that repeats its own block's exact %end or %error line, is left
// out: tmux would end the block there too.
func FuzzControlModeReplies(f *testing.F) {
	f.Add([]byte("hello\n\x1b[1;31mred\x1b[0m\nwide 日本\n"), []byte("ok\n%end 1796111838 7 1\n%begin 1 2 1\n"), uint8(3))
	f.Add([]byte(""), []byte("\n\n\n"), uint8(0))
	f.Add([]byte("%exit\n%output %1 x\n"), []byte("%error 1796111838 8 1"), uint8(255))
	f.Fuzz(func(t *testing.T, a, b []byte, mix uint8) {
		bodies := [][]byte{a, b, append(append([]byte{}, b...), a...)}
		var stream bytes.Buffer
		type want struct {
			body   string
			number uint64
			flags  int
			failed bool
		}
		var wants []want
		for i, raw := range bodies {
			number := uint64(7 + i)
			flags := 1
			if mix&(1<<i) != 0 {
				flags = 0
			}
			failed := mix&(8<<i) != 0
			guard := fmt.Sprintf("1796111838 %d %d", number, flags)
			var body strings.Builder
			for l := range strings.SplitSeq(strings.TrimSuffix(string(raw), "\n"), "\n") {
				if len(raw) == 0 {
					break
				}
				if l == "%end "+guard || l == "%error "+guard {
					return
				}
				body.WriteString(l)
				body.WriteByte('\n')
			}
			if mix&(64<<(i%2)) != 0 {
				stream.WriteString("%sessions-changed\n%unlinked-window-add @3\n")
			}
			stream.WriteString("%begin " + guard + "\n" + body.String())
			if failed {
				stream.WriteString("%error " + guard + "\n")
			} else {
				stream.WriteString("%end " + guard + "\n")
			}
			wants = append(wants, want{body.String(), number, flags, failed})
		}
		stream.WriteString("%exit\n")
		evs, err := readAll(stream.Bytes(), maxControlLine, maxControlBody)
		if err != nil {
			t.Fatal(err)
		}
		var got []controlEvent
		exits := 0
		for _, ev := range evs {
			switch ev.kind {
			case ctlReply:
				got = append(got, ev)
			case ctlExit:
				exits++
			case ctlStray:
				t.Fatalf("stray line %q in a well-formed stream", ev.line)
			}
		}
		if exits != 1 || len(got) != len(wants) {
			t.Fatalf("%d replies and %d exits from %q, want %d and 1", len(got), exits, stream.Bytes(), len(wants))
		}
		for i, w := range wants {
			g := got[i]
			if g.body != w.body || g.number != w.number || g.flags != w.flags || g.failed != w.failed || g.overflow {
				t.Fatalf("reply %d = %+v, want %+v", i, g, w)
			}
		}
	})
}
