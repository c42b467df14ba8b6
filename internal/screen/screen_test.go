package screen

import (
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"pam/internal/wire"
)

// A provider's patterns as the tests use them: Claude Code's kind of
// screens (the built-ins are tested against the real CLIs' screens in
// package provider).
var tp = MustCompile(
	[]string{`Do you want to proceed\?`, `Do you want to make this edit to`, `Do you trust the files in this folder\?`, `Allow command\?`},
	[]string{`esc to interrupt`},
	[]string{`usage limit reached`, `limit reached\s*[∙·]\s*resets`, `You[’']ve hit your usage limit`},
)

// sgr colours s the way capture-pane -e shows it.
func sgr(s string) string { return "\x1b[38;5;174m" + s + "\x1b[39m" }

// screenOf lays lines out as a 50-row capture: the lines at the top, the
// rest blank, as Claude Code draws inline.
func screenOf(lines ...string) string {
	out := strings.Join(lines, "\n") + "\n"
	return out + strings.Repeat("\n", max(0, 50-len(lines)))
}

var claudeBash = screenOf(
	sgr("╭────────────────────────────────────────╮"),
	"│ Bash command                           │",
	"│                                        │",
	"│   rm -rf build                         │",
	"│   Remove the build folder              │",
	"│                                        │",
	"│ Do you want to proceed?                │",
	"│ "+sgr("❯")+" \x1b[1m1. Yes\x1b[0m                            │",
	"│   2. Yes, and don't ask again for this session │",
	"│   3. No, and tell Claude what to do differently \x1b[2m(esc)\x1b[0m │",
	sgr("╰────────────────────────────────────────╯"),
)

var claudeEdit = screenOf(
	"⏺ Update(main.go)",
	"────────────────────────────────────────────────",
	" Edit file",
	" main.go",
	"   12 -  fmt.Println(\"a\")",
	"   12 +  fmt.Println(\"b\")",
	" Do you want to make this edit to main.go?",
	" ❯ 1. Yes",
	"   2. Yes, allow all edits during this session (shift+tab)",
	"   3. No, and tell Claude what to do differently (esc)",
	"",
	"   Esc to cancel",
)

// ch is one choice.
func ch(key, label string) wire.Choice { return wire.Choice{Key: key, Label: label} }

var yn = []wire.Choice{{Key: "y", Label: "Yes"}, {Key: "n", Label: "No"}}

func TestRead(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skip("no tzdata:", err)
	}
	now := time.Date(2026, 12, 1, 10, 30, 0, 0, time.UTC) // 11:30 in Berlin
	at := func(s string) *time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return &v
	}
	claudeChoices := []wire.Choice{{Key: "1", Label: "Yes"}, {Key: "2", Label: "Yes, and don't ask again for this session"}, {Key: "3", Label: "No, and tell Claude what to do differently (esc)"}}
	for _, tc := range []struct {
		name    string
		capture string
		p       *Patterns
		want    Reading
	}{
		{"empty", "", tp, none()},
		{"a shell prompt", screenOf("$ make", "ok", "$ "), tp, none()},
		{"(y/n) on the last line", screenOf("$ ./install.sh", sgr("Continue? (y/n) ")), nil,
			Reading{Attention: wire.AttentionNeedsInput, Text: "Continue? (y/n)", Choices: yn}},
		{"[y/N]", screenOf("Overwrite config.toml? [y/N] "), nil,
			Reading{Attention: wire.AttentionNeedsInput, Text: "Overwrite config.toml? [y/N]", Choices: yn}},
		{"[Y/n]", "Proceed with the upgrade [Y/n]\n", nil,
			Reading{Attention: wire.AttentionNeedsInput, Text: "Proceed with the upgrade [Y/n]", Choices: yn}},
		{"(yes/no): no key answers it", screenOf("Are you sure you want to continue connecting (yes/no)? "), nil,
			Reading{Attention: wire.AttentionNeedsInput, Text: "Are you sure you want to continue connecting (yes/no)?"}},
		{"Press Enter to continue", screenOf("Setup done.", "Press ENTER to continue"), nil,
			Reading{Attention: wire.AttentionNeedsInput, Text: "Press ENTER to continue"}},
		{"Do you trust, generic", screenOf("Do you trust the authors of this repository? "), nil,
			Reading{Attention: wire.AttentionNeedsInput, Text: "Do you trust the authors of this repository?"}},
		{"typed but not entered: the same question", screenOf("Continue? (y/n) y"), nil,
			Reading{Attention: wire.AttentionNeedsInput, Text: "Continue? (y/n)", Choices: yn}},
		{"(y/n) answered: no longer asked", screenOf("Continue? (y/n) y", "installing…"), nil, none()},
		{"generic only on the last line, even with patterns", screenOf("Do you want to proceed? yes", "done"), nil, none()},
		{"claude's permission menu in a box", claudeBash, tp, Reading{Attention: wire.AttentionNeedsInput,
			Text:    "Do you want to proceed?\n❯ 1. Yes\n2. Yes, and don't ask again for this session\n3. No, and tell Claude what to do differently (esc)",
			Choices: claudeChoices}},
		{"claude's edit question, footer left out", claudeEdit, tp, Reading{Attention: wire.AttentionNeedsInput,
			Text: "Do you want to make this edit to main.go?\n❯ 1. Yes\n2. Yes, allow all edits during this session (shift+tab)\n3. No, and tell Claude what to do differently (esc)",
			Choices: []wire.Choice{{Key: "1", Label: "Yes"}, {Key: "2", Label: "Yes, allow all edits during this session (shift+tab)"},
				{Key: "3", Label: "No, and tell Claude what to do differently (esc)"}}}},
		{"working below an old question: busy", screenOf("Do you want to proceed?", "❯ 1. Yes", "⏺ Bash(rm -rf build)", "✻ Working… (esc to interrupt)", "> "), tp,
			Reading{Attention: wire.AttentionNone, Working: true}},
		{"a question below the working line: asked", screenOf("• Working (3s • esc to interrupt)", "", "Allow command?", "  $ rm -rf build", "› 1. Yes (y)", "  2. No (n)"), tp,
			Reading{Attention: wire.AttentionNeedsInput, Text: "Allow command?\n$ rm -rf build\n› 1. Yes (y)\n2. No (n)", Choices: []wire.Choice{{Key: "1", Label: "Yes (y)"}, {Key: "2", Label: "No (n)"}}}},
		{"working on the same line as a question: busy", screenOf("Do you want to proceed? (esc to interrupt)"), tp, Reading{Attention: wire.AttentionNone, Working: true}},
		{"a question scrolled out of the bottom block", screenOf(append([]string{"Do you want to proceed?", "❯ 1. Yes"}, slices.Repeat([]string{"output"}, BlockLines)...)...), tp, none()},
		{"claude's usage limit, resets 3pm local", screenOf("⎿ 5-hour limit reached ∙ resets 3pm", "  /upgrade to increase your usage limit.", "> "), tp,
			Reading{Attention: wire.AttentionRateLimited, Text: "⎿ 5-hour limit reached ∙ resets 3pm", ResetsAt: at("2026-12-01T14:00:00Z")}},
		{"a time already past today is tomorrow's", screenOf("Claude usage limit reached. Your limit will reset at 9am."), tp,
			Reading{Attention: wire.AttentionRateLimited, Text: "Claude usage limit reached. Your limit will reset at 9am.", ResetsAt: at("2026-12-02T08:00:00Z")}},
		{"a zone named in the message", screenOf("Claude usage limit reached. Your limit will reset at 3pm (America/New_York)."), tp,
			Reading{Attention: wire.AttentionRateLimited, Text: "Claude usage limit reached. Your limit will reset at 3pm (America/New_York).", ResetsAt: at("2026-12-01T20:00:00Z")}},
		{"codex: try again at 3:00 PM", screenOf("■ You’ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), or try again at 3:00 PM."), tp,
			Reading{Attention: wire.AttentionRateLimited, Text: "■ You’ve hit your usage limit. Upgrade to Pro (https://chatgpt.com/explore/pro), or try again at 3:00 PM.", ResetsAt: at("2026-12-01T14:00:00Z")}},
		{"resets at 15:00", screenOf("usage limit reached, resets at 15:00"), tp,
			Reading{Attention: wire.AttentionRateLimited, Text: "usage limit reached, resets at 15:00", ResetsAt: at("2026-12-01T14:00:00Z")}},
		{"an ISO time", screenOf("usage limit reached; resets 2026-12-03T06:00:00Z"), tp,
			Reading{Attention: wire.AttentionRateLimited, Text: "usage limit reached; resets 2026-12-03T06:00:00Z", ResetsAt: at("2026-12-03T06:00:00Z")}},
		{"a time from now", screenOf("You’ve hit your usage limit. Try again in 2 hours 5 minutes."), tp,
			Reading{Attention: wire.AttentionRateLimited, Text: "You’ve hit your usage limit. Try again in 2 hours 5 minutes.", ResetsAt: at("2026-12-01T12:35:00Z")}},
		{"a date and a time", screenOf("You’ve hit your usage limit. Try again at Dec 3rd, 2026 4:27 PM."), tp,
			Reading{Attention: wire.AttentionRateLimited, Text: "You’ve hit your usage limit. Try again at Dec 3rd, 2026 4:27 PM.", ResetsAt: at("2026-12-03T15:27:00Z")}},
		{"no time named", screenOf("usage limit reached"), tp, Reading{Attention: wire.AttentionRateLimited, Text: "usage limit reached"}},
		{"a limit answered and the agent busy again", screenOf("usage limit reached ∙ resets 3pm", "> continue", "✻ Thinking… (esc to interrupt)"), tp,
			Reading{Attention: wire.AttentionNone, Working: true}},
		{"escapes and controls never reach a label", screenOf("Do you want to proceed?", "❯ 1. \x1b]8;;http://x\x07Yes\x1b]8;;\x07\x07\u202e", "  2. No\x1b[2J\u009b\x1bP$q\x1b\\"), tp,
			Reading{Attention: wire.AttentionNeedsInput, Text: "Do you want to proceed?\n❯ 1. Yes\n2. No", Choices: []wire.Choice{{Key: "1", Label: "Yes"}, {Key: "2", Label: "No"}}}},
		{"a menu's keys are single digits", screenOf("Do you want to proceed?", "  1. a", "  2. b", "  3. c", "  4. d", "  5. e", "  6. f", "  7. g", "  8. h", "  9. i", "  10. j"), tp,
			Reading{Attention: wire.AttentionNeedsInput, Text: "Do you want to proceed?\n1. a\n2. b\n3. c\n4. d\n5. e\n6. f\n7. g\n8. h\n9. i",
				Choices: []wire.Choice{ch("1", "a"), ch("2", "b"), ch("3", "c"), ch("4", "d"), ch("5", "e"), ch("6", "f"), ch("7", "g"), ch("8", "h"), ch("9", "i")}}},
		{"a menu ends where its numbers do", screenOf("Do you want to proceed?", "1. a", "2. b", "4. d"), tp,
			Reading{Attention: wire.AttentionNeedsInput, Text: "Do you want to proceed?\n1. a\n2. b", Choices: []wire.Choice{ch("1", "a"), ch("2", "b")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Read(tc.capture, tc.p, now, berlin)
			if !got.Same(tc.want) || !sameTime(got.ResetsAt, tc.want.ResetsAt) {
				t.Errorf("Read:\n got %+v (resets %v)\nwant %+v (resets %v)", got, got.ResetsAt, tc.want, tc.want.ResetsAt)
			}
		})
	}
}

func sameTime(a, b *time.Time) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && a.Equal(*b))
}

// What a reading holds is bounded and plain, however long the screen's
// lines are.
func TestReadBounds(t *testing.T) {
	long := strings.Repeat("é", 3000)
	got := Read(screenOf("Do you want to proceed? "+long, "❯ 1. "+long, "  2. No"), tp, time.Now(), time.UTC)
	if got.Attention != wire.AttentionNeedsInput || len(got.Text) > wire.MaxAttentionText || !utf8.ValidString(got.Text) {
		t.Fatalf("text of %d bytes (valid %v), attention %s", len(got.Text), utf8.ValidString(got.Text), got.Attention)
	}
	if len(got.Choices) != 2 || len(got.Choices[0].Label) > wire.MaxAttentionText || !utf8.ValidString(got.Choices[0].Label) {
		t.Fatalf("choices %d, first label %d bytes", len(got.Choices), len(got.Choices[0].Label))
	}
}

func TestCompileRefuses(t *testing.T) {
	if _, err := Compile([]string{"ok"}, []string{"(unclosed"}, nil); err == nil || !strings.Contains(err.Error(), `working[0]: pattern "(unclosed"`) {
		t.Fatalf("a bad pattern: %v", err)
	}
	if _, err := Compile(nil, nil, []string{"x*"}); err == nil || !strings.Contains(err.Error(), "rate_limited[0]") {
		t.Fatalf("a pattern that matches every line: %v", err)
	}
}

func TestPlain(t *testing.T) {
	for in, want := range map[string]string{
		"plain":                       "plain",
		"\x1b[1;38;5;174mbold\x1b[0m": "bold",
		"a\tb\u00a0c":                 "a b c",
		"\x1b]8;;https://x\x1b\\link\x1b]8;;\x1b\\": "link",
		"bell\x07 del\x7f c1\u0085 bidi\u202e!":     "bell del c1 bidi!",
		"bad \xff utf8":                             "bad \uFFFD utf8",
		"\x1b(Bcharset":                             "charset",
		"cut \x1b[":                                 "cut ",
	} {
		if got := Plain(in); got != want {
			t.Errorf("Plain(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzRead: whatever the screen, Read does not panic, and what it reads
// is within the rules a browser and the keys allowlist rely on: the text
// bounded, valid UTF-8 without a control character but newlines, labels
// single lines without one, keys 0–9, y or n (and each once).
func FuzzRead(f *testing.F) {
	for _, s := range []string{"", claudeBash, claudeEdit, "Continue? (y/n) ", "usage limit reached ∙ resets 3pm",
		"Do you want to proceed?\n❯ 1. \x1b]8;;x\x07Yes\n  2. No\x9b", "resets in 99999 days", "try again at Feb 30, 2026 13pm"} {
		f.Add(s)
	}
	keyOK := func(k string) bool { return len(k) == 1 && (k[0] >= '0' && k[0] <= '9' || k == "y" || k == "n") }
	plain := func(s string, newlines bool) bool {
		for _, r := range s {
			if (r < 0x20 && !(newlines && r == '\n')) || r == 0x7f || (r >= 0x80 && r <= 0x9f) || r == 0x1b || isBidi(r) {
				return false
			}
		}
		return utf8.ValidString(s)
	}
	f.Fuzz(func(t *testing.T, capture string) {
		r := Read(capture, tp, time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), time.UTC)
		switch r.Attention {
		case wire.AttentionNone, wire.AttentionNeedsInput, wire.AttentionRateLimited:
		default:
			t.Fatalf("attention %q", r.Attention)
		}
		if len(r.Text) > wire.MaxAttentionText || !plain(r.Text, true) {
			t.Fatalf("text %q", r.Text)
		}
		seen := map[string]bool{}
		for _, c := range r.Choices {
			if !keyOK(c.Key) || seen[c.Key] || len(c.Label) > wire.MaxAttentionText || !plain(c.Label, false) || c.Label == "" {
				t.Fatalf("choice %+v", c)
			}
			seen[c.Key] = true
		}
		if r.ResetsAt != nil && (r.ResetsAt.Year() < 0 || r.ResetsAt.Year() > 9999) {
			t.Fatalf("resets_at %v", r.ResetsAt)
		}
		if r.Working && r.Attention != wire.AttentionNone {
			t.Fatalf("working and %s", r.Attention)
		}
	})
}

// BenchmarkRead: one full coloured screen (50 rows of 220 columns, every
// row styled) with a question at the bottom, as the worker reads it on
// every changed capture (up to 100 a second on a host).
func BenchmarkRead(b *testing.B) {
	row := strings.Repeat("\x1b[38;5;174mword\x1b[39m \x1b[1mword\x1b[0m ", 22) + "\n"
	capture := strings.Repeat(row, 44) + claudeBash[:strings.Index(claudeBash, "\n\n")+1]
	now := time.Now()
	b.SetBytes(int64(len(capture)))
	b.ReportAllocs()
	for b.Loop() {
		if r := Read(capture, tp, now, time.UTC); r.Attention != wire.AttentionNeedsInput {
			b.Fatal(r)
		}
	}
}
