package provider

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeCatalog writes providers.toml into a fresh config dir.
func writeCatalog(t *testing.T, text string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestBuiltins(t *testing.T) {
	t.Parallel()
	for _, dir := range []string{"", t.TempDir(), filepath.Join(t.TempDir(), "absent")} {
		c, err := Load(dir)
		if err != nil {
			t.Fatalf("Load(%q): %v", dir, err)
		}
		if got, want := c.Names(), []string{"claude", "codex", "gemini", "grok", "shell"}; !slices.Equal(got, want) {
			t.Errorf("Names = %v, want %v", got, want)
		}
		if c.File != "" {
			t.Errorf("File = %q without a providers.toml", c.File)
		}
	}
	c, _ := Load("")
	sh, _ := c.Get("shell")
	if sh.Binary != "/bin/sh" || !slices.Equal(sh.Args, []string{"-c", "{prompt}"}) || sh.Hooks != HooksNone {
		t.Errorf("shell = %+v", sh)
	}
	cl, _ := c.Get("claude")
	if cl.Binary != "claude" || !slices.Equal(cl.Args, []string{"{prompt}"}) || cl.Hooks != HooksClaude {
		t.Errorf("claude = %+v", cl)
	}
	cx, _ := c.Get("codex")
	if cx.Hooks != HooksCodex || !slices.Equal(cx.Args, []string{"--no-daemon", "{prompt}"}) {
		t.Errorf("codex = %+v", cx)
	}
	for name, want := range map[string]string{"claude": "claude", "codex": "codex", "gemini": "gemini", "grok": "", "shell": ""} {
		if p, _ := c.Get(name); p.Trust != want {
			t.Errorf("%s: trust %q, want %q", name, p.Trust, want)
		}
	}
	if _, ok := c.Get("nope"); ok {
		t.Error("Get(nope) found something")
	}
}

func TestMergeOverride(t *testing.T) {
	t.Parallel()
	dir := writeCatalog(t, `
[proxy]
HTTPS_PROXY = "http://proxy:3128"
ANTHROPIC_BASE_URL = "https://gw.example/anthropic"
no_proxy = "localhost"

[providers.claude]
args = ["--model", "opus", "{prompt}"]
env = { CLAUDE_CODE_USE_BEDROCK = "1" }

[providers.shell]
binary = "/bin/bash"

[providers.aider]
binary = "aider"
args = ["--message", "{prompt}"]
`)
	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.File != filepath.Join(dir, FileName) {
		t.Errorf("File = %q", c.File)
	}
	cl, _ := c.Get("claude")
	if cl.Binary != "claude" || cl.Hooks != HooksClaude {
		t.Errorf("claude lost unset fields: %+v", cl)
	}
	if !slices.Equal(cl.Args, []string{"--model", "opus", "{prompt}"}) || cl.ExtraEnv["CLAUDE_CODE_USE_BEDROCK"] != "1" {
		t.Errorf("claude not overridden: %+v", cl)
	}
	sh, _ := c.Get("shell")
	if sh.Binary != "/bin/bash" || !slices.Equal(sh.Args, []string{"-c", "{prompt}"}) {
		t.Errorf("shell = %+v", sh)
	}
	ai, ok := c.Get("aider")
	if !ok || ai.Hooks != HooksNone || !slices.Equal(ai.Args, []string{"--message", "{prompt}"}) {
		t.Errorf("aider = %+v, %v", ai, ok)
	}
	if !slices.Contains(c.Names(), "aider") || len(c.Names()) != 6 {
		t.Errorf("Names = %v", c.Names())
	}
	// Get hands out copies.
	cl.Args[0] = "mutated"
	if again, _ := c.Get("claude"); again.Args[0] != "--model" {
		t.Error("Get shares the catalog's slice")
	}

	env := cl.Env([]string{"PATH=/usr/bin", "HTTPS_PROXY=old", "HOME=/h", "PATH=/bin"}, c.Proxy)
	want := []string{
		"PATH=/bin", "HTTPS_PROXY=http://proxy:3128", "HOME=/h",
		"ANTHROPIC_BASE_URL=https://gw.example/anthropic", "no_proxy=localhost",
		"CLAUDE_CODE_USE_BEDROCK=1",
	}
	if !slices.Equal(env, want) {
		t.Errorf("Env =\n%q\nwant\n%q", env, want)
	}
	// The provider's own env wins over the proxy table.
	p := Provider{ExtraEnv: map[string]string{"HTTPS_PROXY": "mine"}}
	if got := p.Env(nil, c.Proxy); !slices.Contains(got, "HTTPS_PROXY=mine") {
		t.Errorf("provider env does not win: %q", got)
	}
}

// TestTrustKey: a custom entry may set trust; "none" (or "") turns a
// built-in's off.
func TestTrustKey(t *testing.T) {
	t.Parallel()
	c, err := Load(writeCatalog(t, "[providers.claude]\ntrust = \"none\"\n[providers.gemini]\ntrust = \"\"\n[providers.mycodex]\nbinary = \"/opt/codex\"\ntrust = \"codex\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"claude": "", "gemini": "", "mycodex": "codex", "codex": "codex"} {
		if p, _ := c.Get(name); p.Trust != want {
			t.Errorf("%s: trust %q, want %q", name, p.Trust, want)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	big := "# " + strings.Repeat("x", MaxFileSize) + "\n"
	for _, tc := range []struct {
		name, text string
		want       []string // substrings of the error
	}{
		{"unknown key", "[providers.claude]\nbniary = \"x\"\n", []string{FileName, `"providers.claude.bniary"`}},
		{"unknown table", "[provider.claude]\nbinary = \"x\"\n", []string{FileName, `"provider`}},
		{"bad name upper", "[providers.Claude]\nbinary = \"x\"\n", []string{"providers.Claude", "bad provider name"}},
		{"bad name long", "[providers." + strings.Repeat("a", 33) + "]\nbinary = \"x\"\n", []string{"bad provider name"}},
		{"bad name digit", "[providers.1x]\nbinary = \"x\"\n", []string{"bad provider name"}},
		{"new without binary", "[providers.aider]\nargs = []\n", []string{"providers.aider.binary", "required"}},
		{"empty binary", "[providers.claude]\nbinary = \"\"\n", []string{"providers.claude.binary"}},
		{"relative binary", "[providers.claude]\nbinary = \"bin/claude\"\n", []string{"providers.claude.binary", "relative"}},
		{"bad env", "[providers.claude]\nenv = { \"1BAD\" = \"x\" }\n", []string{"providers.claude.env.1BAD"}},
		{"bad env dash", "[providers.claude]\nenv = { \"A-B\" = \"x\" }\n", []string{"providers.claude.env.A-B"}},
		{"bad hooks", "[providers.claude]\nhooks = \"cursor\"\n", []string{"providers.claude.hooks"}},
		{"bad trust", "[providers.claude]\ntrust = \"cursor\"\n", []string{"providers.claude.trust", `"cursor"`, "claude, codex, gemini"}},
		{"bad mcp", "[providers.claude]\nmcp = \"cursor\"\n", []string{"providers.claude.mcp", `"cursor"`, "claude, codex, gemini, none"}},
		{"bad pass_env", "[providers.claude]\npass_env = [\"OK\", \"A-B\"]\n", []string{"providers.claude.pass_env[1]", "A-B"}},
		{"pass_env of pam's secrets", "[providers.claude]\npass_env = [\"PAM_WORKER_TOKEN\"]\n", []string{"providers.claude.pass_env[0]", "PAM_*"}},
		{"pass_env not a list", "[providers.claude]\npass_env = \"X\"\n", []string{FileName}},
		{"typo placeholder", "[providers.claude]\nargs = [\"{promt}\"]\n", []string{"providers.claude.args[0]", "{promt}"}},
		{"session id outside resume_args", "[providers.claude]\nargs = [\"--resume={session_id}\"]\n", []string{"providers.claude.args[0]", "{session_id}"}},
		{"typo in resume_args", "[providers.claude]\nresume_args = [\"--resume\", \"{sesion_id}\"]\n", []string{"providers.claude.resume_args[1]", "{sesion_id}"}},
		{"NUL in continue_message", "[providers.claude]\ncontinue_message = \"go\\u0000\"\n", []string{"providers.claude.continue_message"}},
		{"bad proxy", "[proxy]\nhttp-proxy = \"x\"\n", []string{"proxy.http-proxy"}},
		{"lower proxy", "[proxy]\nsome_var = \"x\"\n", []string{"proxy.some_var"}},
		{"wrong type", "[providers.claude]\nargs = \"{prompt}\"\n", []string{FileName}},
		{"syntax", "[providers.claude\n", []string{FileName}},
		{"too large", big, []string{FileName, "larger than"}},
		{"a screen pattern that does not compile", "[providers.claude.screens]\nworking = [\"ok\", \"(esc\"]\n",
			[]string{FileName, "providers.claude.screens.working[1]", `"(esc"`, "does not compile"}},
		{"a screen pattern that matches every line", "[providers.aider]\nbinary = \"aider\"\n[providers.aider.screens]\nneeds_input = [\"x?\"]\n",
			[]string{"providers.aider.screens.needs_input[0]", "matches every line"}},
		{"an unknown screens key", "[providers.claude.screens]\nidle = [\"x\"]\n", []string{FileName, `"providers.claude.screens.idle"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Load(writeCatalog(t, tc.text))
			if err == nil {
				t.Fatal("Load accepted it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// The credentials a CLI takes from the worker's environment: built-ins
// pass their own, an entry of providers.toml replaces the list, and
// PAM_PASS_ENV adds to every provider's.
func TestPassEnv(t *testing.T) {
	t.Parallel()
	c, err := Load(writeCatalog(t, `
[providers.codex]
pass_env = ["OPENAI_API_KEY", "OPENAI_ORG_ID"]

[providers.aider]
binary = "aider"
pass_env = ["AIDER_KEY"]
`))
	if err != nil {
		t.Fatal(err)
	}
	extra, err := ParsePassEnv(" HTTPS_PROXY,\tCORP_TOKEN  HTTPS_PROXY,, ")
	if err != nil || !slices.Equal(extra, []string{"HTTPS_PROXY", "CORP_TOKEN"}) {
		t.Fatalf("ParsePassEnv = %q, %v", extra, err)
	}
	for name, want := range map[string][]string{
		"claude": {"ANTHROPIC_API_KEY"},
		"codex":  {"OPENAI_API_KEY", "OPENAI_ORG_ID"},
		"gemini": {"GEMINI_API_KEY", "GOOGLE_API_KEY"},
		"grok":   {"XAI_API_KEY"},
		"shell":  nil,
		"aider":  {"AIDER_KEY"},
	} {
		if got := c.PassEnvNames(name, nil); !slices.Equal(got, want) {
			t.Errorf("%s: pass_env %q, want %q", name, got, want)
		}
		all := slices.Sorted(slices.Values(append(slices.Clone(want), extra...)))
		if got := c.PassEnvNames(name, extra); !slices.Equal(got, all) {
			t.Errorf("%s with PAM_PASS_ENV: %q, want %q", name, got, all)
		}
	}
	env := map[string]string{"ANTHROPIC_API_KEY": "sk-1", "EMPTY": ""}
	got := Passed([]string{"ANTHROPIC_API_KEY", "EMPTY", "UNSET"}, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if len(got) != 2 || got["ANTHROPIC_API_KEY"] != "sk-1" || got["EMPTY"] != "" {
		t.Errorf("Passed = %v: an unset variable is left out, an empty one passed", got)
	}
	for _, bad := range []string{"PAM_TOKEN", "A,PAM_WORKER_TOKEN", "1X", "A-B", "A=B"} {
		if _, err := ParsePassEnv(bad); err == nil || !strings.Contains(err.Error(), "PAM_PASS_ENV") {
			t.Errorf("ParsePassEnv(%q) = %v, want a refusal naming PAM_PASS_ENV", bad, err)
		}
	}
	if got, err := ParsePassEnv(""); err != nil || len(got) != 0 {
		t.Errorf("ParsePassEnv(\"\") = %q, %v", got, err)
	}
	// Whatever a dispatch file holds, PAM_* never comes from it.
	base := []string{"PATH=/bin", "PAM_RUN_ID=r"}
	out := WithPassed(base, map[string]string{"PATH": "/opt/bin", "KEY": "v", "PAM_RUN_ID": "forged", "PAM_WORKER_TOKEN": "w", "BAD-NAME": "x"})
	if want := []string{"PATH=/opt/bin", "PAM_RUN_ID=r", "KEY=v"}; !slices.Equal(out, want) {
		t.Errorf("WithPassed = %q, want %q", out, want)
	}
}

func TestArgv(t *testing.T) {
	t.Parallel()
	p := Provider{Args: []string{"--title={task_title}", "{prompt}", "run {run_id}/{attempt} in {cwd}", "{prompt}!"}}
	v := Vars{Prompt: "fix it; rm -rf / {run_id}", TaskTitle: "Do X", RunID: "r1", Attempt: 2, Cwd: "/w d"}
	got, _ := p.Argv(v)
	want := []string{"--title=Do X", "fix it; rm -rf / {run_id}", "run r1/2 in /w d", "fix it; rm -rf / {run_id}!"}
	if !slices.Equal(got, want) {
		t.Errorf("Argv =\n%q\nwant\n%q", got, want)
	}
	v.Prompt = ""
	got, _ = p.Argv(v)
	want = []string{"--title=Do X", "run r1/2 in /w d", "!"}
	if !slices.Equal(got, want) {
		t.Errorf("Argv with empty prompt =\n%q\nwant\n%q", got, want)
	}
	sh := Provider{Args: []string{"-c", "{prompt}"}}
	if got, err := sh.Argv(Vars{}); err != nil || !slices.Equal(got, []string{"-c"}) {
		t.Errorf("shell with empty prompt = %q", got)
	}
}

// A prompt starting with "-" is never parsed as an option of the CLI: it
// comes last, after the catalog's end_of_options, or is refused when the
// CLI takes none (issue 9 item 7).
func TestPromptStartingWithDashNeverAnOption(t *testing.T) {
	t.Parallel()
	bi := builtins()
	tests := []struct {
		name       string
		p          Provider
		prompt     string
		head, tail []string
		refused    bool
		args       []string // the run's extra args
	}{
		{"claude", bi["claude"], "--dangerously-skip-permissions", nil, []string{"--", "--dangerously-skip-permissions"}, false, nil},
		{"codex", bi["codex"], "-c x=y", []string{"--no-daemon"}, []string{"--", "-c x=y"}, false, nil},
		{"gemini", bi["gemini"], "-y", nil, []string{"--", "-y"}, false, nil},
		{"grok takes no --", bi["grok"], "-h", nil, nil, true, nil},
		{"shell", bi["shell"], "-x", []string{"-c"}, []string{"--", "-x"}, false, nil},
		{"plain prompt", bi["claude"], "fix - it", []string{"fix - it"}, nil, false, nil},
		{"lone dash", bi["grok"], "-", nil, nil, true, nil},
		{"no end of options", Provider{Args: []string{"--model", "m", "{prompt}"}}, "--help", nil, nil, true, nil},
		{"prompt inside an option is its value", Provider{Args: []string{"--prompt={prompt}"}}, "-x", []string{"--prompt=-x"}, nil, false, nil},
		{"what follows the prompt stays after it", Provider{Args: []string{"-p", "{prompt}", "{run_id}"}, EndOfOptions: "--"}, "-x", []string{"-p"}, []string{"--", "-x", "r1"}, false, nil},
		// sh -c a -- -x would run "a": with run args the prompt cannot
		// leave -c, so it is refused.
		{"shell with run args", bi["shell"], "-x", nil, nil, true, []string{"a"}},
		{"shell with run args, plain prompt", bi["shell"], "echo hi", []string{"-c", "echo hi"}, nil, false, []string{"a"}},
		{"claude with run args", bi["claude"], "-x", nil, []string{"--", "-x"}, false, []string{"--model", "m"}},
	}
	for _, tt := range tests {
		head, tail, err := tt.p.ArgvParts(Vars{Prompt: tt.prompt, RunID: "r1", Args: tt.args})
		if tt.refused {
			if !errors.Is(err, ErrPromptLooksLikeOption) {
				t.Errorf("%s: ArgvParts = %q %q %v, want ErrPromptLooksLikeOption", tt.name, head, tail, err)
			}
			if err := CheckBuiltinPrompt(tt.p.Name, tt.prompt, tt.args); tt.p.Name != "" && !errors.Is(err, ErrPromptLooksLikeOption) {
				t.Errorf("%s: CheckBuiltinPrompt = %v", tt.name, err)
			}
			continue
		}
		if err != nil || !slices.Equal(head, tt.head) || !slices.Equal(tail, tt.tail) {
			t.Errorf("%s: ArgvParts = %q %q %v, want %q %q", tt.name, head, tail, err, tt.head, tt.tail)
		}
		if err := CheckBuiltinPrompt(tt.p.Name, tt.prompt, tt.args); err != nil {
			t.Errorf("%s: CheckBuiltinPrompt = %v", tt.name, err)
		}
	}
	// The shell form is what POSIX sh runs: the operand after "--" is the
	// command string, even when it starts with "-".
	out, err := exec.Command("/bin/sh", "-c", "--", "-x 2>/dev/null; echo ran").Output()
	if err != nil || strings.TrimSpace(string(out)) != "ran" {
		t.Errorf("sh -c -- -x...: %q %v", out, err)
	}
}

// fakeBin writes an executable script named name into dir.
func fakeBin(t *testing.T, dir, name string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho fake\n"), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestResolveAvailable(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	claude := fakeBin(t, bin, "claude", 0o755)
	fakeBin(t, bin, "codex", 0o644) // not executable
	if err := os.Mkdir(filepath.Join(bin, "gemini"), 0o755); err != nil {
		t.Fatal(err)
	}
	abs := fakeBin(t, t.TempDir(), "mytool", 0o755)
	dir := writeCatalog(t, "[providers.mine]\nbinary = \""+abs+"\"\n[providers.gone]\nbinary = \"/nonexistent/pam-test-bin\"\n")
	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	c.SearchPath = "relative/dir" + string(filepath.ListSeparator) + bin

	if got, err := c.Resolve("claude"); err != nil || got != claude {
		t.Errorf("Resolve(claude) = %q, %v; want %q", got, err, claude)
	}
	for _, name := range []string{"codex", "gemini", "grok", "gone", "nope"} {
		if got, err := c.Resolve(name); err == nil {
			t.Errorf("Resolve(%s) = %q, want an error", name, got)
		}
	}
	if got, err := c.Resolve("mine"); err != nil || got != abs {
		t.Errorf("Resolve(mine) = %q, %v", got, err)
	}
	av := c.Available()
	want := map[string]string{"claude": claude, "mine": abs, "shell": "/bin/sh"}
	if len(av) != len(want) {
		t.Errorf("Available = %v, want %v", av, want)
	}
	for k, v := range want {
		if av[k] != v {
			t.Errorf("Available[%s] = %q, want %q", k, av[k], v)
		}
	}
}

func TestHookArgs(t *testing.T) {
	t.Parallel()
	pam := "/opt/my pam's/bin/pam"
	c, _ := Load("")
	cl, _ := c.Get("claude")
	args := cl.HookArgs(pam)
	if len(args) != 2 || args[0] != "--settings" {
		t.Fatalf("claude HookArgs = %q", args)
	}
	var s struct {
		Hooks map[string][]struct {
			Matcher *string `json:"matcher"`
			Hooks   []struct {
				Type    string `json:"type"`
				Command string `json:"command"`
			} `json:"hooks"`
		} `json:"hooks"`
	}
	if err := json.Unmarshal([]byte(args[1]), &s); err != nil {
		t.Fatalf("settings are not JSON: %v\n%s", err, args[1])
	}
	quoted := `'/opt/my pam'\''s/bin/pam'`
	for event, want := range map[string]string{"Stop": quoted + " hook completed", "PostToolUse": quoted + " hook progress",
		"Notification": quoted + " hook needs-input"} {
		groups := s.Hooks[event]
		if len(groups) != 1 || len(groups[0].Hooks) != 1 {
			t.Fatalf("%s: %+v", event, groups)
		}
		h := groups[0].Hooks[0]
		if h.Type != "command" || h.Command != want {
			t.Errorf("%s hook = %+v, want command %q", event, h, want)
		}
	}
	if m := s.Hooks["PostToolUse"][0].Matcher; m == nil || *m != "*" {
		t.Errorf("PostToolUse matcher = %v", m)
	}

	cx, _ := c.Get("codex")
	args = cx.HookArgs("/usr/local/bin/pam")
	if len(args) != 2 || args[0] != "-c" || !strings.HasPrefix(args[1], "notify=") {
		t.Fatalf("codex HookArgs = %q", args)
	}
	var notify []string
	if err := json.Unmarshal([]byte(strings.TrimPrefix(args[1], "notify=")), &notify); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(notify, []string{"/usr/local/bin/pam", "hook", "completed"}) {
		t.Errorf("notify = %q", notify)
	}
	for _, name := range []string{"gemini", "grok", "shell"} {
		p, _ := c.Get(name)
		if got := p.HookArgs(pam); got != nil {
			t.Errorf("%s HookArgs = %q", name, got)
		}
	}
}

// A codex notify event that asks for a person makes the hook a
// needs-input, whatever kind the wiring named; any other argument keeps
// the kind (docs/architecture.md#attention: the assumption about codex).
func TestHookKindOfEvent(t *testing.T) {
	for _, c := range []struct{ kind, event, want string }{
		{"completed", "", "completed"},
		{"completed", `{"type":"agent-turn-complete","turn-id":"1"}`, "completed"},
		{"completed", `{"type":"approval-requested","call-id":"c1"}`, HookNeedsInput},
		{"completed", `{"type":"user-input-requested"}`, HookNeedsInput},
		{"completed", `{"type":"exec-approval-requested"}`, HookNeedsInput},
		{"progress", `not json`, "progress"},
		{"completed", `{"kind":"approval-requested"}`, "completed"},
		{HookNeedsInput, `{"hook_event_name":"Notification"}`, HookNeedsInput},
		// codex 0.171's title thread, as its notify reported it.
		{"completed", `{"type":"agent-turn-complete","thread-id":"t2","turn-id":"u2","cwd":"/w","client":"codex-tui","input-messages":["Generate a concise, single-line task title of at most 36 characters and under five words where possible.\n\nUser prompt:\nrun the echo"],"last-assistant-message":"Run the echo"}`, ""},
		{"completed", `{"type":"agent-turn-complete","thread-id":"t1","input-messages":["run the echo"],"last-assistant-message":"All done."}`, "completed"},
	} {
		if got := HookKindOfEvent(c.kind, c.event); got != c.want {
			t.Errorf("HookKindOfEvent(%q, %q) = %q, want %q", c.kind, c.event, got, c.want)
		}
	}
}

// resume_args: the built-ins resume as their CLIs do, a catalog entry may
// set or clear them, and the resume argv puts the session id and the
// message where the template says, a message starting with "-" after
// "--" as a prompt would be.
func TestResumeArgs(t *testing.T) {
	t.Parallel()
	c, err := Load("")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Resumable(), []string{"claude", "codex", "gemini"}; !slices.Equal(got, want) {
		t.Errorf("Resumable = %v, want %v", got, want)
	}
	for _, name := range []string{"claude", "codex", "gemini", "grok", "shell", "nope"} {
		p, _ := c.Get(name)
		if got := BuiltinResumable(name); got != (len(p.ResumeArgs) > 0) {
			t.Errorf("BuiltinResumable(%s) = %v with resume_args %q", name, got, p.ResumeArgs)
		}
	}
	v := Vars{SessionID: "5f0c-abc", Prompt: "fix the tests", RunID: "r1", Attempt: 2}
	for _, tc := range []struct {
		name       string
		prompt     string
		head, tail []string
	}{
		{"claude", "fix the tests", []string{"--resume", "5f0c-abc", "fix the tests"}, nil},
		{"claude", "", []string{"--resume", "5f0c-abc"}, nil},
		{"claude", "-v please", []string{"--resume", "5f0c-abc"}, []string{"--", "-v please"}},
		{"codex", "fix the tests", []string{"resume", "--no-daemon", "5f0c-abc", "fix the tests"}, nil},
		{"codex", "", []string{"resume", "--no-daemon", "5f0c-abc"}, nil},
		{"gemini", "fix the tests", []string{"--resume", "5f0c-abc", "fix the tests"}, nil},
	} {
		p, _ := c.Get(tc.name)
		v.Prompt = tc.prompt
		head, tail, err := p.ResumeParts(v)
		if err != nil || !slices.Equal(head, tc.head) || !slices.Equal(tail, tc.tail) {
			t.Errorf("%s with %q: ResumeParts = %q %q, %v; want %q %q", tc.name, tc.prompt, head, tail, err, tc.head, tc.tail)
		}
		if p.ContinueMessage != "continue" {
			t.Errorf("%s: continue_message %q", tc.name, p.ContinueMessage)
		}
	}
	for _, name := range []string{"grok", "shell"} {
		p, _ := c.Get(name)
		if _, _, err := p.ResumeParts(v); !errors.Is(err, ErrNotResumable) {
			t.Errorf("%s: ResumeParts err = %v, want ErrNotResumable", name, err)
		}
	}

	c, err = Load(writeCatalog(t, `
[providers.fake]
binary = "/bin/fake"
args = ["--task", "{prompt}"]
resume_args = ["--again={session_id}", "--run={run_id}", "{prompt}"]
continue_message = "go on"

[providers.claude]
resume_args = []
`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Resumable(), []string{"codex", "fake", "gemini"}; !slices.Equal(got, want) {
		t.Errorf("Resumable = %v, want %v", got, want)
	}
	fake, _ := c.Get("fake")
	v.Prompt = "hello"
	if head, _, err := fake.ResumeParts(v); err != nil || !slices.Equal(head, []string{"--again=5f0c-abc", "--run=r1", "hello"}) {
		t.Errorf("fake resume = %q, %v", head, err)
	}
	if fake.ContinueMessage != "go on" {
		t.Errorf("fake continue_message = %q", fake.ContinueMessage)
	}
	// What a worker reports at registration: every entry's message.
	if got := c.ContinueMessages(); got["fake"] != "go on" || got["claude"] != "continue" || got["shell"] != "" {
		t.Errorf("ContinueMessages = %v", got)
	}
	// The fresh argv knows nothing of the session.
	if argv, _ := fake.Argv(v); !slices.Equal(argv, []string{"--task", "hello"}) {
		t.Errorf("fake argv = %q", argv)
	}
}

// The CLIs' session ids, where their hooks carry them: session_id in the
// stdin JSON of Claude Code's and gemini's hooks, thread-id in codex's
// notify argument.
func TestSessionOfHookInput(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`{"session_id":"5f0c6d3e-1d2b","transcript_path":"/h/.claude/p/5f0c.jsonl","hook_event_name":"Stop"}`: "5f0c6d3e-1d2b",
		`{"session_id":"g-1","hook_event_name":"AfterAgent","cwd":"/w"}`:                                      "g-1",
		`{"hook_event_name":"Stop"}`: "",
		`{"session_id":42}`:          "",
		`not json`:                   "",
		``:                           "",
	} {
		if got := SessionOfHookInput([]byte(in)); got != want {
			t.Errorf("SessionOfHookInput(%s) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{
		`{"type":"agent-turn-complete","thread-id":"b5f6c1c2-1111","turn-id":"12345","cwd":"/w","input-messages":["x"],"last-assistant-message":"y"}`: "b5f6c1c2-1111",
		`{"type":"agent-turn-complete","turn-id":"1"}`: "",
		`{"thread_id":"underscored"}`:                  "",
		`oops`:                                         "",
	} {
		if got := SessionOfEvent(in); got != want {
			t.Errorf("SessionOfEvent(%s) = %q, want %q", in, got, want)
		}
	}
}
