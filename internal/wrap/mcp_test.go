package wrap

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"pam/internal/provider"
)

// pam's MCP server for the CLI (docs/architecture.md#pams-tools-for-the-agent):
// arguments for claude and codex, a settings file in the worker's data
// dir for gemini, nothing in the run's working directory.

// emptyCwd gives the run a working directory of its own and returns a
// check that nothing was written in it.
func (f *fixture) emptyCwd(t *testing.T) func() {
	t.Helper()
	f.d.Cwd = t.TempDir()
	f.writeDispatch(t)
	return func() {
		t.Helper()
		if entries, _ := os.ReadDir(f.d.Cwd); len(entries) != 0 {
			t.Errorf("written in the run's cwd: %v", entries)
		}
	}
}

func fakeAgent(t *testing.T, script string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "fake-agent")
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestMCPServerArguments: claude gets --mcp-config=<JSON> and settings
// that allow pam's tools; codex gets its -c overrides, before notify.
func TestMCPServerArguments(t *testing.T) {
	t.Parallel()
	bin := fakeAgent(t, argvScript)
	orch := newOrchestrator(t)

	f := newFixture(t, orch.URL, "fake", bin, "fix it")
	cwdEmpty := f.emptyCwd(t)
	f.writeCatalog(t, fmt.Sprintf("[providers.fake]\nbinary = %q\nhooks = \"claude\"\nmcp = \"claude\"\n", bin))
	o := f.options()
	o.PamBinary = "/opt/pam/bin/pam"
	if code := Run(t.Context(), o); code != 0 {
		t.Fatalf("exit %d\n%s", code, f.stderr)
	}
	lines := strings.Split(strings.TrimSpace(f.stdout.String()), "\n")
	want := `[--mcp-config={"mcpServers":{"pam":{"args":["mcp"],"command":"/opt/pam/bin/pam","type":"stdio"}}}]`
	if len(lines) != 4 || lines[0] != "[fix it]" || lines[1] != want || lines[2] != "[--settings]" {
		t.Fatalf("claude argv:\n%s", f.stdout)
	}
	var s struct {
		Hooks       map[string]any
		Permissions struct{ Allow []string }
	}
	if err := json.Unmarshal([]byte(strings.Trim(lines[3], "[]")), &s); err != nil || len(s.Hooks) != 3 ||
		!slices.Equal(s.Permissions.Allow, []string{"mcp__pam__list_work_items", "mcp__pam__get_work_item", "mcp__pam__create_work_item",
			"mcp__pam__update_work_item", "mcp__pam__report_progress"}) {
		t.Errorf("claude settings %s: %v", lines[3], err)
	}
	cwdEmpty()

	f = newFixture(t, orch.URL, "fake", bin, "fix it")
	cwdEmpty = f.emptyCwd(t)
	f.writeCatalog(t, fmt.Sprintf("[providers.fake]\nbinary = %q\nhooks = \"codex\"\nmcp = \"codex\"\n", bin))
	o = f.options()
	o.PamBinary = "/opt/pam/bin/pam"
	if code := Run(t.Context(), o); code != 0 {
		t.Fatalf("exit %d\n%s", code, f.stderr)
	}
	wantCodex := "[fix it]\n" +
		"[-c]\n[mcp_servers.pam.command=\"/opt/pam/bin/pam\"]\n[-c]\n[mcp_servers.pam.args=[\"mcp\"]]\n" +
		"[-c]\n[mcp_servers.pam.env_vars=[\"PAM_RUN_ID\",\"PAM_ATTEMPT\",\"PAM_API_URL\",\"PAM_SIGNAL_TOKEN\",\"PAM_WORKER_DATA_DIR\",\"PAM_CA_FILE\"]]\n" +
		"[-c]\n[mcp_servers.pam.default_tools_approval_mode=\"approve\"]\n" +
		"[-c]\n[notify=[\"/opt/pam/bin/pam\",\"hook\",\"completed\"]]\n"
	if got := f.stdout.String(); got != wantCodex {
		t.Errorf("codex argv:\n%s\nwant:\n%s", got, wantCodex)
	}
	cwdEmpty()
}

// geminiScript prints the system defaults gemini is pointed at, and the
// file's mode and content.
const geminiScript = "#!/bin/sh\nprintf 'defaults=%s\\n' \"$GEMINI_CLI_SYSTEM_DEFAULTS_PATH\"\n" +
	"[ -n \"$GEMINI_CLI_SYSTEM_DEFAULTS_PATH\" ] && stat -c 'mode=%a' \"$GEMINI_CLI_SYSTEM_DEFAULTS_PATH\" && cat \"$GEMINI_CLI_SYSTEM_DEFAULTS_PATH\"\nexit 0\n"

// TestMCPServerForGemini: from a data dir gemini would not read settings
// from (not root's alone), pam gives gemini nothing and the pane says how
// to give it the tools once; from one it would, gemini is pointed at a
// 0600 settings file there that adds pam's trusted server to the system
// defaults it had, removed when the CLI is gone.
func TestMCPServerForGemini(t *testing.T) {
	t.Parallel()
	bin := fakeAgent(t, geminiScript)
	orch := newOrchestrator(t)

	f := newFixture(t, orch.URL, "gemini", bin, "")
	cwdEmpty := f.emptyCwd(t)
	f.writeCatalog(t, fmt.Sprintf("[providers.gemini]\nbinary = %q\n", bin))
	o := f.options()
	o.PamBinary = "/opt/pam/bin/pam"
	if code := Run(t.Context(), o); code != 0 {
		t.Fatalf("exit %d\n%s", code, f.stderr)
	}
	if got := f.stdout.String(); got != "defaults=\n" {
		t.Errorf("gemini pointed at settings from %s: %s", f.workerDir, got)
	}
	if !strings.Contains(f.stderr.String(), "gemini mcp add --scope user --trust pam /opt/pam/bin/pam mcp") {
		t.Errorf("the pane does not say how to give gemini the tools:\n%s", f.stderr)
	}
	cwdEmpty()

	cache, err := os.UserCacheDir()
	if err != nil || provider.GeminiTrusts(filepath.Join(cache, "x")) != nil {
		t.Skipf("no folder here that gemini would read settings from (%s): run as root", cache)
	}
	root, err := os.MkdirTemp(cache, "pam-wrap-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	f = newFixture(t, orch.URL, "gemini", bin, "")
	cwdEmpty = f.emptyCwd(t)
	f.workerDir = filepath.Join(root, "worker")
	if err := os.MkdirAll(filepath.Join(f.workerDir, "dispatch"), 0o700); err != nil {
		t.Fatal(err)
	}
	f.writeDispatch(t)
	defaults := filepath.Join(root, "system-defaults.json")
	if err := os.WriteFile(defaults, []byte(`{"ui":{"theme":"Dracula"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	f.writeCatalog(t, fmt.Sprintf("[providers.gemini]\nbinary = %q\nenv = { GEMINI_CLI_SYSTEM_DEFAULTS_PATH = %q }\n", bin, defaults))
	o = f.options()
	o.PamBinary = "/opt/pam/bin/pam"
	if code := Run(t.Context(), o); code != 0 {
		t.Fatalf("exit %d\n%s", code, f.stderr)
	}
	path := MCPSettingsPath(f.workerDir, f.runID)
	head, body, _ := strings.Cut(f.stdout.String(), "\nmode=600\n")
	if head != "defaults="+path {
		t.Fatalf("gemini's output:\n%s\nwant defaults=%s and mode 600", f.stdout, path)
	}
	var s struct {
		UI         map[string]string
		MCPServers map[string]struct {
			Command string
			Args    []string
			Trust   bool
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(body), &s); err != nil || s.UI["theme"] != "Dracula" || len(s.MCPServers) != 1 ||
		s.MCPServers["pam"].Command != "/opt/pam/bin/pam" || !slices.Equal(s.MCPServers["pam"].Args, []string{"mcp"}) || !s.MCPServers["pam"].Trust {
		t.Errorf("gemini's settings %s: %v", body, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the settings file is still there after the run: %v", err)
	}
	cwdEmpty()
}
