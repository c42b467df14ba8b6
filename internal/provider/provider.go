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
	"maps"
	"slices"
	"strconv"
	"strings"
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
	// Hooks says how completion is wired: HooksClaude, HooksCodex or
	// HooksNone ("" reads as none).
	Hooks string
}

// builtins are the entries every catalog starts from.
func builtins() map[string]Provider {
	return map[string]Provider{
		"claude": {Name: "claude", Binary: "claude", Args: []string{"{prompt}"}, Hooks: HooksClaude},
		"codex":  {Name: "codex", Binary: "codex", Args: []string{"{prompt}"}, Hooks: HooksCodex},
		"gemini": {Name: "gemini", Binary: "gemini", Args: []string{"{prompt}"}, Hooks: HooksNone},
		"grok":   {Name: "grok", Binary: "grok", Args: []string{"{prompt}"}, Hooks: HooksNone},
		// The operator explicitly asking for a shell command in the session.
		"shell": {Name: "shell", Binary: "/bin/sh", Args: []string{"-c", "{prompt}"}, Hooks: HooksNone},
	}
}

// BuiltinNames lists the built-in providers, sorted.
func BuiltinNames() []string { return slices.Sorted(maps.Keys(builtins())) }

// Vars are the values of the argv placeholders of one run.
type Vars struct {
	Prompt    string // {prompt}
	TaskTitle string // {task_title}
	RunID     string // {run_id}
	Attempt   int    // {attempt}
	Cwd       string // {cwd}
}

// placeholders are the names Argv substitutes; anything else that looks
// like one is refused when the catalog loads, so a typo never reaches a CLI
// as literal text.
var placeholders = []string{"{prompt}", "{task_title}", "{run_id}", "{attempt}", "{cwd}"}

// Argv renders the argument template (without the binary). Each placeholder
// is replaced inside its argument in a single pass, so text in the prompt
// that looks like a placeholder stays literal, and an argument is never
// split. An argument that is exactly "{prompt}" is dropped when the prompt
// is empty, so an interactive CLI starts without an initial prompt.
func (p Provider) Argv(v Vars) []string {
	r := strings.NewReplacer(
		"{prompt}", v.Prompt,
		"{task_title}", v.TaskTitle,
		"{run_id}", v.RunID,
		"{attempt}", strconv.Itoa(v.Attempt),
		"{cwd}", v.Cwd,
	)
	out := make([]string, 0, len(p.Args))
	for _, a := range p.Args {
		if a == "{prompt}" && v.Prompt == "" {
			continue
		}
		out = append(out, r.Replace(a))
	}
	return out
}

// Env returns base with the proxy variables and then the provider's own
// variables applied, later ones winning; each name appears once, and the
// result keeps base's order with new names appended sorted.
func (p Provider) Env(base []string, proxy map[string]string) []string {
	return mergeEnv(mergeEnv(base, proxy), p.ExtraEnv)
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
//     `pam hook completed` and a PostToolUse hook (every tool) running
//     `pam hook progress`. Claude runs hook commands through a shell, so the
//     path is single-quoted.
//   - codex: -c notify=["<pam>","hook","completed"]; codex appends a JSON
//     argument describing the event, which `pam hook` ignores.
//   - others: none; the wrapper's finished signal is the completion.
func (p Provider) HookArgs(pamBinary string) []string {
	switch p.Hooks {
	case HooksClaude:
		cmd := func(kind string) map[string]any {
			return map[string]any{"type": "command", "command": shellQuote(pamBinary) + " hook " + kind}
		}
		settings := map[string]any{
			"hooks": map[string]any{
				"Stop":        []any{map[string]any{"hooks": []any{cmd("completed")}}},
				"PostToolUse": []any{map[string]any{"matcher": "*", "hooks": []any{cmd("progress")}}},
			},
		}
		return []string{"--settings", compactJSON(settings)}
	case HooksCodex:
		// A JSON array of strings is also a valid TOML inline array.
		return []string{"-c", "notify=" + compactJSON([]string{pamBinary, "hook", "completed"})}
	default:
		return nil
	}
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
