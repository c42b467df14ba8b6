package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/creack/pty"

	"pam/internal/apiclient"
	"pam/internal/datadir"
	"pam/internal/embeddb"
	"pam/internal/holder"
	"pam/internal/provider"
	"pam/internal/wire"
)

// check is one line of `pam doctor`: what was checked, whether it is fine,
// and how to fix it when not.
type check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
	Fix    string `json:"fix"`
}

func pass(name, format string, args ...any) check {
	return check{Name: name, OK: true, Detail: fmt.Sprintf(format, args...)}
}

func fail(name, fix, format string, args ...any) check {
	return check{Name: name, Detail: fmt.Sprintf(format, args...), Fix: fix}
}

// healthTimeout bounds the reachability check.
const healthTimeout = 3 * time.Second

var doctorCmd = &command{
	name:    "doctor",
	summary: "check what this host needs (data dir, token, executor and tmux, git, database, orchestrator, providers and their CLIs' one-time set-up) and say how to fix each failure",
	group:   "doctor",
	setup: func(fs *flag.FlagSet) func(*invocation) error {
		asJSON := fs.Bool("json", false, "print the checks as JSON")
		return func(x *invocation) error {
			dir := x.cfg.str("PAM_DATA_DIR")
			provCheck, providers, cat := checkProviders(x)
			checks := []check{
				checkDataDir(dir),
				checkToken(dir, x.cfg.str("PAM_TOKEN")),
			}
			checks = append(checks, checkExecutor(x.ctx, x.cfg.str("PAM_EXECUTOR"), dir, x.env.getenv("PATH"))...)
			checks = append(checks,
				checkGit(x.ctx),
				checkDatabase(dir, x.cfg.str("PAM_DATABASE_URL")),
				checkOrchestrator(x.ctx, x.cfg.str("PAM_URL"), x.cfg.str("PAM_CA_FILE")),
				provCheck,
			)
			checks = append(checks, checkAgentSetups(x, cat)...)
			failed := 0
			for _, c := range checks {
				if !c.OK {
					failed++
				}
			}
			if *asJSON {
				if err := printJSON(x.stdout, map[string]any{"ok": failed == 0, "checks": checks, "providers": providers}); err != nil {
					return err
				}
			} else {
				printChecks(x.stdout, checks)
				printProviders(x.stdout, providers)
			}
			if failed > 0 {
				fmt.Fprintf(x.stderr, "pam doctor: %d of %d checks failed\n", failed, len(checks))
				return errSilent
			}
			return nil
		}
	},
}

func printChecks(w io.Writer, checks []check) {
	tw := table(w)
	for _, c := range checks {
		status := "ok"
		if !c.OK {
			status = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", status, c.Name, c.Detail)
		if !c.OK && c.Fix != "" {
			fmt.Fprintf(tw, "\t\tfix: %s\n", c.Fix)
		}
	}
	tw.Flush()
}

func checkDataDir(dir string) check {
	const name = "data dir"
	st, err := os.Stat(dir)
	switch {
	case err == nil && !st.IsDir():
		return fail(name, "remove it, or set PAM_DATA_DIR (--data-dir) to a directory", "%s is not a directory", dir)
	case err == nil:
		perm := st.Mode().Perm()
		if perm&0o066 != 0 {
			return fail(name, fmt.Sprintf("chmod 700 %s", dir), "%s has mode %04o: readable or writable by other users", dir, perm)
		}
		return pass(name, "%s (mode %04o)", dir, perm)
	case errors.Is(err, fs.ErrNotExist):
		parent := filepath.Dir(dir)
		for {
			if _, err := os.Stat(parent); err == nil || parent == filepath.Dir(parent) {
				break
			}
			parent = filepath.Dir(parent)
		}
		if syscall.Access(parent, 0x2|0x1) != nil { // W_OK|X_OK
			return fail(name, fmt.Sprintf("create it as a user who can (mkdir -p %s && chmod 700 %s, owned by the pam user), or set PAM_DATA_DIR", dir, dir),
				"%s does not exist and cannot be created: %s is not writable", dir, parent)
		}
		return pass(name, "%s does not exist yet; pam serve or pam worker will create it", dir)
	default:
		return fail(name, "fix the permissions of its parent folders, or set PAM_DATA_DIR", "%v", err)
	}
}

func checkToken(dir, envToken string) check {
	const name = "token"
	path := datadir.TokenPath(dir)
	if envToken != "" {
		if !datadir.ValidToken(strings.TrimSpace(envToken)) {
			return fail(name, fmt.Sprintf("set PAM_TOKEN to the content of %s on the orchestrator", path), "PAM_TOKEN is not 32 lowercase hex characters")
		}
		return pass(name, "PAM_TOKEN is set (it wins over %s)", path)
	}
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fail(name, "start pam serve (or pam up) once to write it (a standby writes it when it takes over), or set PAM_TOKEN (or point PAM_DATA_DIR at the orchestrator's data dir)", "%s not found", path)
	}
	if err != nil {
		return fail(name, "fix the data dir's permissions, or set PAM_TOKEN", "%v", err)
	}
	if perm := st.Mode().Perm(); perm != 0o600 {
		return fail(name, fmt.Sprintf("chmod 600 %s", path), "%s has mode %04o, want 0600", path, perm)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fail(name, "run pam as the user that owns the data dir, or set PAM_TOKEN", "%v", err)
	}
	if !datadir.ValidToken(strings.TrimSpace(string(b))) {
		return fail(name, fmt.Sprintf("remove %s; pam serve writes its database's token there on its next start", path), "%s does not hold 32 lowercase hex characters", path)
	}
	return pass(name, "%s (mode 0600)", path)
}

var tmuxVersionRe = regexp.MustCompile(`(\d+)\.(\d+)`)

// checkTmux finds tmux on searchPath (the PATH the worker would have; ""
// for this process's) and checks its version.
func checkTmux(ctx context.Context, searchPath string) check {
	const name = "tmux"
	const fix = "install tmux 3.0 or later (Debian: apt-get install -y tmux; macOS: brew install tmux), " +
		"or run the worker with the built-in PTY holder: PAM_EXECUTOR=pty"
	bin := ""
	for _, dir := range filepath.SplitList(searchPath) {
		if cand := filepath.Join(dir, "tmux"); filepath.IsAbs(dir) && provider.CheckExecutable(cand) == nil {
			bin = cand
			break
		}
	}
	if searchPath == "" {
		bin, _ = exec.LookPath("tmux")
	}
	if bin == "" {
		return fail(name, fix, "tmux not found on PATH")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "-V").Output()
	if err != nil {
		return fail(name, fix, "%s -V: %v", bin, err)
	}
	v := strings.TrimSpace(string(out))
	m := tmuxVersionRe.FindStringSubmatch(v)
	if m == nil {
		return pass(name, "%s (%s; version not numbered, assumed recent)", v, bin)
	}
	major, _ := strconv.Atoi(m[1])
	if major < 3 {
		return fail(name, fix, "%s is too old, pam needs 3.0 or later", v)
	}
	return pass(name, "%s (%s)", v, bin)
}

var gitVersionRe = regexp.MustCompile(`(\d+)\.(\d+)`)

// checkGit finds git, which a worker needs for the runs of projects with
// a repo (docs/architecture.md#workspaces): 2.31 or later.
func checkGit(ctx context.Context) check {
	const name = "git"
	const fix = "install git 2.31 or later (Debian: apt-get install -y git; macOS: xcode-select --install or brew install git); only runs of projects with a repo need it"
	bin, err := exec.LookPath("git")
	if err != nil {
		return fail(name, fix, "git not found on PATH")
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return fail(name, fix, "%s --version: %v", bin, err)
	}
	v := strings.TrimSpace(string(out))
	if m := gitVersionRe.FindStringSubmatch(v); m != nil {
		major, _ := strconv.Atoi(m[1])
		minor, _ := strconv.Atoi(m[2])
		if major < 2 || (major == 2 && minor < 31) {
			return fail(name, fix, "%s is too old, workspaces need 2.31 or later", v)
		}
	}
	return pass(name, "%s (%s)", v, bin)
}

var dsnPasswordRe = regexp.MustCompile(`(password=)\S+`)

// redactDSN hides the password of a connection string.
func redactDSN(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Scheme != "" {
		return u.Redacted()
	}
	return dsnPasswordRe.ReplaceAllString(dsn, "${1}xxxxx")
}

func checkDatabase(dir, dsn string) check {
	const name = "database"
	if dsn != "" {
		return pass(name, "PAM_DATABASE_URL is set: pam serve will use %s (not connected to by doctor)", redactDSN(dsn))
	}
	version := ""
	if b, err := os.ReadFile(filepath.Join(dir, "postgres", "PG_VERSION")); err == nil {
		version = strings.TrimSpace(string(b))
	}
	bin, err := embeddb.FindBinDir(version)
	if err != nil {
		detail, fix, found := strings.Cut(err.Error(), "; fix: ")
		if !found {
			fix = "install PostgreSQL (Debian: apt-get install -y postgresql), or set PAM_DATABASE_URL"
		}
		return fail(name, fix, "embedded database: %s", detail)
	}
	if os.Geteuid() == 0 {
		if _, err := user.Lookup("postgres"); err != nil {
			return fail(name, "install PostgreSQL from the distribution's packages (it creates the postgres user), or set PAM_DATABASE_URL",
				"embedded database: running as root needs the postgres system user, which does not exist")
		}
	}
	what := "binaries"
	if version != "" {
		what = "PostgreSQL " + version + " binaries for the existing cluster"
	}
	return pass(name, "embedded database: %s in %s", what, bin)
}

func checkOrchestrator(ctx context.Context, base, caFile string) check {
	const name = "orchestrator"
	const fix = "start pam serve (or pam up), or set PAM_URL (--url) to where it runs"
	c, err := apiclient.New(base, "", caFile)
	if err != nil {
		return fail(name, "set PAM_URL (--url) to http://host:port or https://host:port, and PAM_CA_FILE to a readable PEM bundle", "%v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	h, err := c.Health(ctx)
	if we, ok := wire.AsError(err); ok && we.Status == http.StatusServiceUnavailable {
		return fail(name, "check the database pam serve uses (see its log and <data>/serve.log)", "%s answers but its database is unreachable (503)", base)
	}
	if err != nil {
		return fail(name, fix, "cannot reach %s: %s", base, describe(err))
	}
	return pass(name, "%s answers: status %s", base, h.Status)
}

// doctorProvider is one provider of this host's catalog as `pam doctor`
// shows it: where its binary is, and which of the variables its CLI
// would take from this environment are set. Names only: a credential's
// value is never printed.
type doctorProvider struct {
	Name string `json:"name"`
	// Binary is the catalog's binary: a bare name or an absolute path.
	Binary string `json:"binary"`
	// Resolved is the absolute path a worker would run; nil when the
	// binary is missing (Error says why).
	Resolved *string        `json:"resolved"`
	Error    string         `json:"error,omitempty"`
	PassEnv  []doctorEnvVar `json:"pass_env"`
}

// doctorEnvVar is one pass_env (or PAM_PASS_ENV) name and whether this
// environment sets it.
type doctorEnvVar struct {
	Name string `json:"name"`
	Set  bool   `json:"set"`
}

// checkProviders loads the catalog as a worker on this host would
// (PAM_CONFIG_DIR, PAM_PASS_ENV, PATH) and lists every provider. A
// missing binary is not a failure (a host need not have every CLI); a
// catalog or a PAM_PASS_ENV the worker would refuse is.
func checkProviders(x *invocation) (check, []doctorProvider, *provider.Catalog) {
	const name = "providers"
	configDir := x.cfg.str("PAM_CONFIG_DIR")
	if configDir == "" {
		configDir = datadir.DefaultConfigDirIn(x.env.getenv)
	}
	cat, err := provider.Load(configDir)
	if err != nil {
		return fail(name, "fix the file, or move it aside to use the built-in providers", "%v", err), []doctorProvider{}, nil
	}
	cat.SearchPath = x.env.getenv("PATH")
	// A bad PAM_PASS_ENV fails the check (the worker would not start), but
	// the providers are still listed, with their own pass_env.
	extra, passErr := provider.ParsePassEnv(x.cfg.str("PAM_PASS_ENV"))
	var found []string
	out := []doctorProvider{}
	for _, n := range cat.Names() {
		p, _ := cat.Get(n)
		dp := doctorProvider{Name: n, Binary: p.Binary, PassEnv: []doctorEnvVar{}}
		if path, err := cat.Resolve(n); err != nil {
			dp.Error = err.Error()
		} else {
			dp.Resolved = &path
			found = append(found, n)
		}
		for _, v := range cat.PassEnvNames(n, extra) {
			_, set := x.env.lookup(v)
			dp.PassEnv = append(dp.PassEnv, doctorEnvVar{Name: v, Set: set})
		}
		out = append(out, dp)
	}
	from := "built-in entries only (no " + filepath.Join(configDir, provider.FileName) + ")"
	if cat.File != "" {
		from = cat.File + " over the built-in entries"
	}
	if passErr != nil {
		return fail(name, "set PAM_PASS_ENV (--pass-env) to variable names separated by commas or spaces, none of them PAM_*", "%v", passErr), out, cat
	}
	return pass(name, "%d of %d found (%s); %s", len(found), len(out), strings.Join(found, ", "), from), out, cat
}

// printProviders is the providers table of `pam doctor`.
func printProviders(w io.Writer, ps []doctorProvider) {
	if len(ps) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := table(w)
	fmt.Fprintln(tw, "PROVIDER\tBINARY\tPASS_ENV")
	for _, p := range ps {
		bin := "missing: " + p.Binary
		if p.Resolved != nil {
			bin = *p.Resolved
		}
		vars := make([]string, len(p.PassEnv))
		for i, v := range p.PassEnv {
			state := "unset"
			if v.Set {
				state = "set"
			}
			vars[i] = v.Name + " (" + state + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Name, bin, dash(strings.Join(vars, ", ")))
	}
	tw.Flush()
}

// checkExecutor reports the executor the worker would use
// (PAM_EXECUTOR) and its health: for tmux, the tmux check; for pty,
// that a PTY opens here and what the holders folder holds.
func checkExecutor(ctx context.Context, executor, dataDir, searchPath string) []check {
	const name = "executor"
	switch executor {
	case "tmux", "":
		return []check{pass(name, "tmux (PAM_EXECUTOR)"), checkTmux(ctx, searchPath)}
	case "pty":
		return []check{checkPTY(filepath.Join(dataDir, "worker", "holders"))}
	}
	return []check{fail(name, "set PAM_EXECUTOR to tmux or pty", "PAM_EXECUTOR %q is not an executor", executor)}
}

// checkPTY checks the built-in PTY holder: a pseudoterminal opens, and
// the holders folder, when it exists, is private; it counts the live
// holders (docs/architecture.md#the-pty-holder).
func checkPTY(dir string) check {
	const name = "executor"
	p, t, err := pty.Open()
	if err != nil {
		return fail(name, "the pty executor needs /dev/ptmx and a mounted /dev/pts; or install tmux and use PAM_EXECUTOR=tmux",
			"pty: cannot open a pseudoterminal: %v", err)
	}
	p.Close()
	t.Close()
	if st, err := os.Stat(dir); err == nil {
		if perm := st.Mode().Perm(); perm != 0o700 {
			return fail(name, fmt.Sprintf("chmod 700 %s", dir), "pty: %s has mode %04o, want 0700", dir, perm)
		}
	}
	live, err := holder.List(dir)
	if err != nil {
		return fail(name, "run pam as the user that owns the data dir", "pty: %v", err)
	}
	return pass(name, "pty (built-in PTY holder): a PTY opens; %d live holder(s) in %s", len(live), dir)
}
