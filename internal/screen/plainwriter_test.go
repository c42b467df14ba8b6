package screen

import (
	"bytes"
	"strings"
	"testing"
)

// A run log read as plain text: colours inside a word leave it whole,
// OSC titles and hyperlinks go, a cursor move forward is blanks, and the
// result is the same however the stream is cut into writes.
func TestPlainWriter(t *testing.T) {
	t.Parallel()
	in := "--- 2026-12-02T00:00:00Z attempt 1 ---\n" +
		"\x1b[1mhel\x1b[0;32mlo\x1b[0m wor\x1b[38;2;1;2;3mld\x1b[0m   \x1b[0m\n" +
		"\x1b]0;a title\x07\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\ text\n" +
		"a\x1b[3Cb\x1b[Cc\n" +
		"\n" +
		"tail \x1b[7mwithout newline"
	want := "--- 2026-12-02T00:00:00Z attempt 1 ---\n" +
		"hello world\n" +
		"link text\n" +
		"a   b c\n" +
		"\n" +
		"tail without newline"
	for _, size := range []int{len(in), 1, 2, 3, 7} {
		var out bytes.Buffer
		p := NewPlainWriter(&out)
		for b := []byte(in); len(b) > 0; {
			n := min(size, len(b))
			if k, err := p.Write(b[:n]); err != nil || k != n {
				t.Fatalf("write: %d %v", k, err)
			}
			b = b[n:]
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if out.String() != want {
			t.Errorf("writes of %d bytes:\n%q\nwant\n%q", size, out.String(), want)
		}
	}
	// A line without end costs no more than Plain reads.
	var out bytes.Buffer
	p := NewPlainWriter(&out)
	for range 100 {
		p.Write([]byte(strings.Repeat("x", 4096)))
	}
	p.Close()
	if out.Len() > maxLine {
		t.Errorf("an endless line gave %d bytes", out.Len())
	}
}
