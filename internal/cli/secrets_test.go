package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/creack/pty"
)

// Secrets are never flags: a flag's value shows in the process list. The
// three secret flags are unknown (exit 2) on every command, and their
// --*-file variants read the secret from a private file (issue 9 item 6).
func TestSecretsNeverFlags(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	// Nothing real starts, even on the code before the fix that takes
	// the flags.
	w, s := captureWorker(e), captureServe(e)
	e.setenv("PAM_URL", "http://127.0.0.1:1")
	secretFlags := []string{"--token", "--worker-token", "--database-url"}
	checked := map[string]int{}
	walk(root, nil, func(path []string, c *command) {
		if c.group == "" || c.setup == nil {
			return
		}
		for _, s := range settings {
			if !s.Secret || !slices.Contains(s.Uses, c.group) {
				continue
			}
			flagName := "--" + strings.TrimSuffix(s.Flag(), "-file")
			checked[flagName]++
			// Positional arguments come after the flags, so the flag is
			// parsed whatever the command's arguments are.
			args := append(slices.Clone(path), flagName, "s3cret")
			r := e.pam(args...)
			if r.code != 2 || !strings.Contains(r.stderr, "flag provided but not defined: "+flagName) {
				t.Errorf("pam %s: want exit 2, unknown flag; got %v", strings.Join(args, " "), r)
			}
			if strings.Contains(r.stdout+r.stderr, "s3cret") {
				t.Errorf("pam %s echoes the secret: %v", strings.Join(args, " "), r)
			}
			if help := e.mustPam(append(slices.Clone(path), "--help")...); !strings.Contains(help, "--"+s.Flag()+" file") {
				t.Errorf("pam %s --help lacks --%s file:\n%s", strings.Join(path, " "), s.Flag(), help)
			}
		}
	})
	for _, f := range secretFlags {
		if checked[f] == 0 {
			t.Errorf("no command registers the secret of %s", f)
		}
	}

	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}

	// --token-file: the operator token, trimmed (the fake API answers only
	// testToken).
	f, _ := newFakeAPI(t, e)
	f.handle("GET /api/v1/projects", 200, `{"projects":[]}`)
	e.setenv("PAM_TOKEN", "")
	e.mustPam("project", "list", "--token-file", write("token", "  "+testToken+"\n", 0o600))
	if got := f.last(); got != "GET /api/v1/projects" { // the fake refuses any other token
		t.Errorf("--token-file: last request %q", got)
	}
	for name, tt := range map[string]struct {
		content string
		mode    os.FileMode
		err     string
	}{
		"empty":      {" \n", 0o600, "is empty"},
		"group-read": {testToken, 0o640, "chmod 600"},
		"world-read": {testToken, 0o604, "chmod 600"},
	} {
		r := e.pam("project", "list", "--token-file", write(name, tt.content, tt.mode))
		if r.code != 2 || !strings.Contains(r.stderr, tt.err) || strings.Contains(r.stderr, testToken) {
			t.Errorf("%s token file: want exit 2 with %q, got %v", name, tt.err, r)
		}
	}
	if r := e.pam("project", "list", "--token-file", filepath.Join(dir, "missing")); r.code != 2 || !strings.Contains(r.stderr, "missing") {
		t.Errorf("missing token file: %v", r)
	}

	// --worker-token-file: the worker credential, over PAM_WORKER_TOKEN.
	e.setenv("PAM_WORKER_TOKEN", "env-token")
	if r := e.pam("worker", "--config-dir", t.TempDir(), "--worker-token-file", write("worker-token", "file-token\n", 0o400)); r.code != 0 || w.Token != "file-token" {
		t.Errorf("--worker-token-file: %v token %q", r, w.Token)
	}

	// --database-url-file: serve's connection string.
	if r := e.pam("serve", "--database-url-file", write("db", "postgres://u:pw@db/pam\n", 0o600)); r.code != 0 || s.DatabaseURL != "postgres://u:pw@db/pam" {
		t.Errorf("--database-url-file: %v url %q", r, s.DatabaseURL)
	}
}

// pam run attach --local --write takes the run's lease from the
// orchestrator, so it needs the operator token on the worker host: its
// help says so and how to give it (for the command only), and without a
// token its error says what it needs rather than only that a token is
// missing.
func TestAttachLocalWriteSaysWhatItNeeds(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	help := e.mustPam("run", "attach", "--help")
	if !strings.Contains(help, "operator token") || !strings.Contains(help, "PAM_TOKEN") {
		t.Errorf("--help does not say --write needs the operator token:\n%s", help)
	}
	master, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	defer tty.Close()
	e.stdin = tty
	r := e.pam("run", "attach", "--local", "--write", "0123456789abcdef")
	if r.code != 1 || !strings.Contains(r.stderr, "--local --write") || !strings.Contains(r.stderr, "operator token") ||
		!strings.Contains(r.stderr, "PAM_TOKEN") || !strings.Contains(r.stderr, "agents") {
		t.Fatalf("without a token: %v", r)
	}
}
