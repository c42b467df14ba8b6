package provider

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"pam/internal/screen"
	"pam/internal/wire"
)

// [providers.NAME.screens] merges key by key: a list set replaces the
// built-in's list of that key, the others stay; a new provider has only
// what it sets, and one without screens reads with the generic set alone.
func TestScreensMerged(t *testing.T) {
	t.Parallel()
	c, err := Load(writeCatalog(t, `
[providers.claude.screens]
needs_input = ["Approve\\?"]

[providers.aider]
binary = "aider"
[providers.aider.screens]
working = ["Thinking"]
rate_limited = ["quota hit"]
`))
	if err != nil {
		t.Fatal(err)
	}
	claude, _ := c.Get("claude")
	if !slices.Equal(claude.Screens.NeedsInput, []string{`Approve\?`}) || !slices.Equal(claude.Screens.Working, builtinScreens["claude"].Working) ||
		!slices.Equal(claude.Screens.RateLimited, builtinScreens["claude"].RateLimited) {
		t.Fatalf("claude's screens %+v", claude.Screens)
	}
	aider, _ := c.Get("aider")
	if aider.Screens.NeedsInput != nil || !slices.Equal(aider.Screens.Working, []string{"Thinking"}) {
		t.Fatalf("aider's screens %+v", aider.Screens)
	}
	now := time.Now()
	for _, tc := range []struct {
		provider, capture string
		attention         string
		working           bool
	}{
		{"claude", "Approve?\n", wire.AttentionNeedsInput, false},
		{"claude", "Do you want to proceed?\nmore\n", wire.AttentionNone, false}, // replaced
		{"claude", "✻ Working… (esc to interrupt)\n", wire.AttentionNone, true},  // kept
		{"aider", "Thinking...\n", wire.AttentionNone, true},
		{"aider", "quota hit, sorry\n", wire.AttentionRateLimited, false},
		{"shell", "Continue? (y/n) \n", wire.AttentionNeedsInput, false}, // the generic set
		{"nosuch", "Continue? (y/n) \n", wire.AttentionNeedsInput, false},
	} {
		r := screen.Read(tc.capture, c.Patterns(tc.provider), now, time.UTC)
		if r.Attention != tc.attention || r.Working != tc.working {
			t.Errorf("%s reads %q as %+v, want %s (working %v)", tc.provider, tc.capture, r, tc.attention, tc.working)
		}
	}
}

// The built-in patterns against screens of the real CLIs (the pinned
// releases, captured with capture-pane -p -e in a fresh HOME): their
// folder-trust, API-key and login questions are needs_input with their
// menus, Claude Code's idle prompt is nothing and its spinner line is
// working.
func TestBuiltinScreensOnRealCLIs(t *testing.T) {
	t.Parallel()
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file, provider string
		attention      string
		working        bool
		text           string // the question's first line
		keys           string
	}{
		{"claude-trust", "claude", wire.AttentionNeedsInput, false, "Quick safety check: Is this a project you created or one you trust?", "12"},
		{"claude-apikey", "claude", wire.AttentionNeedsInput, false, "Do you want to use this API key?", "12"},
		{"claude-idle", "claude", wire.AttentionNone, false, "", ""},
		{"claude-working", "claude", wire.AttentionNone, true, "", ""},
		{"codex-login", "codex", wire.AttentionNeedsInput, false, "Choose how you want to use Codex.", "123"},
		{"codex-apikey", "codex", wire.AttentionNeedsInput, false, "> Use your own OpenAI API key for usage-based billing", ""},
		{"gemini-trust", "gemini", wire.AttentionNeedsInput, false, "Do you trust the files in this folder?", "123"},
		{"gemini-auth", "gemini", wire.AttentionNeedsInput, false, "How would you like to authenticate for this project?", "123"},
	} {
		b, err := os.ReadFile(filepath.Join("..", "screen", "testdata", tc.file+".screen"))
		if err != nil {
			t.Fatal(err)
		}
		r := screen.Read(string(b), c.Patterns(tc.provider), time.Now(), time.UTC)
		keys := ""
		for _, ch := range r.Choices {
			keys += ch.Key
		}
		first, _, _ := strings.Cut(r.Text, "\n")
		if r.Attention != tc.attention || r.Working != tc.working || !strings.HasPrefix(first, tc.text) || keys != tc.keys {
			t.Errorf("%s: %+v; want %s (working %v), a text starting %q, keys %q", tc.file, r, tc.attention, tc.working, tc.text, tc.keys)
		}
	}
}

// TestBuiltinScreensOnAgentRigCaptures reads every screen captured from
// the pinned CLIs against their fake models (agentrig/testdata/screens,
// docs/agents.md) with the built-in patterns: each question is
// needs_input with its menu's keys, each usage or rate limit
// rate_limited (with its reset time when the screen names one), a busy
// agent working, an idle one nothing.
func TestBuiltinScreensOnAgentRigCaptures(t *testing.T) {
	t.Parallel()
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	// The captures were taken at about this time, on a machine whose
	// local time is UTC.
	now := time.Date(2026, 12, 1, 22, 10, 0, 0, time.UTC)
	const (
		none  = wire.AttentionNone
		needs = wire.AttentionNeedsInput
		limit = wire.AttentionRateLimited
	)
	for _, tc := range []struct {
		file      string
		attention string
		working   bool
		text      string // the first line of the question or message
		keys      string
		resets    string // "15:04" UTC on the next day, or ""
	}{
		{"claude-api-key-question", needs, false, "Do you want to use this API key?", "12", ""},
		{"claude-busy", none, true, "", "", ""},
		{"claude-folder-trust", needs, false, "Quick safety check: Is this a project you created or one you trust?", "12", ""},
		{"claude-idle-after-turn", none, false, "", "", ""},
		{"claude-idle-start", none, false, "", "", ""},
		{"claude-onboarding-connectivity", none, false, "", "", ""}, // a wait, not a question
		{"claude-onboarding-offline", none, false, "", "", ""},      // claude exits after it
		{"claude-permission-bash", needs, false, "Do you want to proceed?", "123", ""},
		{"claude-permission-write", needs, false, "Do you want to create notes.md?", "123", ""},
		{"claude-usage-limit-apikey", limit, false, "● API Error: Request rejected (429)", "", ""},
		{"claude-usage-limit", limit, false, "⎿  You've hit your session limit · resets 12:08am (UTC)", "12", "00:08"},
		{"claude-usage-limit-waiting", limit, false, "⎿  You've hit your session limit · resets 12:08am (UTC)", "", "00:08"},
		{"codex-api-key", needs, false, "> Use your own OpenAI API key for usage-based billing", "", ""},
		{"codex-busy", none, true, "", "", ""},
		{"codex-folder-trust", needs, false, "Trust this folder?", "12", ""},
		{"codex-idle-after-turn", none, false, "", "", ""},
		{"codex-idle-start", none, false, "", "", ""},
		{"codex-permission-command", needs, false, "Would you like to run the following command?", "123", ""},
		{"codex-sign-in", needs, false, "Choose how you want to use Codex.", "123", ""},
		{"codex-usage-limit", limit, false, "■ You’ve hit your usage limit.", "", "00:11"},
		{"gemini-api-key", needs, false, "Please enter your Gemini API key.", "", ""},
		{"gemini-auth-choice", needs, false, "How would you like to authenticate for this project?", "123", ""},
		{"gemini-busy", none, true, "", "", ""},
		{"gemini-folder-trust", needs, false, "Do you trust the files in this folder?", "123", ""},
		{"gemini-idle-after-turn", none, false, "", "", ""},
		{"gemini-idle-start", none, false, "", "", ""},
		{"gemini-permission-shell", needs, false, "Allow execution of [Shell]?", "123", ""},
		{"gemini-usage-limit", limit, false, "Usage limit reached for gemini-3.8-flash.", "12", ""},
	} {
		b, err := os.ReadFile(filepath.Join("..", "agentrig", "testdata", "screens", tc.file+".txt"))
		if err != nil {
			t.Fatal(err)
		}
		provider, _, _ := strings.Cut(tc.file, "-")
		r := screen.Read(string(b), c.Patterns(provider), now, time.UTC)
		keys := ""
		for _, ch := range r.Choices {
			keys += ch.Key
		}
		first, _, _ := strings.Cut(r.Text, "\n")
		resets := ""
		if r.ResetsAt != nil {
			resets = r.ResetsAt.UTC().Format("15:04")
			if !r.ResetsAt.After(now) || r.ResetsAt.Sub(now) > 24*time.Hour {
				resets = "out of range: " + r.ResetsAt.String()
			}
		}
		if r.Attention != tc.attention || r.Working != tc.working || !strings.HasPrefix(first, tc.text) || keys != tc.keys || resets != tc.resets {
			t.Errorf("%s: %s (working %v) %q keys %q resets %q; want %s (working %v), a text starting %q, keys %q, resets %q",
				tc.file, r.Attention, r.Working, first, keys, resets, tc.attention, tc.working, tc.text, tc.keys, tc.resets)
		}
	}
	// Every capture is in the table.
	files, _ := filepath.Glob(filepath.Join("..", "agentrig", "testdata", "screens", "*.txt"))
	if len(files) != 28 {
		t.Errorf("%d captures, the table reads 28", len(files))
	}
}
