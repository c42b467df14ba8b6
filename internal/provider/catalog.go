package provider

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"unicode"

	"github.com/BurntSushi/toml"

	"pam/internal/screen"
	"pam/internal/trust"
)

// FileName is the catalog file inside the config dir.
const FileName = "providers.toml"

// MaxFileSize bounds providers.toml.
const MaxFileSize = 1 << 20

var (
	nameRe  = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
	envRe   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	proxyRe = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)
	// placeholderRe finds what looks like a placeholder in an argument.
	placeholderRe = regexp.MustCompile(`\{[a-z_]+\}`)
)

// lowerProxy are the lower-case spellings of the proxy variables, which
// curl and many other tools read instead of the upper-case ones; the
// [proxy] table accepts them besides UPPER_CASE names.
var lowerProxy = []string{"http_proxy", "https_proxy", "no_proxy", "all_proxy", "ftp_proxy"}

// Catalog is the providers of one host: the built-ins with the operator's
// providers.toml merged over them.
type Catalog struct {
	// File is the providers.toml that was read, or "" when there was none.
	File string
	// Proxy is the [proxy] table, injected into every CLI's environment.
	Proxy map[string]string
	// SearchPath is the PATH list Resolve searches for bare binary names;
	// empty means the process's $PATH at the time of the call.
	SearchPath string

	providers map[string]Provider
	// patterns are each provider's screens, compiled when loaded.
	patterns map[string]*screen.Patterns
}

// fileEntry is one [providers.NAME] table; pointers tell "not set" (keep
// the built-in's value) from "set to empty".
type fileEntry struct {
	Binary *string            `toml:"binary"`
	Args   *[]string          `toml:"args"`
	Env    *map[string]string `toml:"env"`
	// PassEnv is pass_env: variables taken from the worker's environment.
	PassEnv *[]string `toml:"pass_env"`
	Hooks   *string   `toml:"hooks"`
	// EndOfOptions is end_of_options: the argument that ends the CLI's
	// options ("--"), or "" when it takes none.
	EndOfOptions *string `toml:"end_of_options"`
	// Trust is trust: how pam marks its own worktrees trusted for the
	// CLI ("claude", "codex", "gemini"; "" or "none" for no marking).
	Trust *string `toml:"trust"`
	// Screens is the [providers.NAME.screens] table.
	Screens *fileScreens `toml:"screens"`
	// ResumeArgs is resume_args and ContinueMessage continue_message
	// (docs/architecture.md#resume-and-continue).
	ResumeArgs      *[]string `toml:"resume_args"`
	ContinueMessage *string   `toml:"continue_message"`
	// MCP is how pam's MCP server reaches the CLI.
	MCP *string `toml:"mcp"`
}

// fileScreens is a [providers.NAME.screens] table: each list set
// replaces the built-in's list of that key.
type fileScreens struct {
	NeedsInput  *[]string `toml:"needs_input"`
	Working     *[]string `toml:"working"`
	RateLimited *[]string `toml:"rate_limited"`
}

type fileShape struct {
	Providers map[string]fileEntry `toml:"providers"`
	Proxy     map[string]string    `toml:"proxy"`
}

// setProxy takes the file's [proxy] variables, checked: they go into
// every CLI's environment.
func (c *Catalog) setProxy(path string, proxy map[string]string) error {
	for _, name := range slices.Sorted(maps.Keys(proxy)) {
		v := proxy[name]
		if !proxyRe.MatchString(name) && !slices.Contains(lowerProxy, name) {
			return fmt.Errorf("%s: proxy.%s: not a variable name (want UPPER_CASE letters, digits and _)", path, name)
		}
		if strings.ContainsRune(v, 0) {
			return fmt.Errorf("%s: proxy.%s: value holds a NUL byte", path, name)
		}
		c.Proxy[name] = v
	}
	return nil
}

// mergeProvider merges the file's entry for name over the built-in of
// that name (a new provider must give its binary), and validates the
// result.
func (c *Catalog) mergeProvider(path, name string, e fileEntry) error {
	where := fmt.Sprintf("%s: providers.%s", path, name)
	if !nameRe.MatchString(name) {
		return fmt.Errorf("%s: bad provider name (want a lowercase letter, then up to 31 of a-z, 0-9, _ and -)", where)
	}
	p, builtin := c.providers[name]
	if !builtin {
		p = Provider{Name: name, Args: []string{"{prompt}"}, Hooks: HooksNone, MCP: MCPNone}
		if e.Binary == nil {
			return fmt.Errorf("%s.binary: required for a provider that is not built in", where)
		}
	}
	e.applyTo(&p)
	if err := p.validate(); err != nil {
		return fmt.Errorf("%s.%w", where, err)
	}
	c.providers[name] = p
	return nil
}

// applyTo sets the fields the entry gives over p's; a field the entry
// leaves out keeps p's (the built-in's) value.
func (e fileEntry) applyTo(p *Provider) {
	if e.Binary != nil {
		p.Binary = *e.Binary
	}
	if e.Args != nil {
		p.Args = slices.Clone(*e.Args)
	}
	if e.Env != nil {
		p.ExtraEnv = maps.Clone(*e.Env)
	}
	if e.PassEnv != nil {
		p.PassEnv = slices.Clone(*e.PassEnv)
	}
	if e.Hooks != nil {
		p.Hooks = *e.Hooks
	}
	if e.EndOfOptions != nil {
		p.EndOfOptions = *e.EndOfOptions
	}
	if e.Trust != nil {
		p.Trust = *e.Trust
	}
	if e.Screens != nil {
		p.Screens = p.Screens.merged(*e.Screens)
	}
	if e.ResumeArgs != nil {
		p.ResumeArgs = slices.Clone(*e.ResumeArgs)
	}
	if e.ContinueMessage != nil {
		p.ContinueMessage = *e.ContinueMessage
	}
	if e.MCP != nil {
		p.MCP = *e.MCP
	}
}

// Load reads <configDir>/providers.toml and merges it over the built-in
// entries. A missing file (or an empty configDir) gives the built-ins
// alone. A user entry named like a built-in overrides it field by field; a
// new entry needs a binary and, without args, gets ["{prompt}"]. Unknown
// keys, bad names and unknown placeholders are refused with an error that
// names the file and the offending key.
func Load(configDir string) (*Catalog, error) {
	if configDir == "" {
		return parse("", nil)
	}
	path := filepath.Join(configDir, FileName)
	data, err := readBounded(path)
	if errors.Is(err, fs.ErrNotExist) {
		return parse("", nil)
	}
	if err != nil {
		return nil, err
	}
	return parse(path, data)
}

// parse merges the content of the providers.toml at path over the
// built-ins; path "" means there is no file. Errors name path.
func parse(path string, data []byte) (*Catalog, error) {
	c := &Catalog{Proxy: map[string]string{}, providers: builtins()}
	if path == "" {
		if err := c.compileScreens(path); err != nil {
			return nil, err // not reached: the built-ins compile
		}
		return c, nil
	}
	c.File = path
	var f fileShape
	md, err := toml.Decode(string(data), &f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		slices.Sort(keys)
		return nil, fmt.Errorf("%s: unknown key %q (a provider takes binary, args, env, pass_env, hooks, end_of_options, resume_args, continue_message, mcp, screens and trust; [proxy] takes variables)", path, keys[0])
	}
	if err := c.setProxy(path, f.Proxy); err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(f.Providers)) {
		if err := c.mergeProvider(path, name, f.Providers[name]); err != nil {
			return nil, err
		}
	}
	if err := c.compileScreens(path); err != nil {
		return nil, err
	}
	return c, nil
}

// readBounded reads a file of at most MaxFileSize bytes.
func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, MaxFileSize)
	}
	return data, nil
}

// validate checks a merged entry; the error starts with the field name.
func (p *Provider) validate() error {
	switch {
	case p.Binary == "":
		return errors.New("binary: must not be empty")
	case strings.ContainsRune(p.Binary, 0):
		return errors.New("binary: holds a NUL byte")
	case strings.ContainsRune(p.Binary, '/') && !filepath.IsAbs(p.Binary):
		return fmt.Errorf("binary: %q is a relative path (want a bare name looked up on PATH, or an absolute path)", p.Binary)
	}
	if p.EndOfOptions != "" && !strings.HasPrefix(p.EndOfOptions, "-") || strings.ContainsRune(p.EndOfOptions, 0) {
		return fmt.Errorf("end_of_options: %q is not an option (want \"--\", or \"\" when the CLI takes none)", p.EndOfOptions)
	}
	if err := checkTemplate("args", p.Args, placeholders); err != nil {
		return err
	}
	if err := checkTemplate("resume_args", p.ResumeArgs, resumePlaceholders); err != nil {
		return err
	}
	if strings.ContainsRune(p.ContinueMessage, 0) || len(p.ContinueMessage) > maxContinueMessage {
		return fmt.Errorf("continue_message: must be at most %d bytes without NUL", maxContinueMessage)
	}
	for _, k := range slices.Sorted(maps.Keys(p.ExtraEnv)) {
		if !envRe.MatchString(k) {
			return fmt.Errorf("env.%s: not a variable name (want letters, digits and _, not starting with a digit)", k)
		}
		if strings.ContainsRune(p.ExtraEnv[k], 0) {
			return fmt.Errorf("env.%s: value holds a NUL byte", k)
		}
	}
	for i, k := range p.PassEnv {
		if err := PassEnvName(k); err != nil {
			return fmt.Errorf("pass_env[%d]: %w", i, err)
		}
	}
	switch {
	case p.Trust == TrustNone:
		p.Trust = ""
	case p.Trust != "" && !trust.Known(p.Trust):
		return fmt.Errorf("trust: %q is not one of %s, or %s", p.Trust, strings.Join(trust.Kinds(), ", "), TrustNone)
	}
	switch p.Hooks {
	case "":
		p.Hooks = HooksNone
	case HooksNone, HooksClaude, HooksCodex:
	default:
		return fmt.Errorf("hooks: %q is not one of %s, %s, %s", p.Hooks, HooksClaude, HooksCodex, HooksNone)
	}
	switch p.MCP {
	case "":
		p.MCP = MCPNone
	case MCPNone, MCPClaude, MCPCodex, MCPGemini:
	default:
		return fmt.Errorf("mcp: %q is not one of %s, %s, %s, %s", p.MCP, MCPClaude, MCPCodex, MCPGemini, MCPNone)
	}
	return nil
}

// maxContinueMessage bounds continue_message: it is typed as a message.
const maxContinueMessage = 4096

// checkTemplate checks the argv template of key: no NUL, and only the
// placeholders known there.
func checkTemplate(key string, tmpl, known []string) error {
	for i, a := range tmpl {
		if strings.ContainsRune(a, 0) {
			return fmt.Errorf("%s[%d]: holds a NUL byte", key, i)
		}
		for _, ph := range placeholderRe.FindAllString(a, -1) {
			if !slices.Contains(known, ph) {
				return fmt.Errorf("%s[%d]: unknown placeholder %s (known: %s)", key, i, ph, strings.Join(known, ", "))
			}
		}
	}
	return nil
}

// Resumable lists, sorted, the providers that can resume a conversation
// (they have resume_args): what a worker reports at registration, so
// that the server refuses a continue its hosts could not resume.
func (c *Catalog) Resumable() []string {
	var out []string
	for name, p := range c.providers {
		if len(p.ResumeArgs) > 0 {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// ContinueMessages maps each provider that has a continue_message to it:
// what a worker reports at registration, so that the server types this
// host's own message when a run's usage limit resets
// (docs/architecture.md#continue-when-a-limit-resets).
func (c *Catalog) ContinueMessages() map[string]string {
	out := map[string]string{}
	for name, p := range c.providers {
		if p.ContinueMessage != "" {
			out[name] = p.ContinueMessage
		}
	}
	return out
}

// Get returns a copy of the named provider.
func (c *Catalog) Get(name string) (Provider, bool) {
	p, ok := c.providers[name]
	if !ok {
		return Provider{}, false
	}
	p.Args = slices.Clone(p.Args)
	p.ExtraEnv = maps.Clone(p.ExtraEnv)
	p.PassEnv = slices.Clone(p.PassEnv)
	p.ResumeArgs = slices.Clone(p.ResumeArgs)
	p.Screens = p.Screens.clone()
	return p, true
}

// PassEnvName checks a name of pass_env or PAM_PASS_ENV: a variable name
// and not PAM_*. The wrapper sets the PAM_* run variables itself, and
// PAM_WORKER_TOKEN, PAM_TOKEN and PAM_DATABASE_URL must never reach a CLI.
func PassEnvName(name string) error {
	if !envRe.MatchString(name) {
		return fmt.Errorf("%q is not a variable name (want letters, digits and _, not starting with a digit)", name)
	}
	if strings.HasPrefix(name, "PAM_") {
		return fmt.Errorf("%s: PAM_* variables are never passed (the wrapper sets the run's own, and pam's secrets stay out of the CLI)", name)
	}
	return nil
}

// ParsePassEnv reads PAM_PASS_ENV: variable names separated by commas,
// white space or both; empty items are skipped and repeats kept once.
func ParsePassEnv(s string) ([]string, error) {
	var out []string
	for _, name := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || unicode.IsSpace(r) }) {
		if err := PassEnvName(name); err != nil {
			return nil, fmt.Errorf("PAM_PASS_ENV: %w", err)
		}
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out, nil
}

// PassEnvNames lists, sorted and once each, the variables the named
// provider's CLI takes from the worker's environment: its pass_env and
// extra (PAM_PASS_ENV, passed to every CLI). An unknown provider gets
// extra alone.
func (c *Catalog) PassEnvNames(name string, extra []string) []string {
	names := slices.Concat(c.providers[name].PassEnv, extra)
	slices.Sort(names)
	return slices.Compact(names)
}

// Passed picks from the worker's environment (lookup, as os.LookupEnv)
// the values of names: what goes into a dispatch file. A name that is not
// set is left out; one set to "" is passed empty.
func Passed(names []string, lookup func(string) (string, bool)) map[string]string {
	out := map[string]string{}
	for _, k := range names {
		if v, ok := lookup(k); ok {
			out[k] = v
		}
	}
	return out
}

// Names lists the catalog's providers, sorted.
func (c *Catalog) Names() []string { return slices.Sorted(maps.Keys(c.providers)) }

// Resolve returns the absolute path of the named provider's binary: an
// absolute binary as it is, a bare name looked up on SearchPath (or $PATH).
// Either way it must be an executable regular file.
func (c *Catalog) Resolve(name string) (string, error) {
	p, ok := c.providers[name]
	if !ok {
		return "", fmt.Errorf("unknown provider %q", name)
	}
	if filepath.IsAbs(p.Binary) {
		if err := CheckExecutable(p.Binary); err != nil {
			return "", fmt.Errorf("provider %s: %w", name, err)
		}
		return p.Binary, nil
	}
	search := c.SearchPath
	if search == "" {
		search = os.Getenv("PATH")
	}
	for _, dir := range filepath.SplitList(search) {
		// Relative PATH entries would make the answer depend on the
		// current directory; like exec.LookPath, never use them.
		if !filepath.IsAbs(dir) {
			continue
		}
		cand := filepath.Join(dir, p.Binary)
		if CheckExecutable(cand) == nil {
			return cand, nil
		}
	}
	return "", fmt.Errorf("provider %s: %q not found on PATH", name, p.Binary)
}

// Available maps each provider whose binary is found to its absolute path:
// what a worker reports at registration.
func (c *Catalog) Available() map[string]string {
	out := map[string]string{}
	for name := range c.providers {
		if path, err := c.Resolve(name); err == nil {
			out[name] = path
		}
	}
	return out
}

// CheckExecutable reports whether path is a regular file this process may
// execute.
func CheckExecutable(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("binary %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("binary %s: not a regular file", path)
	}
	if st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("binary %s: not executable", path)
	}
	const xOK = 1
	if err := syscall.Access(path, xOK); err != nil {
		return fmt.Errorf("binary %s: not executable by this user: %w", path, err)
	}
	return nil
}
