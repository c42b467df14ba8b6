package cli

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"pam/internal/defaults"
	"pam/internal/serve"
)

// walk calls fn with the argument path of every command in the table.
func walk(c *command, path []string, fn func(path []string, c *command)) {
	fn(path, c)
	for _, s := range c.subs {
		walk(s, append(slices.Clone(path), s.name), fn)
	}
}

func TestHelpOnEveryCommand(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	n := 0
	walk(root, nil, func(path []string, c *command) {
		n++
		name := "pam " + strings.Join(path, " ")
		forms := [][]string{
			append(slices.Clone(path), "--help"),
			append(slices.Clone(path), "-h"),
			append(slices.Clone(path), "help"),
			append([]string{"help"}, path...),
		}
		for _, args := range forms {
			r := e.pam(args...)
			if r.code != 0 {
				t.Errorf("pam %s: %v", strings.Join(args, " "), r)
				continue
			}
			if !strings.HasPrefix(r.stdout, "Usage: "+strings.TrimSpace(name)) {
				t.Errorf("pam %s: usage does not start with %q:\n%s", strings.Join(args, " "), "Usage: "+name, r.stdout)
			}
			if r.stderr != "" {
				t.Errorf("pam %s: stderr %q", strings.Join(args, " "), r.stderr)
			}
			if !strings.Contains(r.stdout, capitalize(c.summary)) {
				t.Errorf("pam %s: usage lacks the summary", strings.Join(args, " "))
			}
		}
	})
	if n < 15 {
		t.Errorf("walked only %d commands", n)
	}
}

// Every setting a command registers is listed in its help with its
// variable, so the help is the reference of docs/architecture.md#configuration-and-files-on-disk.
func TestHelpListsSettings(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	out := e.mustPam("serve", "--help")
	for _, s := range settings {
		if slices.Contains(s.Uses, "serve") && !strings.Contains(out, "--"+s.Flag()) || slices.Contains(s.Uses, "serve") && !strings.Contains(out, "$"+s.Env) {
			t.Errorf("pam serve --help lacks --%s / $%s", s.Flag(), s.Env)
		}
	}
	e.setenv("PAM_TOKEN", "ffffffffffffffffffffffffffffffff")
	if out := e.mustPam("project", "list", "--help"); strings.Contains(out, "ffffffff") {
		t.Errorf("help shows the token:\n%s", out)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	tests := []struct {
		args []string
		want string
	}{
		{nil, "missing command"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"project"}, "missing command"},
		{[]string{"project", "frob"}, `unknown command "frob"`},
		{[]string{"item", "frob", "x"}, `unknown command "frob"`},
		{[]string{"help", "nope"}, `unknown command "nope"`},
		{[]string{"project", "list", "--nope"}, "flag provided but not defined: --nope"},
		{[]string{"project", "show"}, "missing REF"},
		{[]string{"project", "show", "a", "b"}, `unexpected argument "b"`},
		{[]string{"project", "create"}, "--name is required"},
		{[]string{"project", "update", "p"}, "nothing to change"},
		{[]string{"item", "add", "p", "--kind", "task"}, "--kind and --title are required"},
		{[]string{"item", "move", "i"}, "nothing to change"},
		{[]string{"item", "move", "i", "--parent", "x", "--root"}, "exclude each other"},
		{[]string{"item", "update", "i"}, "nothing to change"},
		{[]string{"events", "--topic", "Run.!"}, "--topic"},
		{[]string{"events", "--limit", "x"}, "invalid value"},
		{[]string{"version", "extra"}, `unexpected argument "extra"`},
		{[]string{"project", "list", "--url", "localhost:7898"}, "PAM_URL"},
		{[]string{"serve", "--public-url", "pam.example.com"}, "PAM_PUBLIC_URL"},
		{[]string{"notify", "add", "x", "--kind", "ntfy"}, "--kind and --to are required"},
	}
	for _, tt := range tests {
		r := e.pam(tt.args...)
		if r.code != 2 {
			t.Errorf("pam %s: exit %d, want 2\n%v", strings.Join(tt.args, " "), r.code, r)
			continue
		}
		if !strings.Contains(r.stderr, tt.want) || !strings.Contains(r.stderr, "Usage: pam") {
			t.Errorf("pam %s: stderr lacks %q and usage:\n%s", strings.Join(tt.args, " "), tt.want, r.stderr)
		}
		if r.stdout != "" {
			t.Errorf("pam %s: stdout %q", strings.Join(tt.args, " "), r.stdout)
		}
	}
}

// captureServe makes serve.Run in e a stub that records the Options the
// last command line resolved to, and returns where they land.
func captureServe(e *testEnv) *serve.Options {
	var got serve.Options
	e.serve = func(ctx context.Context, o serve.Options) error { got = o; return nil }
	return &got
}

func TestSettingsPrecedence(t *testing.T) {
	t.Parallel()
	const dataDir = "the test's data dir"
	type want struct {
		field string
		value any
	}
	read := func(o *serve.Options, field string) any {
		switch field {
		case "Bind":
			return o.Bind
		case "Port":
			return o.Port
		case "DataDir":
			return o.DataDir
		case "DatabaseURL":
			return o.DatabaseURL
		case "MetricsPublic":
			return o.MetricsPublic
		case "AllowInsecure":
			return o.AllowInsecure
		case "DispatchTimeout":
			return o.DispatchTimeout
		case "HostOfflineAfter":
			return o.HostOfflineAfter
		case "EventRetention":
			return o.EventRetention
		case "MaxAttempts":
			return o.MaxAttempts
		case "DashboardURL":
			return o.DashboardURL
		case "TLSCert":
			return o.TLSCert
		case "CompletedStopAfter":
			return o.CompletedStopAfter
		}
		t.Fatalf("unknown field %s", field)
		return nil
	}
	dbURLFile := filepath.Join(t.TempDir(), "database-url")
	if err := os.WriteFile(dbURLFile, []byte("postgres://db/pam\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want []want
		code int
		err  string // in stderr when code != 0
	}{
		{
			name: "defaults",
			args: []string{"serve"},
			want: []want{{"Bind", "0.0.0.0"}, {"Port", 7898}, {"DataDir", dataDir}, {"DatabaseURL", ""}, {"MetricsPublic", false},
				{"DispatchTimeout", 5 * time.Minute}, {"HostOfflineAfter", 90 * time.Second}, {"EventRetention", 720 * time.Hour},
				{"MaxAttempts", 3}, {"DashboardURL", false}, {"CompletedStopAfter", time.Hour}},
		},
		{
			name: "completed stop after 0 is never",
			env:  map[string]string{"PAM_COMPLETED_STOP_AFTER": "0"},
			args: []string{"serve"},
			want: []want{{"CompletedStopAfter", defaults.Never}},
		},
		{
			name: "completed stop after as a flag of up",
			env:  map[string]string{"PAM_COMPLETED_STOP_AFTER": "0"},
			args: []string{"up", "--completed-stop-after", "90s"},
			want: []want{{"CompletedStopAfter", 90 * time.Second}},
		},
		{
			name: "environment over defaults",
			env:  map[string]string{"PAM_BIND": "10.0.0.1", "PAM_PORT": "0", "PAM_DISPATCH_TIMEOUT": "2s", "PAM_METRICS_PUBLIC": "true", "PAM_MAX_ATTEMPTS": "5", "PAM_DATABASE_URL": "postgres://db/pam"},
			args: []string{"serve"},
			want: []want{{"Bind", "10.0.0.1"}, {"Port", 0}, {"DispatchTimeout", 2 * time.Second}, {"MetricsPublic", true}, {"MaxAttempts", 5}, {"DatabaseURL", "postgres://db/pam"}},
		},
		{
			name: "flags over environment",
			env:  map[string]string{"PAM_BIND": "10.0.0.1", "PAM_DISPATCH_TIMEOUT": "2s", "PAM_METRICS_PUBLIC": "true"},
			args: []string{"serve", "--bind", "10.0.0.2", "--dispatch-timeout=3s", "--metrics-public=false", "--host-offline-after", "1m"},
			want: []want{{"Bind", "10.0.0.2"}, {"DispatchTimeout", 3 * time.Second}, {"MetricsPublic", false}, {"HostOfflineAfter", time.Minute}},
		},
		{
			name: "allow insecure reaches serve",
			env:  map[string]string{"PAM_ALLOW_INSECURE": "1"},
			args: []string{"serve"},
			want: []want{{"AllowInsecure", true}, {"Bind", "0.0.0.0"}},
		},
		{
			name: "bare bool flag",
			args: []string{"serve", "--metrics-public"},
			want: []want{{"MetricsPublic", true}},
		},
		{
			name: "a flag overrides a bad environment value",
			env:  map[string]string{"PAM_DISPATCH_TIMEOUT": "soon"},
			args: []string{"serve", "--dispatch-timeout", "1s"},
			want: []want{{"DispatchTimeout", time.Second}},
		},
		{
			name: "up binds loopback, embeds the database and prints the dashboard URL",
			env:  map[string]string{"PAM_DATABASE_URL": "postgres://elsewhere/pam"},
			args: []string{"up"},
			want: []want{{"Bind", "127.0.0.1"}, {"DatabaseURL", ""}, {"DashboardURL", true}, {"Port", 7898}},
		},
		{
			name: "up takes an explicit --database-url-file and PAM_BIND",
			env:  map[string]string{"PAM_BIND": "0.0.0.0"},
			args: []string{"up", "--database-url-file", dbURLFile},
			want: []want{{"Bind", "0.0.0.0"}, {"DatabaseURL", "postgres://db/pam"}},
		},
		{
			name: "bad duration in the environment",
			env:  map[string]string{"PAM_DISPATCH_TIMEOUT": "soon"},
			args: []string{"serve"},
			code: 2, err: `PAM_DISPATCH_TIMEOUT="soon": not a duration`,
		},
		{
			name: "bad duration flag",
			args: []string{"serve", "--lease-ttl", "forever"},
			code: 2, err: `invalid value "forever" for flag --lease-ttl: not a duration`,
		},
		{
			name: "negative duration",
			env:  map[string]string{"PAM_SPAWN_TIMEOUT": "-1s"},
			args: []string{"serve"},
			code: 2, err: "PAM_SPAWN_TIMEOUT",
		},
		{
			name: "negative completed stop after",
			args: []string{"serve", "--completed-stop-after=-1m"},
			code: 2, err: "must not be negative",
		},
		{
			name: "bad integer",
			env:  map[string]string{"PAM_PORT": "http"},
			args: []string{"serve"},
			code: 2, err: "PAM_PORT",
		},
		{
			name: "port out of range",
			args: []string{"serve", "--port", "70000"},
			code: 2, err: "PAM_PORT",
		},
		{
			name: "bad log level",
			env:  map[string]string{"PAM_LOG_LEVEL": "loud"},
			args: []string{"serve"},
			code: 2, err: "PAM_LOG_LEVEL",
		},
		{
			name: "TLS certificate without key",
			env:  map[string]string{"PAM_TLS_CERT": "/etc/cert.pem"},
			args: []string{"serve"},
			code: 2, err: "PAM_TLS_KEY",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := isolate(t)
			got := captureServe(e)
			for k, v := range tt.env {
				e.setenv(k, v)
			}
			r := e.pam(tt.args...)
			if r.code != tt.code {
				t.Fatalf("exit %d, want %d\n%v", r.code, tt.code, r)
			}
			if tt.code != 0 {
				if !strings.Contains(r.stderr, tt.err) {
					t.Errorf("stderr lacks %q:\n%s", tt.err, r.stderr)
				}
				return
			}
			for _, w := range tt.want {
				if w.value == dataDir {
					w.value = e.dir
				}
				if v := read(got, w.field); v != w.value {
					t.Errorf("%s = %v, want %v", w.field, v, w.value)
				}
			}
			if got.Logger == nil || got.Stdout == nil || got.Version == "" {
				t.Errorf("Logger, Stdout and Version must be set: %+v", got)
			}
		})
	}
}

// Every serve timer of docs/architecture.md#configuration-and-files-on-disk reaches serve.Options from its variable.
func TestEveryServeTimerIsWired(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	got := captureServe(e)
	var args []string
	for _, s := range settings {
		if s.Kind == kindDuration && slices.Contains(s.Uses, "serve") {
			args = append(args, "--"+s.Flag(), "1234s")
		}
	}
	args = append([]string{"serve", "--restart-initial-delay", "1s"}, args...)
	e.mustPam(args...)
	for name, d := range map[string]time.Duration{
		"EventRetention": got.EventRetention, "HostOfflineAfter": got.HostOfflineAfter, "HostLostAfter": got.HostLostAfter,
		"DispatchTimeout": got.DispatchTimeout, "DispatchAckTimeout": got.DispatchAckTimeout, "CLIHangTimeout": got.CLIHangTimeout,
		"RestartInitialDelay": got.RestartInitialDelay, "RestartMaxDelay": got.RestartMaxDelay, "LeaseTTL": got.LeaseTTL, "SpawnTimeout": got.SpawnTimeout,
		"CompletedStopAfter": got.CompletedStopAfter,
	} {
		if d != 1234*time.Second {
			t.Errorf("%s = %s, want 1234s", name, d)
		}
	}
}

func TestTokenPrecedence(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	dir := e.dir
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"projects":[]}`))
	}))
	defer srv.Close()
	e.setenv("PAM_URL", srv.URL)
	last := func() string {
		mu.Lock()
		defer mu.Unlock()
		return seen[len(seen)-1]
	}

	// Neither PAM_TOKEN nor the file: exit 1 naming both.
	r := e.pam("project", "list")
	if r.code != 1 || !strings.Contains(r.stderr, "PAM_TOKEN") || !strings.Contains(r.stderr, filepath.Join(dir, "token")) {
		t.Fatalf("without a token: %v", r)
	}

	fileTok := "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	writeToken(t, dir, fileTok)
	e.mustPam("project", "list")
	if last() != fileTok {
		t.Errorf("token file: sent %q", last())
	}

	e.setenv("PAM_TOKEN", "env-token")
	e.mustPam("project", "list")
	if last() != "env-token" {
		t.Errorf("PAM_TOKEN over the file: sent %q", last())
	}

	flagFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(flagFile, []byte(" flag-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.mustPam("project", "list", "--token-file", flagFile)
	if last() != "flag-token" {
		t.Errorf("--token-file over PAM_TOKEN: sent %q", last())
	}

	// --data-dir moves the token file.
	e.setenv("PAM_TOKEN", "")
	other := t.TempDir()
	otherTok := "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	writeToken(t, other, otherTok)
	e.mustPam("project", "list", "--data-dir", other)
	if last() != otherTok {
		t.Errorf("--data-dir token file: sent %q", last())
	}
}
