package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"pam/internal/datadir"
	"pam/internal/defaults"
	"pam/internal/serve"
)

// kind is the type of a setting's value.
type kind int

const (
	kindString kind = iota
	kindInt
	kindBool
	kindDuration
	kindSize // bytes, written "20GB", "512MiB" (defaults.ParseSize)
)

// setting is one PAM_* variable of docs/architecture.md#configuration-and-files-on-disk. Each is also a kebab-case
// flag on the commands that use it; the flag wins over the variable, the
// variable over the default. A secret's flag is --<name>-file instead: a
// flag's value shows in the process list, a file's content does not.
type setting struct {
	Env     string
	Kind    kind
	Default string   // as text; "" = unset
	Uses    []string // the commands that register it
	Help    string
	// Secret is never a flag (only --<name>-file naming a file holding
	// it) and never shown as a default in help.
	Secret bool
	// Positive rejects zero and negative durations and ints.
	Positive bool
	// NonNegative rejects negative durations: 0 is allowed (and means
	// never, for a timer that says so).
	NonNegative bool
}

// Flag is the setting's flag name: PAM_DISPATCH_TIMEOUT → dispatch-timeout,
// PAM_TOKEN → token-file (a secret is read from the file the flag names).
func (s setting) Flag() string {
	name := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(s.Env, "PAM_"), "_", "-"))
	if s.Secret {
		name += "-file"
	}
	return name
}

// Command groups that share settings.
var (
	serveCmds  = []string{"serve", "up"}
	clientCmds = []string{"project", "item", "events", "doctor"}
	workerCmds = []string{"worker"}
	// localWorkerCmds take the settings of the worker that runs on this
	// machine; pam up runs one in-process (its URL and token it makes).
	localWorkerCmds = []string{"worker", "up"}
)

func uses(groups ...[]string) []string { return slices.Concat(groups...) }

// settings is the one table of every PAM_* variable. Commands not yet
// built (worker, exec) are listed so the table stays the single source of
// names, defaults and help.
var settings = []setting{
	{Env: "PAM_BIND", Default: "0.0.0.0", Uses: serveCmds, Help: "address to listen on (127.0.0.1 for pam up)"},
	{Env: "PAM_PORT", Kind: kindInt, Default: "7898", Uses: serveCmds, Help: "port to listen on (0 = pick a free port and print it)"},
	{Env: "PAM_DATA_DIR", Default: "", Uses: uses(serveCmds, clientCmds, workerCmds, []string{"exec"}), Help: "data dir: token, embedded database, worker state"},
	{Env: "PAM_CONFIG_DIR", Default: "", Uses: []string{"worker", "up", "exec", "doctor"}, Help: "config dir holding providers.toml"},
	{Env: "PAM_DATABASE_URL", Default: "", Uses: uses(serveCmds, []string{"doctor"}), Help: "file holding the PostgreSQL connection string (unset = embedded database)", Secret: true},
	{Env: "PAM_URL", Default: "http://127.0.0.1:7898", Uses: uses(clientCmds, workerCmds), Help: "where the orchestrator is"},
	{Env: "PAM_TOKEN", Default: "", Uses: clientCmds, Help: "file holding the operator token (default: the data dir's token file)", Secret: true},
	{Env: "PAM_WORKER_TOKEN", Default: "", Uses: workerCmds, Help: "file holding the worker credential (default: <data>/worker/token)", Secret: true},
	{Env: "PAM_HOST_NAME", Default: "", Uses: localWorkerCmds, Help: "host name to register as (default: the machine's host name)"},
	{Env: "PAM_EXECUTOR", Default: "tmux", Uses: uses(localWorkerCmds, []string{"doctor"}), Help: "executor: tmux, or pty (the built-in PTY holder, for hosts without tmux)"},
	{Env: "PAM_MAX_RUNS", Kind: kindInt, Default: strconv.Itoa(defaults.MaxRuns), Uses: localWorkerCmds, Positive: true, Help: "concurrent runs this host accepts"},
	{Env: "PAM_HEARTBEAT_INTERVAL", Kind: kindDuration, Default: defaults.Duration(defaults.HeartbeatInterval), Uses: localWorkerCmds, Positive: true, Help: "uplink heartbeat interval"},
	{Env: "PAM_HOST_OFFLINE_AFTER", Kind: kindDuration, Default: defaults.Duration(defaults.HostOfflineAfter), Uses: serveCmds, Positive: true, Help: "no heartbeat for this long: host offline"},
	{Env: "PAM_HOST_LOST_AFTER", Kind: kindDuration, Default: defaults.Duration(defaults.HostLostAfter), Uses: serveCmds, Positive: true, Help: "offline this long: host lost, its runs fail host_lost"},
	{Env: "PAM_DISPATCH_TIMEOUT", Kind: kindDuration, Default: defaults.Duration(defaults.DispatchTimeout), Uses: serveCmds, Positive: true, Help: "pending this long: run fails"},
	{Env: "PAM_DISPATCH_ACK_TIMEOUT", Kind: kindDuration, Default: defaults.Duration(defaults.DispatchAckTimeout), Uses: serveCmds, Positive: true, Help: "an offer not acked in time is withdrawn; a host that refused a run is not offered it again within it"},
	{Env: "PAM_CLI_HANG_TIMEOUT", Kind: kindDuration, Default: defaults.Duration(defaults.CLIHangTimeout), Uses: serveCmds, Positive: true, Help: "a working run (not waiting for a person, its usage limit or its next input) with no pane change this long: run fails cli_hang"},
	{Env: "PAM_COMPLETED_STOP_AFTER", Kind: kindDuration, Default: defaults.Duration(defaults.CompletedStopAfter), Uses: serveCmds, NonNegative: true, Help: "a run whose agent completed, with no input and no pane change since for this long, is stopped (0 = never)"},
	{Env: "PAM_RESTART_INITIAL_DELAY", Kind: kindDuration, Default: defaults.Duration(defaults.RestartInitialDelay), Uses: serveCmds, Positive: true, Help: "restart backoff start"},
	{Env: "PAM_RESTART_MAX_DELAY", Kind: kindDuration, Default: defaults.Duration(defaults.RestartMaxDelay), Uses: serveCmds, Positive: true, Help: "restart backoff cap"},
	{Env: "PAM_MAX_ATTEMPTS", Kind: kindInt, Default: strconv.Itoa(defaults.MaxAttempts), Uses: serveCmds, Positive: true, Help: "default max_attempts of a run"},
	{Env: "PAM_EVENT_RETENTION", Kind: kindDuration, Default: defaults.Duration(defaults.EventRetention), Uses: serveCmds, Positive: true, Help: "events older than this are purged"},
	{Env: "PAM_LEASE_TTL", Kind: kindDuration, Default: defaults.Duration(defaults.LeaseTTL), Uses: serveCmds, Positive: true, Help: "attach lease TTL without activity"},
	{Env: "PAM_CAPTURE_INTERVAL", Kind: kindDuration, Default: defaults.Duration(defaults.CaptureInterval), Uses: uses(localWorkerCmds, []string{"serve"}), Positive: true, Help: "capture-pane polling interval (serve: the workers' interval, for keys delivery)"},
	{Env: "PAM_IDLE_AFTER", Kind: kindDuration, Default: defaults.Duration(defaults.IdleAfter), Uses: localWorkerCmds, Positive: true, Help: "no change this long: slower polling, and the run is marked idle"},
	{Env: "PAM_LIVENESS_INTERVAL", Kind: kindDuration, Default: defaults.Duration(defaults.LivenessInterval), Uses: localWorkerCmds, Positive: true, Help: "pane/session liveness poll"},
	{Env: "PAM_RECONCILE_INTERVAL", Kind: kindDuration, Default: defaults.Duration(defaults.ReconcileInterval), Uses: localWorkerCmds, Positive: true, Help: "host reconciliation loop"},
	{Env: "PAM_ORPHAN_HOLD", Kind: kindDuration, Default: defaults.Duration(defaults.OrphanHold), Uses: localWorkerCmds, Positive: true, Help: "orphan inspection hold"},
	{Env: "PAM_STOP_GRACE", Kind: kindDuration, Default: defaults.Duration(defaults.StopGrace), Uses: localWorkerCmds, Positive: true, Help: "SIGTERM to SIGKILL wait"},
	{Env: "PAM_PASS_ENV", Default: "", Uses: uses(localWorkerCmds, []string{"doctor"}), Help: "extra variables passed from this environment to every CLI, on top of each provider's pass_env (names, comma- or space-separated)"},
	{Env: "PAM_HOLD_OPEN", Kind: kindDuration, Default: defaults.Duration(defaults.HoldOpen), Uses: uses(localWorkerCmds, []string{"exec"}), Positive: true, Help: "session kept after the CLI exits"},
	{Env: "PAM_WORKTREE_RETENTION", Kind: kindDuration, Default: defaults.Duration(defaults.WorktreeRetention), Uses: localWorkerCmds, Positive: true, Help: "a finished run's worktree is removed this long after it ended"},
	{Env: "PAM_RUN_LOG_RETENTION", Kind: kindDuration, Default: defaults.Duration(defaults.RunLogRetention), Uses: localWorkerCmds, Positive: true, Help: "run logs of ended runs older than this are removed"},
	{Env: "PAM_WORKTREE_BUDGET", Kind: kindSize, Default: "20GB", Uses: localWorkerCmds, Positive: true, Help: "past this size of worktrees, finished runs' are removed oldest first"},
	{Env: "PAM_SPAWN_TIMEOUT", Kind: kindDuration, Default: defaults.Duration(defaults.SpawnTimeout), Uses: serveCmds, Positive: true, Help: "spawning this long without started: run fails spawn_failed"},
	{Env: "PAM_TLS_CERT", Default: "", Uses: serveCmds, Help: "TLS certificate file (serve HTTPS natively; needs --tls-key)"},
	{Env: "PAM_TLS_KEY", Default: "", Uses: serveCmds, Help: "TLS private key file (needs --tls-cert)"},
	{Env: "PAM_CA_FILE", Default: "", Uses: uses(clientCmds, workerCmds), Help: "extra CA bundle to trust for --url"},
	{Env: "PAM_ALLOW_INSECURE", Kind: kindBool, Default: "false", Uses: uses(serveCmds, clientCmds, workerCmds), Help: "allow plain http:// to a non-loopback --url (worker, CLI) and a non-loopback bind without TLS (serve): tokens then cross the network in clear"},
	{Env: "PAM_PUBLIC_URL", Default: "", Uses: serveCmds, Help: "the dashboard's address as people reach it, for links and answer URLs in notifications"},
	{Env: "PAM_METRICS_PUBLIC", Kind: kindBool, Default: "false", Uses: serveCmds, Help: "serve /metrics without a token"},
	{Env: "PAM_LOG_LEVEL", Default: "info", Uses: uses(serveCmds, workerCmds, []string{"exec"}), Help: "log level: debug, info, warn or error"},
	{Env: "PAM_LOG_FORMAT", Default: "text", Uses: uses(serveCmds, workerCmds, []string{"exec"}), Help: "log format: text or json"},
}

func settingByEnv(env string) (setting, bool) {
	for _, s := range settings {
		if s.Env == env {
			return s, true
		}
	}
	return setting{}, false
}

// value is a flag.Value of one kind that parses on Set, so a bad flag
// value is a usage error at parse time.
type value struct {
	s    setting
	text string // canonical text of the current value (a secret's file path)
	str  string
	i    int
	b    bool
	d    time.Duration
	n    int64 // kindSize
}

func (v *value) String() string {
	if v == nil {
		return ""
	}
	return v.text
}

// Set parses a flag's text; a secret's flag names the file holding it.
func (v *value) Set(text string) error {
	if v.s.Secret {
		secret, err := readSecretFile(text)
		if err != nil {
			return err
		}
		v.str = secret
		v.text = text
		return nil
	}
	return v.parse(text)
}

// credential sets a secret from the systemd credential of its name
// (the flag's without -file: worker-token, database-url, token) when the
// process runs in a unit that loads credentials (LoadCredential=, which
// pam worker install and pam serve install write): systemd hands it over
// in $CREDENTIALS_DIRECTORY, so the secret is in neither the unit nor the
// environment (docs/operations.md). No such credential leaves it unset.
func (v *value) credential(e Env) error {
	dir, ok := e.lookup("CREDENTIALS_DIRECTORY")
	if !ok || dir == "" {
		return nil
	}
	path := filepath.Join(dir, credentialName(v.s))
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	secret, err := readSecretFile(path)
	if err != nil {
		return fmt.Errorf("credential %s: %v", credentialName(v.s), err)
	}
	v.str = secret
	return nil
}

// credentialName is the name of a secret's systemd credential: its flag
// without -file (PAM_WORKER_TOKEN → worker-token).
func credentialName(s setting) string { return strings.TrimSuffix(s.Flag(), "-file") }

// maxSecretFile bounds a secret file: a token or a connection string.
const maxSecretFile = 64 << 10

// readSecretFile reads a secret from the file a --*-file flag names,
// trimmed of surrounding whitespace. A file others can read or write is
// refused as token files are 0600 (docs/architecture.md#security-model), and an empty one is refused
// rather than silently falling back to another source.
func readSecretFile(path string) (string, error) {
	if path == "" {
		return "", errors.New("empty file name")
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("%s is accessible by group or others (mode %04o); a secret file must be private: chmod 600 %s", path, perm, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return "", err
	}
	if len(b) > maxSecretFile {
		return "", fmt.Errorf("%s is larger than %d bytes", path, maxSecretFile)
	}
	secret := strings.TrimSpace(string(b))
	if secret == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return secret, nil
}

// parse sets the value from text of the setting's kind: a default, an
// environment variable, or a flag of a setting that is not secret.
func (v *value) parse(text string) error {
	switch v.s.Kind {
	case kindString:
		v.str = text
	case kindInt:
		n, err := strconv.Atoi(text)
		if err != nil {
			return errors.New("not an integer")
		}
		if v.s.Positive && n <= 0 {
			return errors.New("must be at least 1")
		}
		v.i = n
	case kindBool:
		b, err := strconv.ParseBool(text)
		if err != nil {
			return errors.New("want true or false")
		}
		v.b = b
	case kindDuration:
		d, err := time.ParseDuration(text)
		if err != nil {
			return errors.New("not a duration (use Go syntax such as 90s, 5m, 24h)")
		}
		if v.s.Positive && d <= 0 {
			return errors.New("must be positive")
		}
		if v.s.NonNegative && d < 0 {
			return errors.New("must not be negative (0 = never)")
		}
		v.d = d
	case kindSize:
		n, err := defaults.ParseSize(text)
		if err != nil {
			return err
		}
		if v.s.Positive && n <= 0 {
			return errors.New("must be positive")
		}
		v.n = n
	}
	v.text = text
	return nil
}

// IsBoolFlag lets --metrics-public stand alone.
func (v *value) IsBoolFlag() bool { return v.s.Kind == kindBool }

// config is the resolved settings of one command invocation.
type config struct {
	vals   map[string]*value // by env name
	envErr map[string]error  // bad environment values, by env name
	fs     *flag.FlagSet
}

// registerOpts adjusts the table for one command: other defaults (pam up
// binds loopback) and variables it deliberately ignores (pam up uses the
// embedded database unless --database-url-file is given).
type registerOpts struct {
	defaults map[string]string
	flagOnly map[string]bool
}

// register adds every setting the command uses to fs, with the default
// taken from the environment e when the variable is set (and not empty).
func register(fs *flag.FlagSet, command string, e Env, o registerOpts) *config {
	c := &config{vals: map[string]*value{}, envErr: map[string]error{}, fs: fs}
	for _, s := range settings {
		if !slices.Contains(s.Uses, command) {
			continue
		}
		def := s.Default
		if d, ok := o.defaults[s.Env]; ok {
			def = d
		}
		if s.Env == "PAM_DATA_DIR" {
			def = datadir.DefaultDataDirIn(e.getenv)
		}
		v := &value{s: s}
		if err := v.parse(def); err != nil && def != "" {
			panic(fmt.Sprintf("default of %s: %v", s.Env, err))
		}
		if env, ok := e.lookup(s.Env); ok && env != "" && !o.flagOnly[s.Env] {
			if err := v.parse(env); err != nil {
				c.envErr[s.Env] = fmt.Errorf("%s=%q: %v", s.Env, env, err)
			}
		} else if s.Secret && !o.flagOnly[s.Env] {
			if err := v.credential(e); err != nil {
				c.envErr[s.Env] = err
			}
		}
		if s.Secret {
			// The flag's default shows in help: a secret's is its file, never
			// the secret the environment gave.
			v.text = ""
		}
		fs.Var(v, s.Flag(), s.Help)
		c.vals[s.Env] = v
	}
	return c
}

// check reports a bad environment value whose flag was not given: the
// flag overrides the variable, so it only matters when it is used.
func (c *config) check() error {
	set := map[string]bool{}
	c.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var names []string
	for env := range c.envErr {
		if s, _ := settingByEnv(env); !set[s.Flag()] {
			names = append(names, env)
		}
	}
	if len(names) == 0 {
		return nil
	}
	slices.Sort(names)
	return c.envErr[names[0]]
}

func (c *config) get(env string) *value {
	v, ok := c.vals[env]
	if !ok {
		panic("setting " + env + " is not registered on this command")
	}
	return v
}

func (c *config) str(env string) string        { return c.get(env).str }
func (c *config) int(env string) int           { return c.get(env).i }
func (c *config) bool(env string) bool         { return c.get(env).b }
func (c *config) dur(env string) time.Duration { return c.get(env).d }
func (c *config) size(env string) int64        { return c.get(env).n }

// newLogger builds the slog logger of PAM_LOG_LEVEL and PAM_LOG_FORMAT,
// writing to w (stderr).
func newLogger(c *config, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	switch strings.ToLower(c.str("PAM_LOG_LEVEL")) {
	case "debug":
		level = slog.LevelDebug
	case "info", "":
		level = slog.LevelInfo
	case "warn", "warning":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		return nil, usagef("PAM_LOG_LEVEL %q: want debug, info, warn or error", c.str("PAM_LOG_LEVEL"))
	}
	o := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(c.str("PAM_LOG_FORMAT")) {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, o)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, o)), nil
	default:
		return nil, usagef("PAM_LOG_FORMAT %q: want text or json", c.str("PAM_LOG_FORMAT"))
	}
}

// token resolves the operator token: PAM_TOKEN (or --token-file) wins over the
// data dir's token file.
func (c *config) token() (string, error) {
	if t := strings.TrimSpace(c.str("PAM_TOKEN")); t != "" {
		return t, nil
	}
	dir := c.str("PAM_DATA_DIR")
	t, err := datadir.ReadToken(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("no operator token: set PAM_TOKEN (or --token-file FILE), or point PAM_DATA_DIR (or --data-dir) at the data dir holding the token file (%s not found; pam serve writes it when it is the active server)", datadir.TokenPath(dir))
	}
	if err != nil {
		return "", fmt.Errorf("operator token: %w (or set PAM_TOKEN)", err)
	}
	return t, nil
}

// checkURL validates PAM_URL before any request, so a typo is a usage
// error rather than a confusing transport failure, and refuses plain
// http:// to another machine unless allowInsecure (PAM_ALLOW_INSECURE):
// every request carries a token, which would cross the network in clear.
func checkURL(raw string, allowInsecure bool) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef("PAM_URL %q: want http://host:port or https://host:port", raw)
	}
	if u.Scheme == "http" && !allowInsecure && !serve.IsLoopback(u.Hostname()) {
		return usagef("PAM_URL %s is plain http:// to another machine: every token would cross the network in clear; use https:// (PAM_CA_FILE for a private CA), or set PAM_ALLOW_INSECURE=1 on a network you trust", raw)
	}
	return nil
}
