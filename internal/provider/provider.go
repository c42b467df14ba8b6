// Package provider is the host's catalog of agent CLIs (docs/architecture.md#pam-exec-run): the
// built-in entries, the operator's <config>/providers.toml merged over them,
// the argv template of each CLI, the environment it gets (including the
// catalog's [proxy] table), and how its completion is wired back to pam.
//
// Nothing here runs a shell: an argv template is a list of words, and a
// placeholder is substituted inside one word without splitting it.
package provider

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"pam/internal/trust"
)

// Hook wirings: how a provider tells pam that it completed its work.
const (
	// HooksNone leaves completion to the wrapper's finished signal.
	HooksNone = "none"
	// HooksClaude passes Claude Code hooks through its --settings flag.
	HooksClaude = "claude"
	// HooksCodex sets codex's notify program through a -c override.
	HooksCodex = "codex"
)

// Provider is one catalog entry.
type Provider struct {
	// Name is the catalog key, e.g. "claude".
	Name string
	// Binary is a bare name looked up on PATH or an absolute path.
	Binary string
	// Args is the argv template after the binary; see Argv.
	Args []string
	// ExtraEnv is the entry's env table: extra environment for the CLI.
	ExtraEnv map[string]string
	// PassEnv names the variables copied from the worker's environment
	// into the CLI's (its credentials): the tmux server's environment is
	// clean, so nothing else of the worker's reaches the CLI. A name unset
	// in the worker's environment is not passed.
	PassEnv []string
	// Hooks says how completion is wired: HooksClaude, HooksCodex or
	// HooksNone ("" reads as none).
	Hooks string
	// EndOfOptions is the argument after which the CLI parses no option
	// ("--"), put before a prompt that starts with "-" so the prompt is
	// never read as an option; "" when the CLI takes none, and such a
	// prompt is refused (docs/architecture.md#provider-catalog).
	EndOfOptions string
	// Trust names how the CLI records a trusted folder (package trust:
	// "claude", "codex", "gemini"), so that the wrapper marks the
	// worktree pam made for a run trusted before the CLI starts in it
	// and the CLI asks no folder-trust question; "" marks nothing
	// (docs/agents.md#trust).
	Trust string
	// Screens are the patterns the worker reads its screen with.
	Screens Screens
	// ResumeArgs is resume_args: the argv template that resumes the CLI's
	// own conversation {session_id} instead of starting afresh with Args
	// (docs/architecture.md#resume-and-continue); its {prompt} is the
	// message the resumed CLI gets. Empty when the CLI cannot resume.
	ResumeArgs []string
	// ContinueMessage is continue_message: what pam says to an agent to
	// make it go on — the message of a resume that brings none of its own.
	ContinueMessage string
	// MCP says how pam's MCP server reaches the CLI: MCPClaude, MCPCodex,
	// MCPGemini or MCPNone ("" reads as none).
	MCP string
}

// TrustNone is the catalog's spelling of "mark nothing" for trust.
const TrustNone = "none"

// ErrPromptLooksLikeOption refuses a prompt that starts with "-" for a CLI
// with no end-of-options marker: the CLI would parse it as an option.
var ErrPromptLooksLikeOption = errors.New("the prompt starts with \"-\", so this provider's CLI would read it as an option")

// builtins are the entries every catalog starts from.
func builtins() map[string]Provider {
	b := map[string]Provider{
		// claude (commander), codex (clap) and gemini (yargs) end their
		// options at "--"; grok's parser is not known to, so a prompt
		// starting with "-" is refused for it.
		// Each passes its own credential variables.
		// Each marks pam's worktrees trusted in its own config (trust).
		//
		// How each resumes a conversation, from the CLIs themselves
		// (docs/architecture.md#resume-and-continue): claude 2.1
		// `--resume <session id> [prompt]` (keeps the session id), codex
		// 0.171 the subcommand `resume [SESSION_ID] [PROMPT]`, gemini 0.61
		// `--resume <session uuid>` with its query. grok and shell have none.
		"claude": {Name: "claude", Binary: "claude", Args: []string{"{prompt}"}, Hooks: HooksClaude, EndOfOptions: "--",
			PassEnv: []string{"ANTHROPIC_API_KEY"}, Trust: trust.Claude, MCP: MCPClaude,
			ResumeArgs: []string{"--resume", "{session_id}", "{prompt}"}, ContinueMessage: "continue"},
		// --no-daemon: codex otherwise hands the session to a shared
		// background server that it starts detached, outside the
		// session, and that keeps the environment (the run's PAM_*
		// variables) of the run that started it (docs/agents.md#codex);
		// its resume subcommand takes the flag too.
		"codex": {Name: "codex", Binary: "codex", Args: []string{"--no-daemon", "{prompt}"}, Hooks: HooksCodex, EndOfOptions: "--",
			PassEnv: []string{"OPENAI_API_KEY"}, Trust: trust.Codex, MCP: MCPCodex,
			ResumeArgs: []string{"resume", "--no-daemon", "{session_id}", "{prompt}"}, ContinueMessage: "continue"},
		"gemini": {Name: "gemini", Binary: "gemini", Args: []string{"{prompt}"}, Hooks: HooksNone, EndOfOptions: "--",
			PassEnv: []string{"GEMINI_API_KEY", "GOOGLE_API_KEY"}, Trust: trust.Gemini, MCP: MCPGemini,
			ResumeArgs: []string{"--resume", "{session_id}", "{prompt}"}, ContinueMessage: "continue"},
		"grok": {Name: "grok", Binary: "grok", Args: []string{"{prompt}"}, Hooks: HooksNone,
			PassEnv: []string{"XAI_API_KEY"}, MCP: MCPNone},
		// The operator explicitly asking for a shell command in the session.
		// POSIX sh (dash, bash) takes "sh -c -- -cmd": the command string is
		// the first operand after "--".
		"shell": {Name: "shell", Binary: "/bin/sh", Args: []string{"-c", "{prompt}"}, Hooks: HooksNone, EndOfOptions: "--", MCP: MCPNone},
	}
	for name, s := range builtinScreens {
		p := b[name]
		p.Screens = s.clone()
		b[name] = p
	}
	return b
}

// BuiltinNames lists the built-in providers, sorted.
func BuiltinNames() []string { return slices.Sorted(maps.Keys(builtins())) }

// CheckBuiltinPrompt refuses, from built-in knowledge alone, a prompt that
// the named built-in provider's CLI would parse as an option. The server
// knows no host's catalog, so an unknown name (or a host that overrides a
// built-in) is left to the wrapper, which checks its own catalog (Argv).
func CheckBuiltinPrompt(name, prompt string, args []string) error {
	p, ok := builtins()[name]
	if !ok {
		return nil
	}
	_, _, err := p.ArgvParts(Vars{Prompt: prompt, Args: args})
	return err
}

// BuiltinResumable reports whether the named built-in provider can
// resume a conversation (it has resume_args); false for any other name.
// The server asks the hosts' catalogs first (what workers report at
// registration) and falls back on this.
func BuiltinResumable(name string) bool {
	return len(builtins()[name].ResumeArgs) > 0
}

// BuiltinContinueMessage is the named built-in provider's
// continue_message, "continue" for any other name or one without it: the
// server knows no host's catalog (docs/architecture.md#continue-when-a-limit-resets).
func BuiltinContinueMessage(name string) string {
	if m := builtins()[name].ContinueMessage; m != "" {
		return m
	}
	return "continue"
}

// Vars are the values of the argv placeholders of one run.
type Vars struct {
	Prompt    string // {prompt}
	TaskTitle string // {task_title}
	RunID     string // {run_id}
	Attempt   int    // {attempt}
	Cwd       string // {cwd}
	// SessionID is {session_id}: the CLI's conversation to resume
	// (resume_args only).
	SessionID string
	// Args are the run's extra arguments, which the wrapper puts between
	// the template's head and tail: only their presence is read here.
	Args []string
}

// placeholders are the names Argv substitutes; anything else that looks
// like one is refused when the catalog loads, so a typo never reaches a CLI
// as literal text. resumePlaceholders are those of resume_args.
var (
	placeholders       = []string{"{prompt}", "{task_title}", "{run_id}", "{attempt}", "{cwd}"}
	resumePlaceholders = append(slices.Clone(placeholders), "{session_id}")
)

// Argv renders the argument template (without the binary). Each placeholder
// is replaced inside its argument in a single pass, so text in the prompt
// that looks like a placeholder stays literal, and an argument is never
// split. An argument that is exactly "{prompt}" is dropped when the prompt
// is empty, so an interactive CLI starts without an initial prompt. A
// prompt starting with "-" is never an option: see ArgvParts.
func (p Provider) Argv(v Vars) ([]string, error) {
	head, tail, err := p.ArgvParts(v)
	return append(head, tail...), err
}

// ArgvParts renders the argument template as Argv does, in two parts: the
// other arguments (extra run arguments and hook options go after them)
// and the tail that must come last. The tail is empty unless the prompt
// starts with "-": then it is EndOfOptions, the prompt and what follows it
// in the template, since after "--" the CLI reads no option; without an
// EndOfOptions the prompt is refused with ErrPromptLooksLikeOption. Only an
// argument that is exactly "{prompt}" can be read as an option: a prompt
// inside a longer argument ("--prompt={prompt}") is that option's value.
func (p Provider) ArgvParts(v Vars) (head, tail []string, err error) {
	return p.parts(p.Args, v)
}

// ErrNotResumable refuses a resume of a provider without resume_args.
var ErrNotResumable = errors.New("the provider has no resume_args: it cannot resume a conversation")

// ResumeParts renders resume_args as ArgvParts renders args: the argv
// that resumes the conversation v.SessionID, with v.Prompt as the message
// the resumed CLI gets ("" drops an argument that is exactly {prompt}).
func (p Provider) ResumeParts(v Vars) (head, tail []string, err error) {
	if len(p.ResumeArgs) == 0 {
		return nil, nil, ErrNotResumable
	}
	return p.parts(p.ResumeArgs, v)
}

// parts renders one argv template (Args or ResumeArgs); see ArgvParts.
func (p Provider) parts(tmpl []string, v Vars) (head, tail []string, err error) {
	r := strings.NewReplacer(
		"{prompt}", v.Prompt,
		"{task_title}", v.TaskTitle,
		"{run_id}", v.RunID,
		"{attempt}", strconv.Itoa(v.Attempt),
		"{cwd}", v.Cwd,
		"{session_id}", v.SessionID,
	)
	head = make([]string, 0, len(tmpl))
	inTail := false
	for _, a := range tmpl {
		if a == "{prompt}" && v.Prompt == "" {
			continue
		}
		if a == "{prompt}" && strings.HasPrefix(v.Prompt, "-") && !inTail {
			if p.EndOfOptions == "" {
				return nil, nil, fmt.Errorf("%w: it takes no \"--\" (end_of_options)", ErrPromptLooksLikeOption)
			}
			if len(v.Args) > 0 && len(head) > 0 && strings.HasPrefix(head[len(head)-1], "-") {
				// The prompt is the value of the option before it (sh's
				// -c): the run's args would land between the two.
				return nil, nil, fmt.Errorf("%w: it is the value of %s in the template, and the run's args would come between them", ErrPromptLooksLikeOption, head[len(head)-1])
			}
			inTail = true
			tail = append(tail, p.EndOfOptions)
		}
		if inTail {
			tail = append(tail, r.Replace(a))
			continue
		}
		head = append(head, r.Replace(a))
	}
	return head, tail, nil
}

// Env returns base with the proxy variables and then the provider's own
// variables applied, later ones winning; each name appears once, and the
// result keeps base's order with new names appended sorted.
func (p Provider) Env(base []string, proxy map[string]string) []string {
	return mergeEnv(mergeEnv(base, proxy), p.ExtraEnv)
}

// WithPassed returns env with the passed variables (the worker's values
// of pass_env names, from the dispatch file) set over it. A name that is
// not a variable name, or that PassEnvName refuses (the PAM_* run
// variables and pam's secrets), is dropped: whatever the file says, it
// never replaces what the wrapper sets.
func WithPassed(env []string, passed map[string]string) []string {
	ok := make(map[string]string, len(passed))
	for k, v := range passed {
		if PassEnvName(k) == nil && !strings.ContainsRune(v, 0) {
			ok[k] = v
		}
	}
	return mergeEnv(env, ok)
}

// mergeEnv sets vars over env (KEY=value strings): a name already present
// is replaced in place, and duplicates in env collapse to their last value.
func mergeEnv(env []string, vars map[string]string) []string {
	out := make([]string, 0, len(env)+len(vars))
	index := map[string]int{}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := index[k]; ok {
			out[i] = kv
			continue
		}
		index[k] = len(out)
		out = append(out, kv)
	}
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		kv := k + "=" + vars[k]
		if i, ok := index[k]; ok {
			out[i] = kv
			continue
		}
		index[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// HookArgs returns the arguments that wire the provider's completion to
// `pam hook`, with pamBinary the absolute path of the pam executable. They
// travel on the CLI's command line only: nothing is written into the
// user's repository or the provider's own config files.
//
//   - claude: --settings with inline JSON holding a Stop hook running
//     `pam hook completed`, a PostToolUse hook (every tool) running
//     `pam hook progress` and a Notification hook (Claude asks for
//     permission, or has waited for input) running `pam hook needs-input`.
//     Claude runs hook commands through a shell, so the path is
//     single-quoted. When pam's MCP server is Claude's too (MCPArgs),
//     the settings also allow its tools, so they never ask.
//   - codex: -c notify=["<pam>","hook","completed"]; codex appends a JSON
//     argument describing the event, which `pam hook` reads only for its
//     type (HookKindOfEvent: an approval or input request is needs-input).
//   - others: none; the wrapper's finished signal is the completion.
func (p Provider) HookArgs(pamBinary string) []string {
	switch p.Hooks {
	case HooksClaude:
		cmd := func(kind string) map[string]any {
			return map[string]any{"type": "command", "command": shellQuote(pamBinary) + " hook " + kind}
		}
		settings := map[string]any{
			"hooks": map[string]any{
				"Stop":         []any{map[string]any{"hooks": []any{cmd("completed")}}},
				"PostToolUse":  []any{map[string]any{"matcher": "*", "hooks": []any{cmd("progress")}}},
				"Notification": []any{map[string]any{"hooks": []any{cmd(HookNeedsInput)}}},
			},
		}
		if p.MCP == MCPClaude {
			settings["permissions"] = claudePermissions()
		}
		return []string{"--settings", compactJSON(settings)}
	case HooksCodex:
		// A JSON array of strings is also a valid TOML inline array.
		return []string{"-c", "notify=" + compactJSON([]string{pamBinary, "hook", "completed"})}
	default:
		return nil
	}
}

// HookNeedsInput is the `pam hook` kind that says the agent waits for a
// person (contract name; the signal it posts is needs_input).
const HookNeedsInput = "needs-input"

// codexRequestTypes are the types of codex events that ask for a person.
// codex's notify program is documented with one type only,
// agent-turn-complete; its TUI notifications name approval-requested and
// user-input-requested. pam assumes that a notify event for an approval or
// an input request carries one of these, or any type ending in
// "-requested", and maps it to needs-input: an assumption about codex, kept
// here in one place.
var codexRequestTypes = map[string]bool{"approval-requested": true, "user-input-requested": true}

// codexTitlePrompt starts the one input message of the side thread in
// which codex 0.171 titles each new session. That thread's turn ends with
// an agent-turn-complete notify like the agent's own turns, often while
// the agent still works or waits for an approval, so it says nothing of
// the run (docs/agents.md#codex).
const codexTitlePrompt = "Generate a concise, single-line task title"

// HookKindOfEvent is the `pam hook` kind to post for kind called with a
// provider's event argument (codex's notify appends its event as JSON):
// an event that asks for a person is needs-input whatever kind the
// wiring named; the end of a turn of codex's own title thread is ""
// (post nothing); anything else (no argument, another type, not JSON)
// keeps kind.
func HookKindOfEvent(kind, event string) string {
	if event == "" {
		return kind
	}
	var ev struct {
		Type  string   `json:"type"`
		Input []string `json:"input-messages"`
	}
	if json.Unmarshal([]byte(event), &ev) != nil {
		return kind
	}
	if codexRequestTypes[ev.Type] || strings.HasSuffix(ev.Type, "-requested") {
		return HookNeedsInput
	}
	if ev.Type == "agent-turn-complete" && len(ev.Input) == 1 && strings.HasPrefix(ev.Input[0], codexTitlePrompt) {
		return ""
	}
	return kind
}

// SessionOfHookInput reads the CLI's own session id from the JSON a hook
// gets on its stdin: Claude Code's hooks and gemini's (0.61) carry
// session_id. "" when there is none; the caller validates what it gets
// (wire.ValidAgentSessionID).
func SessionOfHookInput(stdin []byte) string {
	var in struct {
		SessionID string `json:"session_id"`
	}
	if json.Unmarshal(stdin, &in) != nil {
		return ""
	}
	return in.SessionID
}

// SessionOfEvent reads the CLI's session id from a hook's event argument:
// codex's notify event names its conversation thread-id (codex 0.171:
// {"type":"agent-turn-complete","thread-id":…,"turn-id":…}). "" when
// there is none.
func SessionOfEvent(event string) string {
	var ev struct {
		ThreadID string `json:"thread-id"`
	}
	if json.Unmarshal([]byte(event), &ev) != nil {
		return ""
	}
	return ev.ThreadID
}

// compactJSON encodes v on one line without HTML escaping.
func compactJSON(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(err) // maps of strings always encode
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
