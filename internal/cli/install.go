package cli

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/term"

	"pam/internal/datadir"
)

// pam worker install and pam serve install write a systemd unit that runs
// the role with the settings given to the install command, and the
// role's secret in a credential file (0600) that the unit loads with
// LoadCredential=: systemd hands it to the process in
// $CREDENTIALS_DIRECTORY, where config.go's credential() reads it. The
// secret is never in the unit, which any local user may read, nor on a
// command line. docs/operations.md is the guide.

var workerInstallCmd = &command{
	name:    "install",
	summary: "write a systemd unit that runs this host's worker, its token in a credential file (--print: only show it)",
	group:   "worker",
	setup:   func(fs *flag.FlagSet) func(*invocation) error { return installSetup(fs, workerRole) },
}

var serveInstallCmd = &command{
	name:    "install",
	summary: "write a systemd unit that runs pam serve, the database URL in a credential file (--print: only show it)",
	group:   "serve",
	setup:   func(fs *flag.FlagSet) func(*invocation) error { return installSetup(fs, serveRole) },
}

func init() {
	workerCmd.subs = append(workerCmd.subs, workerInstallCmd)
	serveCmd.subs = append(serveCmd.subs, serveInstallCmd)
}

// role is what differs between the two units.
type role struct {
	name        string // worker, serve
	description string
	secretEnv   string // the secret the credential file holds
	// secretRequired: the worker cannot start without its token; serve
	// without a database URL uses the embedded database.
	secretRequired bool
	// stateDir is the data dir's name under /var/lib for a system unit
	// (and under the user's data home for a user unit) when none is given.
	// The worker's is its own, so that a worker next to a serve never has
	// the operator token in its data dir.
	stateDir string
}

var (
	workerRole = role{name: "worker", description: "pam worker: runs agents on this host", secretEnv: "PAM_WORKER_TOKEN", secretRequired: true, stateDir: "pam-worker"}
	serveRole  = role{name: "serve", description: "pam serve: the orchestrator", secretEnv: "PAM_DATABASE_URL", stateDir: "pam"}
)

// unitSpec is everything a unit is rendered from.
type unitSpec struct {
	role        role
	system      bool   // a system unit (else a user unit)
	binary      string // ExecStart's pam
	user        string // User= (system units only; empty = root)
	dataDir     string
	stateDir    bool // let systemd create /var/lib/<stateDir> for user
	env         [][2]string
	envFile     string // EnvironmentFile=, empty = none
	credName    string // empty = no credential
	credPath    string
	description string
}

// installFlags are the flags of pam worker|serve install.
type installFlags struct {
	printOnly, userUnit                   bool
	unitName, user, binary, root, envFile string
}

// installSetup is pam worker|serve install: it writes the role's systemd
// unit (and its credential beside it, never in the unit), or prints it.
func installSetup(fs *flag.FlagSet, r role) func(*invocation) error {
	printOnly := fs.Bool("print", false, "print the unit and where it would go; write nothing")
	unitName := fs.String("unit", "pam-"+r.name, "the unit's name (without .service)")
	user := fs.String("user", "", "the account the service runs as (system units only; default root). Agents run as this user: give the worker a dedicated one")
	userUnit := fs.Bool("user-unit", false, "write a user unit (~/.config/systemd/user) even as root")
	binary := fs.String("binary", "", "the pam binary the unit runs (default: this one)")
	root := fs.String("root", "", "write every file under this folder instead of / (an image being built, a test)")
	envFile := fs.String("environment-file", "", "a file of VAR=value lines the unit loads (EnvironmentFile=): an agent's API key, a PATH; keep it 0600, it stays where it is")
	return func(x *invocation) error {
		return install(x, r, installFlags{printOnly: *printOnly, userUnit: *userUnit, unitName: *unitName,
			user: *user, binary: *binary, root: *root, envFile: *envFile})
	}
}

// install checks what it can before writing (a unit that would fail at
// every start is refused now), renders the unit, and writes or prints it.
func install(x *invocation, r role, f installFlags) error {
	if !validUnitName(f.unitName) {
		return usagef("--unit %q: want letters, digits, '-', '_' or '.'", f.unitName)
	}
	if runtime.GOOS != "linux" && !f.printOnly {
		return fmt.Errorf("pam %s install writes a systemd unit, and this is %s: run pam %s under the system's own service manager (--print shows the settings a unit would have)", r.name, runtime.GOOS, r.name)
	}
	system := os.Geteuid() == 0 && !f.userUnit
	if f.user != "" && !system {
		return usagef("--user names the account of a system unit: run as root, without --user-unit")
	}
	if f.user != "" && !validAccount(f.user) {
		return usagef("--user %q is not a valid account name", f.user)
	}
	if r.name == "worker" {
		// The unit would only fail at every start: say so now.
		if err := checkURL(x.cfg.str("PAM_URL"), x.cfg.bool("PAM_ALLOW_INSECURE")); err != nil {
			return err
		}
	}
	s, err := installSpec(x, r, f, system)
	if err != nil {
		return err
	}
	unitDir, credDir := "/etc/systemd/system", "/etc/credstore"
	if !system {
		unitDir = filepath.Join(userConfigHome(x.env), "systemd", "user")
		credDir = filepath.Join(userConfigHome(x.env), "pam", "credstore")
	}
	secret := strings.TrimSpace(x.cfg.str(r.secretEnv))
	st, _ := settingByEnv(r.secretEnv)
	if secret == "" && r.secretRequired && !f.printOnly {
		if secret, err = promptSecret(x, st); err != nil {
			return err
		}
	}
	if secret != "" || r.secretRequired {
		s.credName = credentialName(st)
		s.credPath = filepath.Join(credDir, f.unitName+"."+s.credName)
	}
	unit := renderUnit(s)
	unitPath := filepath.Join(unitDir, f.unitName+".service")
	if f.printOnly {
		fmt.Fprintf(x.stdout, "# %s\n%s", unitPath, unit)
		if s.credName != "" {
			fmt.Fprintf(x.stdout, "\n# The %s goes into %s (mode 0600), never into the unit.\n", s.credName, s.credPath)
		}
		return nil
	}
	if err := writeUnit(x, f.root, s, secret, unitPath, unit); err != nil {
		return err
	}
	printStartHelp(x, system, f.unitName)
	return nil
}

// installSpec is the unit's spec but its credential: the absolute binary
// and environment file, the data dir (a system unit's under /var/lib,
// created by systemd when it is not root's serve), and the settings given.
func installSpec(x *invocation, r role, f installFlags, system bool) (unitSpec, error) {
	bin := f.binary
	if bin == "" {
		self, err := os.Executable()
		if err != nil {
			return unitSpec{}, fmt.Errorf("locate the pam binary: %w (give --binary)", err)
		}
		bin = self
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		return unitSpec{}, err
	}
	s := unitSpec{role: r, system: system, binary: bin, user: f.user, description: r.description}
	if f.envFile != "" {
		if s.envFile, err = filepath.Abs(f.envFile); err != nil {
			return unitSpec{}, err
		}
	}
	given := givenSettings(x)
	s.dataDir = given["PAM_DATA_DIR"]
	if s.dataDir == "" {
		if system {
			s.dataDir = "/var/lib/" + r.stateDir
			// systemd creates it, owned by the unit's user, at every
			// start. A root serve's data dir is left to serve: its
			// embedded database needs it 0711, which serve sets.
			s.stateDir = r.name == "worker" || f.user != ""
		} else {
			s.dataDir = filepath.Join(userDataHome(x.env), r.stateDir)
		}
	}
	for _, st := range settings {
		if v, ok := given[st.Env]; ok && st.Env != "PAM_DATA_DIR" {
			s.env = append(s.env, [2]string{st.Env, v})
		}
	}
	if r.name == "worker" {
		s.description += " (host " + hostNameOf(x) + ")"
	}
	return s, nil
}

// writeUnit writes the credential (0600) first, then the unit that loads
// it, all under root.
func writeUnit(x *invocation, root string, s unitSpec, secret, unitPath, unit string) error {
	if s.credName != "" {
		if err := writePrivate(filepath.Join(root, s.credPath), secret); err != nil {
			return fmt.Errorf("credential file: %w", err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, filepath.Dir(unitPath)), 0o755); err != nil {
		return err
	}
	if err := datadir.WriteFileAtomic(filepath.Join(root, unitPath), []byte(unit), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(x.stdout, "wrote %s\n", unitPath)
	if s.credName != "" {
		fmt.Fprintf(x.stdout, "wrote %s (mode 0600): the unit loads it as the credential %s\n", s.credPath, s.credName)
	}
	return nil
}

// printStartHelp tells how to start the unit, read its log and, for a
// user unit, keep it running without a login.
func printStartHelp(x *invocation, system bool, unitName string) {
	ctl := "systemctl"
	if !system {
		ctl = "systemctl --user"
	}
	fmt.Fprintf(x.stdout, "\nStart it now and at every boot:\n\n  %s daemon-reload\n  %s enable --now %s\n", ctl, ctl, unitName)
	fmt.Fprintf(x.stdout, "\nIts log: journalctl %s-u %s -f\n", map[bool]string{true: "", false: "--user "}[system], unitName)
	if !system {
		fmt.Fprintf(x.stdout, "\nA user unit stops when you log out, unless your user manager lingers; to keep it\n(and, for a worker, every agent) running without a login, once:\n\n  loginctl enable-linger %s\n", currentUser(x.env))
	}
}

// givenSettings is every setting of the command given by a flag or the
// environment, as text, secrets left out: what the unit sets.
func givenSettings(x *invocation) map[string]string {
	given := map[string]string{}
	for env, v := range x.cfg.vals {
		if v.s.Secret {
			continue
		}
		if e, ok := x.env.lookup(env); ok && e != "" {
			given[env] = v.text
		}
	}
	x.cfg.fs.Visit(func(f *flag.Flag) {
		if v, ok := f.Value.(*value); ok && !v.s.Secret {
			given[v.s.Env] = v.text
		}
	})
	return given
}

// hostNameOf is the host name a worker registers as.
func hostNameOf(x *invocation) string {
	if n := x.cfg.str("PAM_HOST_NAME"); n != "" {
		return n
	}
	n, _ := os.Hostname()
	return n
}

// promptSecret reads the secret from standard input, without echo on a
// terminal: pasting it there keeps it out of the shell's history and the
// process list, which a flag or a variable on the command line would not.
func promptSecret(x *invocation, st setting) (string, error) {
	missing := fmt.Errorf("no %s: give --%s FILE (mode 0600) or type it on standard input (pam host add printed it)", strings.ReplaceAll(credentialName(st), "-", " "), st.Flag())
	if f, ok := x.env.Stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprintf(x.stderr, "%s (not shown): ", strings.ToUpper(credentialName(st)[:1])+strings.ReplaceAll(credentialName(st)[1:], "-", " "))
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(x.stderr)
		if err != nil {
			return "", err
		}
		if s := strings.TrimSpace(string(b)); s != "" {
			return s, nil
		}
		return "", missing
	}
	line, err := bufio.NewReader(io.LimitReader(x.env.Stdin, maxSecretFile)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	if s := strings.TrimSpace(line); s != "" {
		return s, nil
	}
	return "", missing
}

// writePrivate writes a secret file, mode 0600 in a folder of mode 0700,
// replacing any earlier one.
func writePrivate(path, secret string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return datadir.WriteFileAtomic(path, []byte(secret+"\n"), 0o600)
}

// renderUnit is the unit file's text.
//
// The worker's unit keeps agents alive: its tmux server is a child the
// worker starts inside the unit's cgroup, and KillMode=process makes
// systemd stop (or restart) only the worker's own process, leaving the
// tmux server and every session running; the new worker adopts them. A
// unit is no part of a login session, so logging out never touches it
// (KillUserProcesses= only kills session scopes); a user unit lives as
// long as the user's manager, which enable-linger keeps after logout.
func renderUnit(s unitSpec) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("# Written by `pam %s install`; run it again to change it (docs/operations.md).", s.role.name)
	w("[Unit]")
	w("Description=%s", unitEscape(s.description))
	if s.system {
		w("Wants=network-online.target")
		w("After=network-online.target")
	}
	w("")
	w("[Service]")
	w("Type=exec")
	w("ExecStart=%s %s", unitEscape(s.binary), s.role.name)
	if s.system && s.user != "" {
		w("User=%s", s.user)
	}
	w("Environment=%s", unitEscape(quoteEnv("PAM_DATA_DIR", s.dataDir)))
	if s.stateDir {
		w("StateDirectory=%s", filepath.Base(s.dataDir))
		w("StateDirectoryMode=0700")
	}
	for _, kv := range s.env {
		w("Environment=%s", unitEscape(quoteEnv(kv[0], kv[1])))
	}
	if s.envFile != "" {
		w("EnvironmentFile=%s", unitEscape(s.envFile))
	}
	if s.credName != "" {
		w("# The secret: systemd hands the file to pam as $CREDENTIALS_DIRECTORY/%s.", s.credName)
		w("LoadCredential=%s:%s", s.credName, unitEscape(s.credPath))
	}
	if s.role.name == "worker" {
		w("# Stop and restart only the worker: the tmux server and the agents'")
		w("# sessions stay (pam worker leaves them running on SIGTERM and adopts")
		w("# them when it starts again). SIGHUP reconciles: systemctl kill -s HUP.")
		w("KillMode=process")
	}
	w("Restart=on-failure")
	w("RestartSec=5s")
	w("")
	w("[Install]")
	if s.system {
		w("WantedBy=multi-user.target")
	} else {
		w("WantedBy=default.target")
	}
	return b.String()
}

// quoteEnv is one Environment= assignment, double-quoted when the value
// holds a space, a quote or a backslash.
func quoteEnv(k, v string) string {
	if !strings.ContainsAny(v, " \t\"'\\") {
		return k + "=" + v
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(k+"="+v) + `"`
}

// unitEscape doubles % (systemd's specifier character) so that a value is
// taken literally.
func unitEscape(s string) string { return strings.ReplaceAll(s, "%", "%%") }

func validUnitName(s string) bool {
	return s != "" && len(s) <= 200 && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.", r))
	}) < 0 && !strings.HasPrefix(s, ".")
}

// validAccount accepts the names useradd makes: no path, no space, no
// specifier, at most 32 characters.
func validAccount(s string) bool {
	return validUnitName(s) && len(s) <= 32 && !strings.HasPrefix(s, "-")
}

// userConfigHome is $XDG_CONFIG_HOME, else ~/.config.
func userConfigHome(e Env) string {
	if x := e.getenv("XDG_CONFIG_HOME"); x != "" {
		return x
	}
	return filepath.Join(homeOf(e), ".config")
}

// userDataHome is $XDG_DATA_HOME, else ~/.local/share (the data dir's
// parent of a user unit, whoever writes it).
func userDataHome(e Env) string {
	if x := e.getenv("XDG_DATA_HOME"); x != "" {
		return x
	}
	return filepath.Join(homeOf(e), ".local", "share")
}

func homeOf(e Env) string {
	if h := e.getenv("HOME"); h != "" {
		return h
	}
	h, _ := os.UserHomeDir()
	return h
}

func currentUser(e Env) string {
	if u := e.getenv("USER"); u != "" {
		return u
	}
	return "$USER"
}
