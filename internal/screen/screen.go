// Package screen reads a captured screen for what an agent waits for
// (docs/architecture.md#the-screen-is-read): a question and its choices,
// a usage limit and when it resets, or a busy agent. The worker runs it on
// every changed capture, so it is pure, bounded and fast: it looks only at
// the bottom block of the screen, and everything it returns is plain text
// a browser or a terminal can show as it is.
package screen

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"pam/internal/wire"
)

// BlockLines is how many non-blank lines, counted from the bottom of the
// screen, make its bottom block: where a provider's patterns count. A
// line is blank when it holds nothing but spaces and box-drawing
// characters (a TUI's frames and rules), so a dialog drawn in a box at the
// top of an otherwise empty screen is still its bottom block. 16 lines
// hold the tallest dialog of the built-in CLIs (Claude Code's folder
// trust, with its text) and little of the scrollback above it.
const BlockLines = 16

// Patterns are one provider's screen patterns, compiled: the
// [providers.NAME.screens] lists of the catalog. A nil *Patterns has
// none: the generic set alone applies.
type Patterns struct {
	NeedsInput  []*regexp.Regexp
	Working     []*regexp.Regexp
	RateLimited []*regexp.Regexp

	// Each list as one alternation, matched once per line.
	needs, working, rate *regexp.Regexp
}

// Compile compiles the three lists of a provider's screens. The error
// names the key (needs_input, working, rate_limited), the index and the
// pattern that does not compile.
func Compile(needsInput, working, rateLimited []string) (*Patterns, error) {
	p := &Patterns{}
	for _, l := range []struct {
		key  string
		src  []string
		dst  *[]*regexp.Regexp
		join **regexp.Regexp
	}{
		{"needs_input", needsInput, &p.NeedsInput, &p.needs},
		{"working", working, &p.Working, &p.working},
		{"rate_limited", rateLimited, &p.RateLimited, &p.rate},
	} {
		for i, s := range l.src {
			re, err := regexp.Compile(s)
			if err != nil {
				return nil, fmt.Errorf("%s[%d]: pattern %q does not compile: %w", l.key, i, s, err)
			}
			if re.MatchString("") {
				return nil, fmt.Errorf("%s[%d]: pattern %q matches every line", l.key, i, s)
			}
			*l.dst = append(*l.dst, re)
		}
		if len(l.src) > 0 {
			// Each pattern in a group of its own, so that its flags and
			// alternatives stay its own.
			*l.join = regexp.MustCompile("(?:" + strings.Join(l.src, ")|(?:") + ")")
		}
	}
	return p, nil
}

// MustCompile is Compile for the built-in lists: it panics on an error.
func MustCompile(needsInput, working, rateLimited []string) *Patterns {
	p, err := Compile(needsInput, working, rateLimited)
	if err != nil {
		panic(err)
	}
	return p
}

// generic is the set of every CLI (docs/architecture.md#the-screen-is-read):
// it counts only on the last non-blank line, where a prompt waits for its
// answer.
var generic = regexp.MustCompile(`(?i)[(\[]\s*y\s*/\s*n\s*[)\]]|[(\[]yes/no[)\]]|Do you want to proceed\?|Do you trust|Press Enter to continue`)

// answerSlot is where a prompt's answer is typed, after it: what follows
// is the answer, not the question.
var answerSlot = regexp.MustCompile(`(?i)[(\[]\s*(?:y\s*/\s*n|yes/no)\s*[)\]]\s*[?:]?`)

// yesNo is a (y/n), [y/N] or [Y/n] prompt: its answers are y and n.
var yesNo = regexp.MustCompile(`(?i)[(\[]\s*y\s*/\s*n\s*[)\]]`)

// choiceRe is one entry of a numbered menu, its marker (the selected
// entry's ❯, ›, >, ●) optional: "❯ 1. Yes", "  2) No".
var choiceRe = regexp.MustCompile(`^(?:[❯›>▶►●○◉◯➤→*»]\s*)?(\d{1,2})[.)]\s+(\S.*)$`)

// Reading is what one screen shows an agent waiting for.
type Reading struct {
	// Attention is wire.AttentionNone, AttentionNeedsInput or
	// AttentionRateLimited.
	Attention string
	// Working: a provider's working pattern is the lowest match of the
	// bottom block; the agent is busy (Attention is none).
	Working bool
	// Text is the question (or the usage-limit message) as plain text:
	// lines joined by "\n", no other control character, at most
	// wire.MaxAttentionText bytes.
	Text string
	// Choices are the answers a numbered menu or a (y/n) offers, keys
	// from wire.ValidChoiceKey; nil when none were read.
	Choices []wire.Choice
	// ResetsAt is when a usage limit resets, when its message says.
	ResetsAt *time.Time
}

// Same reports whether two readings say the same: the worker uplinks a
// reading only when it is not the same as the last one. ResetsAt is not
// compared: it is read from Text, and a relative time ("try again in 2
// hours") read again later is a later time for the same message.
func (r Reading) Same(o Reading) bool {
	return r.Attention == o.Attention && r.Working == o.Working && r.Text == o.Text && slices.Equal(r.Choices, o.Choices)
}

// Asks reports whether the reading waits for a person.
func (r Reading) Asks() bool {
	return r.Attention == wire.AttentionNeedsInput || r.Attention == wire.AttentionRateLimited
}

// Detail is the reading as a run's attention_detail, set by source;
// nil when it asks nothing.
func (r Reading) Detail(source string) *wire.AttentionDetail {
	if !r.Asks() {
		return nil
	}
	d := &wire.AttentionDetail{Source: source, Text: r.Text, Choices: slices.Clone(r.Choices), ResetsAt: r.ResetsAt}
	if d.Choices == nil {
		d.Choices = []wire.Choice{}
	}
	return d
}

// line is one non-blank line of the bottom block.
type line struct {
	text   string // plain, box borders and surrounding spaces removed
	indent int    // leading spaces inside the box border, in runes
}

// kind is what a line of the bottom block matches.
type kind int

const (
	kindNone kind = iota
	kindNeeds
	kindRate
	kindWorking
)

// Read reads one capture (capture-pane -p -e text, escape sequences and
// all) with a provider's patterns (nil: the generic set alone). The
// lowest line of the bottom block that matches a pattern decides: a
// working pattern makes the agent busy (never a question), a
// rate_limited one a usage limit, a needs_input one (or the generic set
// on the last line) a question; on one line, working outranks
// rate_limited, which outranks needs_input. A question starts at the
// highest needs_input match of the lines just above it (a dialog's title
// above its footer) and runs down to the last entry of the numbered menu
// below it, if there is one; a usage limit's time is read from its
// message, local times in loc, the next such time after now.
func Read(capture string, p *Patterns, now time.Time, loc *time.Location) Reading {
	block := bottom(capture)
	if len(block) == 0 {
		return none()
	}
	if p == nil {
		p = &Patterns{}
	}
	last := len(block) - 1
	hit, k := -1, kindNone
	for i := last; i >= 0 && k == kindNone; i-- {
		k = p.classify(block[i].text, i == last)
		hit = i
	}
	switch k {
	case kindWorking:
		return Reading{Attention: wire.AttentionNone, Working: true}
	case kindRate:
		r := question(block, hit, hit, wire.AttentionRateLimited)
		r.ResetsAt = resetsAt(strings.Join(texts(block[hit:min(hit+3, len(block))]), " "), now, loc)
		return r
	case kindNeeds:
		if hit == last {
			// What is typed after a prompt (before Enter) is the answer,
			// not the question.
			if m := answerSlot.FindAllStringIndex(block[hit].text, -1); m != nil && !p.needsMatch(block[hit].text) {
				block[hit].text = strings.TrimRight(block[hit].text[:m[len(m)-1][1]], " ")
			}
		}
		start := hit
		for i := hit - 1; i >= 0 && hit-i <= 8; i-- {
			switch p.classify(block[i].text, false) {
			case kindNeeds:
				start = i
				continue
			case kindNone:
				continue
			}
			break
		}
		return question(block, start, hit, wire.AttentionNeedsInput)
	}
	return none()
}

func none() Reading { return Reading{Attention: wire.AttentionNone} }

func (p *Patterns) needsMatch(s string) bool { return p.needs != nil && p.needs.MatchString(s) }

// classify is what one line matches; the generic set counts on the last
// line only.
func (p *Patterns) classify(s string, last bool) kind {
	switch {
	case p.working != nil && p.working.MatchString(s):
		return kindWorking
	case p.rate != nil && p.rate.MatchString(s):
		return kindRate
	case p.needs != nil && p.needs.MatchString(s), last && generic.MatchString(s):
		return kindNeeds
	}
	return kindNone
}

// question builds the reading of a question that starts at block[start]
// and whose lowest matching line is block[hit]: its text runs down to the
// last entry of a numbered menu that starts at or below start (a footer
// below it, "Press enter to continue", is left out), or to hit without
// one; a (y/n) in its lines gives the answers y and n.
func question(block []line, start, hit int, attention string) Reading {
	end := hit
	choices, last := menu(block, start)
	if choices != nil {
		end = last
	} else {
		for _, l := range block[start : end+1] {
			if yesNo.MatchString(l.text) {
				choices = []wire.Choice{{Key: "y", Label: "Yes"}, {Key: "n", Label: "No"}}
				break
			}
		}
	}
	return Reading{Attention: attention, Text: bound(strings.Join(texts(block[start:end+1]), "\n")), Choices: choices}
}

// menu reads the numbered menu whose first entry is the first line at or
// below block[from] that looks like one, numbered from 0 or 1: the
// entries that follow with the next numbers, each line between them
// indented deeper than its entry (a description, a wrapped label)
// skipped. It returns the choices, single-digit keys only, and the index
// of the last entry; nil when there is no menu.
func menu(block []line, from int) ([]wire.Choice, int) {
	first, base := -1, 0
	for i := from; i < len(block); i++ {
		if m := choiceRe.FindStringSubmatch(block[i].text); m != nil && (m[1] == "0" || m[1] == "1") {
			first, base = i, int(m[1][0]-'0')
			break
		}
	}
	if first < 0 {
		return nil, 0
	}
	var choices []wire.Choice
	last, indent := first, block[first].indent
	for i := first; i < len(block); i++ {
		m := choiceRe.FindStringSubmatch(block[i].text)
		if m == nil {
			if block[i].indent > indent {
				continue
			}
			break
		}
		if m[1] != strconv.Itoa(base+len(choices)) || len(m[1]) > 1 {
			break
		}
		choices = append(choices, wire.Choice{Key: m[1], Label: bound(m[2])})
		last, indent = i, block[i].indent
	}
	return choices, last
}

func texts(ls []line) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.text
	}
	return out
}

// bound cuts s to wire.MaxAttentionText bytes, on a rune boundary, with
// an ellipsis when it was cut.
func bound(s string) string {
	const max = wire.MaxAttentionText
	if len(s) <= max {
		return s
	}
	cut := max - len("…")
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
