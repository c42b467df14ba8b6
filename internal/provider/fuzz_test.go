package provider

import (
	"bytes"
	"errors"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

// The oracle's own copies of the catalog's rules (docs/architecture.md#pam-exec-run).
var (
	providerNameRe = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
	envNameRe      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	proxyNameRe    = regexp.MustCompile(`^([A-Z_][A-Z0-9_]*|http_proxy|https_proxy|no_proxy|all_proxy|ftp_proxy)$`)
	placeholderish = regexp.MustCompile(`\{[a-z_]+\}`)
	knownVars      = []string{"{prompt}", "{task_title}", "{run_id}", "{attempt}", "{cwd}"}
	knownResume    = append(slices.Clone(knownVars), "{session_id}")
)

const fuzzPath = "/etc/pam/providers.toml"

// FuzzLoadCatalog feeds hostile providers.toml files to the catalog
// loader, which every worker runs at start. Whatever the input: no panic;
// a refusal names the file; a catalog it takes keeps every built-in, and
// each provider in it has a valid name, a bare or absolute binary, known
// placeholders only, valid variable names and no NUL anywhere a command
// line or an environment would carry it; its argv, environment and hook
// arguments render; and written back as TOML it loads as the same
// catalog.
func FuzzLoadCatalog(f *testing.F) {
	for _, s := range []string{
		"",
		"# nothing but a comment\n",
		"[proxy]\nHTTPS_PROXY = \"http://proxy:3128\"\nno_proxy = \"localhost\"\n\n[providers.claude]\nbinary = \"/opt/claude/bin/claude\"\nenv = { ANTHROPIC_BASE_URL = \"https://gw.example\" }\n",
		"[providers.aider]\nbinary = \"aider\"\nargs = [\"--message\", \"{prompt}\", \"--title={task_title}\", \"{run_id}-{attempt}\", \"{cwd}\"]\nhooks = \"none\"\n",
		"[providers.codex]\nargs = []\nhooks = \"codex\"\n",
		"[providers.shell]\nbinary = \"/bin/bash\"\nargs = [\"-lc\", \"{prompt}\"]\nenv = {}\n",
		"[providers.claude]\nbniary = \"x\"\n",
		"[providers.Claude]\nbinary = \"x\"\n",
		"[providers.aider]\nargs = []\n",
		"[providers.claude]\nbinary = \"bin/claude\"\n",
		"[providers.claude]\nenv = { \"1BAD\" = \"x\" }\n",
		"[providers.claude]\nargs = [\"{promt}\"]\n",
		"[providers.claude]\nargs = [\"a\\u0000b\"]\n",
		"[proxy]\nhttp-proxy = \"x\"\n",
		"[providers.claude\n",
		"providers = 5\n",
		"[providers]\nclaude = \"x\"\n",
		"[[providers.claude]]\nbinary = \"x\"\n",
		"[providers.\"a.b\"]\nbinary = \"x\"\n",
		"[providers.x]\nbinary = \"\"\"\nmulti\nline\"\"\"\n",
		"[providers.aider.screens]\nneeds_input = [\"Allow edits\\\\?\"]\nworking = [\"thinking\"]\n[providers.aider]\nbinary = \"aider\"\n",
		"[providers.claude.screens]\nrate_limited = [\"(unclosed\"]\n",
		"[providers.claude.screens]\nworking = []\nneeds_input = [\".*\"]\n",
		"[providers.aider]\nbinary = \"aider\"\nresume_args = [\"--restore\", \"{session_id}\", \"{prompt}\"]\ncontinue_message = \"go on\"\n",
		"[providers.claude]\nresume_args = []\ncontinue_message = \"\"\n",
		"[providers.claude]\nresume_args = [\"{sesion_id}\"]\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		c, err := parse(fuzzPath, []byte(data))
		if err != nil {
			if !strings.HasPrefix(err.Error(), fuzzPath+": ") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		catalogInBounds(t, c)
		again := encodeCatalog(t, c)
		back, err := parse(fuzzPath, again)
		if err != nil {
			t.Fatalf("catalog written back does not load: %v\n%s", err, again)
		}
		if !sameCatalog(c, back) {
			t.Fatalf("catalog written back loads differently:\n%s", again)
		}
	})
}

func catalogInBounds(t *testing.T, c *Catalog) {
	t.Helper()
	names := c.Names()
	for _, b := range BuiltinNames() {
		if !slices.Contains(names, b) {
			t.Fatalf("built-in %s lost", b)
		}
	}
	for k, v := range c.Proxy {
		if !proxyNameRe.MatchString(k) || strings.ContainsRune(v, 0) {
			t.Fatalf("proxy %q = %q taken", k, v)
		}
	}
	vars := Vars{Prompt: "p {cwd} {prompt}", TaskTitle: "t", RunID: "0a0a0a0a-1111-4111-8111-111111111111", Attempt: 2, Cwd: "/w"}
	for _, name := range names {
		p, _ := c.Get(name)
		if !providerNameRe.MatchString(name) || p.Name != name {
			t.Fatalf("provider %q (%q) taken", name, p.Name)
		}
		if p.Binary == "" || strings.ContainsRune(p.Binary, 0) || (strings.Contains(p.Binary, "/") && !strings.HasPrefix(p.Binary, "/")) {
			t.Fatalf("%s: binary %q taken", name, p.Binary)
		}
		for _, a := range p.Args {
			if strings.ContainsRune(a, 0) {
				t.Fatalf("%s: arg %q taken", name, a)
			}
			for _, ph := range placeholderish.FindAllString(a, -1) {
				if !slices.Contains(knownVars, ph) {
					t.Fatalf("%s: placeholder %s taken", name, ph)
				}
			}
		}
		for _, a := range p.ResumeArgs {
			for _, ph := range placeholderish.FindAllString(a, -1) {
				if !slices.Contains(knownResume, ph) || strings.ContainsRune(a, 0) {
					t.Fatalf("%s: resume arg %q taken", name, a)
				}
			}
		}
		if strings.ContainsRune(p.ContinueMessage, 0) {
			t.Fatalf("%s: continue_message %q taken", name, p.ContinueMessage)
		}
		for k, v := range p.ExtraEnv {
			if !envNameRe.MatchString(k) || strings.ContainsRune(v, 0) {
				t.Fatalf("%s: env %q = %q taken", name, k, v)
			}
		}
		if !slices.Contains([]string{HooksNone, HooksClaude, HooksCodex}, p.Hooks) {
			t.Fatalf("%s: hooks %q taken", name, p.Hooks)
		}
		argv, err := p.Argv(vars)
		if err != nil && (!errors.Is(err, ErrPromptLooksLikeOption) || p.EndOfOptions != "" || !strings.HasPrefix(vars.Prompt, "-")) {
			t.Fatalf("%s: Argv: %v", name, err)
		}
		if len(argv) > len(p.Args)+1 {
			t.Fatalf("%s: %d args rendered from %d", name, len(argv), len(p.Args))
		}
		for _, a := range argv {
			if strings.ContainsRune(a, 0) {
				t.Fatalf("%s: rendered arg %q", name, a)
			}
		}
		env := p.Env([]string{"PATH=/bin", "HOME=/root"}, c.Proxy)
		seen := map[string]bool{}
		for _, kv := range env {
			k, _, _ := strings.Cut(kv, "=")
			if seen[k] {
				t.Fatalf("%s: %s twice in the environment", name, k)
			}
			seen[k] = true
		}
		_ = p.HookArgs("/usr/local/bin/pam")
		_ = p.MCPArgs("/usr/local/bin/pam")
		if c.Patterns(name) == nil {
			t.Fatalf("%s: screens not compiled", name)
		}
	}
}

// encodeCatalog writes c as a providers.toml stating every field of every
// provider.
func encodeCatalog(t *testing.T, c *Catalog) []byte {
	t.Helper()
	var out fileShape
	out.Proxy = c.Proxy
	out.Providers = map[string]fileEntry{}
	for _, name := range c.Names() {
		p, _ := c.Get(name)
		args, env := p.Args, p.ExtraEnv
		if args == nil {
			args = []string{}
		}
		if env == nil {
			env = map[string]string{}
		}
		sc := fileScreens{NeedsInput: &p.Screens.NeedsInput, Working: &p.Screens.Working, RateLimited: &p.Screens.RateLimited}
		resume := p.ResumeArgs
		if resume == nil {
			resume = []string{}
		}
		out.Providers[name] = fileEntry{Binary: &p.Binary, Args: &args, Env: &env, Hooks: &p.Hooks, Screens: &sc,
			ResumeArgs: &resume, ContinueMessage: &p.ContinueMessage}
	}
	var b bytes.Buffer
	if err := toml.NewEncoder(&b).Encode(out); err != nil {
		t.Fatalf("encode the catalog: %v", err)
	}
	return b.Bytes()
}

func sameCatalog(a, b *Catalog) bool {
	if !slices.Equal(a.Names(), b.Names()) || !maps.Equal(a.Proxy, b.Proxy) {
		return false
	}
	for _, name := range a.Names() {
		pa, _ := a.Get(name)
		pb, _ := b.Get(name)
		if len(pa.Args) == 0 && len(pb.Args) == 0 {
			pa.Args, pb.Args = nil, nil
		}
		if len(pa.ResumeArgs) == 0 && len(pb.ResumeArgs) == 0 {
			pa.ResumeArgs, pb.ResumeArgs = nil, nil
		}
		if len(pa.ExtraEnv) == 0 && len(pb.ExtraEnv) == 0 {
			pa.ExtraEnv, pb.ExtraEnv = nil, nil
		}
		for _, l := range []*[]string{&pa.Screens.NeedsInput, &pb.Screens.NeedsInput, &pa.Screens.Working, &pb.Screens.Working, &pa.Screens.RateLimited, &pb.Screens.RateLimited} {
			if len(*l) == 0 {
				*l = nil
			}
		}
		if !reflect.DeepEqual(pa, pb) {
			return false
		}
	}
	return true
}
