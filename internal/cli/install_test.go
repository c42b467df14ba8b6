package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const installToken = "feedfacefeedfacefeedfacefeedfacefeedfacefeedfacefeedfacefeedface"

// systemdAnalyze returns systemd-analyze, skipping the test where it is
// missing, except under CI, where scripts/deps.sh --test installs it.
func systemdAnalyze(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("systemd-analyze is missing: scripts/deps.sh --test installs the systemd package")
		}
		t.Skip("systemd-analyze is missing (Debian package systemd)")
	}
	return p
}

// verifyUnit runs systemd-analyze verify on a unit file (with --user for
// a user unit) and fails on any complaint: verify exits 0 on an unknown
// key or a bad value, only saying so.
func verifyUnit(t *testing.T, analyze, path string, user bool) {
	t.Helper()
	args := []string{"verify", path}
	if user {
		args = []string{"--user", "verify", path}
	}
	cmd := exec.Command(analyze, args...)
	run := t.TempDir()
	os.Chmod(run, 0o700)
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+run, "SYSTEMD_LOG_LEVEL=notice")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil || strings.TrimSpace(out.String()) != "" {
		b, _ := os.ReadFile(path)
		t.Errorf("systemd-analyze %s: %v\n%s\nunit:\n%s", strings.Join(args, " "), err, out.String(), b)
	}
}

func readMode(t *testing.T, path string) (string, os.FileMode) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), st.Mode().Perm()
}

// TestInstallWorkerUnit: pam worker install writes a unit systemd
// accepts, with the settings it was given, KillMode=process so that
// stopping the worker leaves the tmux server and its sessions, and the
// token only in a 0600 credential file the unit loads (typed on standard
// input: never on a command line).
func TestInstallWorkerUnit(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("a system unit is written as root (CI runs as root)")
	}
	analyze := systemdAnalyze(t)
	e := isolate(t)
	root := t.TempDir()
	e.stdin = strings.NewReader(installToken + "\n")
	e.setenv("PAM_URL", "https://pam.example:7898")
	r := e.pam("worker", "install", "--root", root, "--host-name", "gpu-1", "--user", "pam", "--max-runs", "4", "--environment-file", "/etc/pam/agent keys.env")
	if r.code != 0 {
		t.Fatal(r)
	}
	unit, mode := readMode(t, filepath.Join(root, "etc/systemd/system/pam-worker.service"))
	if mode != 0o644 {
		t.Errorf("unit mode %o", mode)
	}
	cred, cmode := readMode(t, filepath.Join(root, "etc/credstore/pam-worker.worker-token"))
	if cmode != 0o600 || strings.TrimSpace(cred) != installToken {
		t.Errorf("credential file: mode %o, %q", cmode, cred)
	}
	self, _ := os.Executable()
	for _, want := range []string{
		"ExecStart=" + self + " worker\n", "User=pam\n", "KillMode=process\n",
		"LoadCredential=worker-token:/etc/credstore/pam-worker.worker-token\n",
		"Environment=PAM_URL=https://pam.example:7898\n", "Environment=PAM_HOST_NAME=gpu-1\n", "Environment=PAM_MAX_RUNS=4\n",
		"Environment=PAM_DATA_DIR=" + e.dir + "\n", "WantedBy=multi-user.target\n", "EnvironmentFile=/etc/pam/agent keys.env\n",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("unit lacks %q:\n%s", want, unit)
		}
	}
	if strings.Contains(unit, installToken) || strings.Contains(r.stdout, installToken) || strings.Contains(r.stderr, installToken) {
		t.Errorf("the token is in the unit or the output:\n%s\n%v", unit, r)
	}
	verifyUnit(t, analyze, filepath.Join(root, "etc/systemd/system/pam-worker.service"), false)

	// Without a data dir, a system worker gets one of its own that
	// systemd creates for its user.
	e2 := isolate(t)
	e2.setenv("PAM_DATA_DIR", "")
	e2.stdin = strings.NewReader(installToken + "\n")
	root2 := t.TempDir()
	if r := e2.pam("worker", "install", "--root", root2, "--user", "pam"); r.code != 0 {
		t.Fatal(r)
	}
	unit2, _ := readMode(t, filepath.Join(root2, "etc/systemd/system/pam-worker.service"))
	if !strings.Contains(unit2, "Environment=PAM_DATA_DIR=/var/lib/pam-worker\nStateDirectory=pam-worker\nStateDirectoryMode=0700\n") {
		t.Errorf("default data dir:\n%s", unit2)
	}
	verifyUnit(t, analyze, filepath.Join(root2, "etc/systemd/system/pam-worker.service"), false)

	// No token anywhere: refused, nothing written.
	e3 := isolate(t)
	root3 := t.TempDir()
	if r := e3.pam("worker", "install", "--root", root3); r.code != 1 || !strings.Contains(r.stderr, "--worker-token-file") {
		t.Errorf("without a token: %v", r)
	}
	if ents, _ := os.ReadDir(root3); len(ents) != 0 {
		t.Errorf("wrote %v without a token", ents)
	}
}

// TestInstallServeUnit: the database URL, a secret, goes from
// --database-url-file into the credential file, never into the unit.
func TestInstallServeUnit(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("a system unit is written as root (CI runs as root)")
	}
	analyze := systemdAnalyze(t)
	e := isolate(t)
	const dbURL = "postgres://pam:s3cret-pw@db.example/pam"
	src := filepath.Join(t.TempDir(), "db")
	os.WriteFile(src, []byte(dbURL+"\n"), 0o600)
	root := t.TempDir()
	r := e.pam("serve", "install", "--root", root, "--database-url-file", src, "--bind", "10.0.0.1")
	if r.code != 0 {
		t.Fatal(r)
	}
	path := filepath.Join(root, "etc/systemd/system/pam-serve.service")
	unit, _ := readMode(t, path)
	cred, cmode := readMode(t, filepath.Join(root, "etc/credstore/pam-serve.database-url"))
	if cmode != 0o600 || strings.TrimSpace(cred) != dbURL {
		t.Errorf("credential file: mode %o, %q", cmode, cred)
	}
	if strings.Contains(unit, "s3cret") || strings.Contains(r.stdout, "s3cret") {
		t.Errorf("the database URL is in the unit or the output:\n%s\n%v", unit, r)
	}
	for _, want := range []string{"ExecStart=", " serve\n", "Environment=PAM_BIND=10.0.0.1\n", "LoadCredential=database-url:/etc/credstore/pam-serve.database-url\n"} {
		if !strings.Contains(unit, want) {
			t.Errorf("unit lacks %q:\n%s", want, unit)
		}
	}
	if strings.Contains(unit, "KillMode=process") {
		t.Errorf("serve's unit keeps processes (its embedded database) after a stop:\n%s", unit)
	}
	verifyUnit(t, analyze, path, false)
}

// TestInstallUserUnit: not root (or --user-unit), the unit is a user
// unit under ~/.config/systemd/user, the credential file under
// ~/.config/pam, and the output says how to outlive the login session.
func TestInstallUserUnit(t *testing.T) {
	t.Parallel()
	analyze := systemdAnalyze(t)
	e := isolate(t)
	home := e.vars["HOME"]
	e.stdin = strings.NewReader(installToken + "\n")
	r := e.pam("worker", "install", "--user-unit", "--url", "http://127.0.0.1:7898")
	if r.code != 0 {
		t.Fatal(r)
	}
	path := filepath.Join(home, ".config/systemd/user/pam-worker.service")
	unit, _ := readMode(t, path)
	credPath := filepath.Join(home, ".config/pam/credstore/pam-worker.worker-token")
	cred, cmode := readMode(t, credPath)
	if cmode != 0o600 || strings.TrimSpace(cred) != installToken {
		t.Errorf("credential file: mode %o", cmode)
	}
	if !strings.Contains(unit, "LoadCredential=worker-token:"+credPath+"\n") || !strings.Contains(unit, "KillMode=process\n") ||
		!strings.Contains(unit, "WantedBy=default.target\n") || strings.Contains(unit, "User=") || strings.Contains(unit, installToken) {
		t.Errorf("user unit:\n%s", unit)
	}
	if !strings.Contains(r.stdout, "loginctl enable-linger") || !strings.Contains(r.stdout, "systemctl --user enable --now pam-worker") {
		t.Errorf("output lacks the linger note or the start command:\n%s", r.stdout)
	}
	verifyUnit(t, analyze, path, true)
	if r := e.pam("worker", "install", "--user-unit", "--user", "pam"); r.code != 2 {
		t.Errorf("--user with a user unit: %v", r)
	}
	// A URL the worker would refuse at every start is refused now.
	if r := e.pam("worker", "install", "--user-unit", "--print", "--url", "http://pam.example:7898"); r.code != 2 || !strings.Contains(r.stderr, "PAM_ALLOW_INSECURE") {
		t.Errorf("plain http:// to another machine: %v", r)
	}
}

// TestInstallPrintWritesNothing: --print shows the unit and where it and
// the credential would go, writes no file, and asks for no secret.
func TestInstallPrintWritesNothing(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	home := e.vars["HOME"]
	before, _ := os.ReadDir(home)
	root := t.TempDir()
	src := filepath.Join(t.TempDir(), "tok")
	os.WriteFile(src, []byte(installToken), 0o600)
	for _, args := range [][]string{
		{"worker", "install", "--print", "--root", root, "--worker-token-file", src, "--host-name", "gpu-1"},
		{"worker", "install", "--print", "--user-unit"},
		{"serve", "install", "--print", "--root", root},
	} {
		r := e.pam(args...)
		if r.code != 0 || !strings.Contains(r.stdout, "[Service]\n") || !strings.Contains(r.stdout, ".service\n") {
			t.Errorf("pam %s: %v", strings.Join(args, " "), r)
		}
		if strings.Contains(r.stdout, installToken) {
			t.Errorf("pam %s prints the token", strings.Join(args, " "))
		}
		if args[0] == "worker" && !strings.Contains(r.stdout, "pam-worker.worker-token (mode 0600)") {
			t.Errorf("pam %s does not say where the credential goes:\n%s", strings.Join(args, " "), r.stdout)
		}
	}
	if ents, _ := os.ReadDir(root); len(ents) != 0 {
		t.Errorf("--print wrote under --root: %v", ents)
	}
	if after, _ := os.ReadDir(home); len(after) != len(before) {
		t.Errorf("--print wrote into HOME: %v → %v", before, after)
	}
}

// TestCredentialsDirectory: under a unit that loads credentials, worker
// and serve read their secrets from $CREDENTIALS_DIRECTORY; the variable
// and the --*-file flag still win.
func TestCredentialsDirectory(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	creds := t.TempDir()
	os.WriteFile(filepath.Join(creds, "worker-token"), []byte("cred-token\n"), 0o400)
	os.WriteFile(filepath.Join(creds, "database-url"), []byte("postgres://cred@db/pam\n"), 0o400)
	e.setenv("CREDENTIALS_DIRECTORY", creds)
	got := captureWorker(e)
	if r := e.pam("worker", "--config-dir", t.TempDir()); r.code != 0 || got.Token != "cred-token" {
		t.Errorf("worker token from the credential: %v %q", r, got.Token)
	}
	e.setenv("PAM_WORKER_TOKEN", "env-token")
	if r := e.pam("worker", "--config-dir", t.TempDir()); r.code != 0 || got.Token != "env-token" {
		t.Errorf("the variable wins over the credential: %v %q", r, got.Token)
	}
	gotServe := captureServe(e)
	if r := e.pam("serve"); r.code != 0 || gotServe.DatabaseURL != "postgres://cred@db/pam" {
		t.Errorf("database URL from the credential: %v %q", r, gotServe.DatabaseURL)
	}
	// A credential others could read is refused, as a token file is.
	os.Chmod(filepath.Join(creds, "database-url"), 0o644)
	if r := e.pam("serve"); r.code != 2 || !strings.Contains(r.stderr, "database-url") {
		t.Errorf("world-readable credential: %v", r)
	}
}
