package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/term"

	"pam/internal/wire"
)

// What a run that waits for a person is asked (its attention_detail,
// docs/api.md#runs), as run list and run show print it. The text comes
// from an agent's screen: anything that could drive the terminal it is
// printed on is shown as an escape, never sent.

// questionWidth is QUESTION's width when stdout is not a terminal.
const questionWidth = 60

// minQuestionWidth is the least a terminal's QUESTION gets, however wide
// the other columns are.
const minQuestionWidth = 20

// questionColumn writes table (run list's rows, each ending where its
// QUESTION starts) with each run's question after its row: the first
// line, cut to what the terminal has room for.
func questionColumn(w io.Writer, table string, runs []wire.Run) {
	lines := strings.Split(strings.TrimSuffix(table, "\n"), "\n")
	room := questionWidth
	if f, ok := w.(*os.File); ok && isTerminal(w) {
		if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 0 {
			room = max(minQuestionWidth, cols-utf8.RuneCountInString(lines[0])-1)
		}
	}
	for i, l := range lines {
		q := "QUESTION"
		if i > 0 && i <= len(runs) {
			q = questionCell(runs[i-1], room)
		}
		fmt.Fprintln(w, strings.TrimRight(l+q, " "))
	}
}

// questionCell is a run's question for a table: its first non-blank
// line, safe to print, cut to room characters; "-" when it has none.
func questionCell(r wire.Run, room int) string {
	d := r.AttentionDetail
	if d == nil {
		return "-"
	}
	line := ""
	for _, l := range strings.Split(d.Text, "\n") {
		if l = strings.TrimSpace(safeText(l)); l != "" {
			line = l
			break
		}
	}
	if line == "" && d.ResetsAt != nil {
		line = "usage limit, resets " + rfc3339(d.ResetsAt)
	}
	if line == "" {
		return "-"
	}
	return cut(line, room)
}

// cut shortens s to at most n characters, marking the cut with "…".
func cut(s string, n int) string {
	if n < 1 || utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// printQuestion prints what the run is asked, under run show's table:
// the question, its choices with the command that picks each, or when a
// usage limit resets. Nothing when it is asked nothing.
func printQuestion(w io.Writer, r *wire.Run) {
	d := r.AttentionDetail
	if d == nil {
		return
	}
	source := ""
	if d.Source != "" {
		source = ", from " + safeText(d.Source)
	}
	fmt.Fprintf(w, "\nasks (%s%s):\n", attentionCell(*r), source)
	text := strings.Trim(safeText(d.Text), "\n ")
	if text == "" {
		text = "(no question text)"
	}
	for _, l := range strings.Split(text, "\n") {
		fmt.Fprintf(w, "  %s\n", l)
	}
	if d.ResetsAt != nil {
		fmt.Fprintf(w, "  waiting for the usage limit, resets at %s\n", rfc3339(d.ResetsAt))
	}
	if len(d.Choices) == 0 {
		return
	}
	fmt.Fprintln(w, "choices:")
	tw := table(w)
	for _, c := range d.Choices {
		key := safeText(c.Key)
		how := "pam run keys " + shortID(r.ID) + " --key " + key
		if !wire.AllowedKeys[c.Key] {
			how = "(not a key pam can press)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", key, safeText(c.Label), how)
	}
	tw.Flush()
}

// safeText is s with every control or format character but the newline
// shown as an escape (ESC as \x1b, U+202E as \u202e) and invalid UTF-8
// as U+FFFD: text from a screen printed on the operator's terminal
// cannot move its cursor, recolour it or reorder what it shows.
func safeText(s string) string {
	if strings.IndexFunc(s, unsafeRune) < 0 && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			b.WriteRune(utf8.RuneError)
		case unsafeRune(r) && r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func unsafeRune(r rune) bool {
	return r != '\n' && (unicode.IsControl(r) || unicode.Is(unicode.Cf, r))
}
