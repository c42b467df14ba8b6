package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"pam/internal/provider"
	"pam/internal/trust"
)

// The one-time set-up of each agent CLI (docs/agents.md): what a person
// does once per host and user, and what makes a CLI stop at a question
// in every run until it is done. `pam doctor` checks it for every CLI of
// the catalog whose binary is found, in the files of the user running
// doctor (run it as the worker's user, with the worker's environment),
// and says the command or the file change that does it. A credential's
// value is never printed: the commands read it from the environment.

// checkAgentSetups checks the set-up of each CLI kind (a provider's
// trust key) whose binary is found, once per kind.
func checkAgentSetups(x *invocation, cat *provider.Catalog) []check {
	if cat == nil {
		return nil
	}
	var kinds []string
	for _, n := range cat.Names() {
		p, _ := cat.Get(n)
		if p.Trust == "" || slices.Contains(kinds, p.Trust) {
			continue
		}
		if _, err := cat.Resolve(n); err != nil {
			continue // a host need not have every CLI
		}
		kinds = append(kinds, p.Trust)
	}
	slices.Sort(kinds)
	var out []check
	for _, k := range kinds {
		switch k {
		case trust.Claude:
			out = append(out, checkClaudeSetup(x.env.getenv))
		case trust.Codex:
			out = append(out, checkCodexSetup(x.env.getenv))
		case trust.Gemini:
			out = append(out, checkGeminiSetup(x.env.getenv))
		}
	}
	return out
}

// readJSONFile reads a JSON object from path; ok is false when the file
// does not exist.
func readJSONFile(path string) (m map[string]any, ok bool, err error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return map[string]any{}, true, nil
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, true, fmt.Errorf("%s is not a JSON object: %v", path, err)
	}
	return m, true, nil
}

// jqEdit is a shell command that applies a jq filter to a JSON file in
// place, making the file (private to its user) when it is missing.
func jqEdit(path, filter string) string {
	q, d := shellQuote(path), shellQuote(filepath.Dir(path))
	return fmt.Sprintf(`(umask 077; mkdir -p %s && { [ -s %s ] || echo '{}' > %s; } && jq '%s' %s > %s.new && mv %s.new %s)`, d, q, q, filter, q, q, q, q)
}

// checkClaudeSetup: Claude Code's onboarding is done
// (hasCompletedOnboarding), and it has a credential it will use without
// asking: ANTHROPIC_API_KEY approved (its last 20 characters in
// customApiKeyResponses.approved), a token variable, or a login.
func checkClaudeSetup(getenv func(string) string) check {
	const name = "claude set-up"
	file, err := trust.File(trust.Claude, getenv)
	if err != nil {
		return fail(name, "run doctor with HOME set, as the worker's user", "%v", err)
	}
	cfg, found, err := readJSONFile(file)
	if err != nil {
		return fail(name, "repair or move aside "+file+", then run claude once in a terminal as this user", "%v", err)
	}
	var problems, filters []string
	if cfg["hasCompletedOnboarding"] != true {
		what := file + " does not exist"
		if found {
			what = "hasCompletedOnboarding is not true in " + file
		}
		problems = append(problems, "onboarding not done ("+what+"): claude starts with its first-run screens, which need api.anthropic.com")
		filters = append(filters, ".hasCompletedOnboarding = true")
	}
	cred := ""
	key := getenv("ANTHROPIC_API_KEY")
	switch {
	case key != "":
		tail := key[max(0, len(key)-20):]
		resp, _ := cfg["customApiKeyResponses"].(map[string]any)
		if listHas(resp["approved"], tail) {
			cred = "ANTHROPIC_API_KEY approved"
		} else {
			state := "not yet approved: claude asks whether to use it"
			if listHas(resp["rejected"], tail) {
				state = "rejected once: claude will not use it"
			}
			problems = append(problems, "ANTHROPIC_API_KEY "+state)
			filters = append(filters, ".customApiKeyResponses.approved = (((.customApiKeyResponses.approved // []) + [env.ANTHROPIC_API_KEY[-20:]]) | unique)",
				".customApiKeyResponses.rejected = ((.customApiKeyResponses.rejected // []) - [env.ANTHROPIC_API_KEY[-20:]])")
		}
	case getenv("ANTHROPIC_AUTH_TOKEN") != "":
		cred = "ANTHROPIC_AUTH_TOKEN set"
	case getenv("CLAUDE_CODE_OAUTH_TOKEN") != "":
		cred = "CLAUDE_CODE_OAUTH_TOKEN set"
	default:
		dir := getenv("CLAUDE_CONFIG_DIR")
		if dir == "" {
			dir = filepath.Join(getenv("HOME"), ".claude")
		}
		if _, err := os.Stat(filepath.Join(dir, ".credentials.json")); err == nil || cfg["oauthAccount"] != nil {
			cred = "logged in"
		} else {
			problems = append(problems, "no credential: ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN and CLAUDE_CODE_OAUTH_TOKEN are unset and nobody logged in")
		}
	}
	if len(problems) == 0 {
		return pass(name, "onboarding done, %s (%s)", cred, file)
	}
	fix := "run claude once in a terminal as this user and answer its questions"
	if len(filters) > 0 {
		fix = "with ANTHROPIC_API_KEY exported as the worker has it (jq reads it from the environment, nothing is printed): " +
			jqEdit(file, strings.Join(filters, " | ")) + "; or " + fix
	}
	if cred == "" && key == "" {
		fix += "; and give the worker a credential (export ANTHROPIC_API_KEY, which the built-in claude passes, or log in with claude /login)"
	}
	return fail(name, fix, "%s", strings.Join(problems, "; "))
}

// listHas reports whether v is a JSON list holding s.
func listHas(v any, s string) bool {
	l, _ := v.([]any)
	return slices.Contains(l, any(s))
}

// checkCodexSetup: codex has a credential it will use without its
// sign-in screen: a custom model provider whose key variable is set, or
// a login (auth.json with an API key or ChatGPT tokens).
func checkCodexSetup(getenv func(string) string) check {
	const name = "codex set-up"
	cfgFile, err := trust.File(trust.Codex, getenv)
	if err != nil {
		return fail(name, "run doctor with HOME set, as the worker's user", "%v", err)
	}
	var cfg struct {
		ModelProvider  string `toml:"model_provider"`
		ModelProviders map[string]struct {
			BaseURL            string `toml:"base_url"`
			EnvKey             string `toml:"env_key"`
			RequiresOpenAIAuth bool   `toml:"requires_openai_auth"`
		} `toml:"model_providers"`
	}
	if b, err := os.ReadFile(cfgFile); err == nil {
		if _, err := toml.Decode(string(b), &cfg); err != nil {
			return fail(name, "repair "+cfgFile, "%s is not valid TOML: %v", cfgFile, err)
		}
	}
	if mp, ok := cfg.ModelProviders[cfg.ModelProvider]; ok && cfg.ModelProvider != "openai" && !mp.RequiresOpenAIAuth {
		if mp.EnvKey != "" && getenv(mp.EnvKey) == "" {
			return fail(name, fmt.Sprintf("export %s to the worker and pass it to codex (pass_env or PAM_PASS_ENV)", mp.EnvKey),
				"model provider %q takes its key from %s, which is unset", cfg.ModelProvider, mp.EnvKey)
		}
		return pass(name, "model provider %q at %s (%s)", cfg.ModelProvider, mp.BaseURL, cfgFile)
	}
	authFile := filepath.Join(filepath.Dir(cfgFile), "auth.json")
	auth, found, err := readJSONFile(authFile)
	if err != nil {
		return fail(name, "move it aside and log in again: printenv OPENAI_API_KEY | codex login --with-api-key", "%v", err)
	}
	if found {
		if k, _ := auth["OPENAI_API_KEY"].(string); k != "" {
			return pass(name, "logged in with an API key (%s)", authFile)
		}
		if auth["tokens"] != nil {
			return pass(name, "logged in with ChatGPT (%s)", authFile)
		}
	}
	return fail(name, "as this user, with OPENAI_API_KEY exported: printenv OPENAI_API_KEY | codex login --with-api-key (or codex login for a ChatGPT plan)",
		"not logged in (%s holds no credential): codex starts with its sign-in screen", authFile)
}

// checkGeminiSetup: gemini-cli has an auth type chosen in its settings
// (security.auth.selectedType) and the credential that type needs.
func checkGeminiSetup(getenv func(string) string) check {
	const name = "gemini set-up"
	home := getenv("GEMINI_CLI_HOME")
	if home == "" {
		home = getenv("HOME")
	}
	if home == "" {
		return fail(name, "run doctor with HOME set, as the worker's user", "HOME is not set")
	}
	file := filepath.Join(home, ".gemini", "settings.json")
	settings, _, err := readJSONFile(file)
	if err != nil {
		return fail(name, "repair "+file, "%v", err)
	}
	authType := ""
	if sec, ok := settings["security"].(map[string]any); ok {
		if a, ok := sec["auth"].(map[string]any); ok {
			authType, _ = a["selectedType"].(string)
		}
	}
	if authType == "" {
		authType, _ = settings["selectedAuthType"].(string) // the older layout
	}
	setKey := jqEdit(file, `.security.auth.selectedType = "gemini-api-key"`)
	switch authType {
	case "":
		return fail(name, "for an API key (GEMINI_API_KEY): "+setKey+"; or run gemini once in a terminal as this user and choose",
			"no auth type chosen (security.auth.selectedType in %s): gemini starts with its sign-in question", file)
	case "gemini-api-key":
		if getenv("GEMINI_API_KEY") == "" {
			return fail(name, "export GEMINI_API_KEY to the worker (the built-in gemini passes it)", "auth type gemini-api-key, but GEMINI_API_KEY is unset")
		}
	case "oauth-personal":
		if _, err := os.Stat(filepath.Join(home, ".gemini", "oauth_creds.json")); err != nil {
			return fail(name, "run gemini once in a terminal as this user and sign in with Google", "auth type oauth-personal, but nobody signed in (%s)", filepath.Join(home, ".gemini", "oauth_creds.json"))
		}
	}
	return pass(name, "auth type %s (%s)", authType, file)
}
