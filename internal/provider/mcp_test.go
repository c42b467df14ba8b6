package provider

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// pamTools are the permission rules Claude Code needs for pam's tools.
var pamTools = []string{"mcp__pam__list_work_items", "mcp__pam__get_work_item", "mcp__pam__create_work_item",
	"mcp__pam__update_work_item", "mcp__pam__report_progress"}

// The built-ins wire pam's MCP server into claude, codex and gemini; a
// custom entry has none unless it says so.
func TestMCPWiringOfTheBuiltins(t *testing.T) {
	t.Parallel()
	c, err := Load(writeCatalog(t, "[providers.aider]\nbinary = \"aider\"\n[providers.mine]\nbinary = \"mine\"\nmcp = \"codex\"\n[providers.gemini]\nmcp = \"none\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"claude": MCPClaude, "codex": MCPCodex, "gemini": MCPNone, "grok": MCPNone,
		"shell": MCPNone, "aider": MCPNone, "mine": MCPCodex} {
		p, _ := c.Get(name)
		if p.MCP != want {
			t.Errorf("%s: mcp %q, want %q", name, p.MCP, want)
		}
	}
	b, _ := Load("")
	if g, _ := b.Get("gemini"); g.MCP != MCPGemini {
		t.Errorf("built-in gemini: mcp %q", g.MCP)
	}
}

// claude gets pam's server through --mcp-config=<JSON>, one argument, and
// the settings pam already passes allow its tools; without claude's hooks
// the permissions come in a --settings of their own.
func TestMCPArgsClaude(t *testing.T) {
	t.Parallel()
	pam := "/opt/my pam's/bin/pam"
	c, _ := Load("")
	cl, _ := c.Get("claude")
	args := cl.MCPArgs(pam)
	if len(args) != 1 || !strings.HasPrefix(args[0], "--mcp-config=") {
		t.Fatalf("claude MCPArgs = %q", args)
	}
	var cfg struct {
		MCPServers map[string]struct {
			Type    string   `json:"type"`
			Command string   `json:"command"`
			Args    []string `json:"args"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(args[0], "--mcp-config=")), &cfg); err != nil {
		t.Fatalf("--mcp-config is not JSON: %v", err)
	}
	srv, ok := cfg.MCPServers["pam"]
	if len(cfg.MCPServers) != 1 || !ok || srv.Type != "stdio" || srv.Command != pam || !slices.Equal(srv.Args, []string{"mcp"}) {
		t.Errorf("--mcp-config = %+v", cfg)
	}
	if got := allowed(t, cl.HookArgs(pam)); !slices.Equal(got, pamTools) {
		t.Errorf("claude's hook settings allow %q, want %q", got, pamTools)
	}

	cl.Hooks = HooksNone
	args = cl.MCPArgs(pam)
	if len(args) != 3 || args[1] != "--settings" || !slices.Equal(allowed(t, args[1:]), pamTools) {
		t.Errorf("claude without hooks: MCPArgs = %q", args)
	}
	cl.Hooks, cl.MCP = HooksClaude, MCPNone
	if got := allowed(t, cl.HookArgs(pam)); got != nil || cl.MCPArgs(pam) != nil {
		t.Errorf("claude without pam's server: allows %q, MCPArgs %q", got, cl.MCPArgs(pam))
	}
}

// allowed reads permissions.allow of a --settings pair.
func allowed(t *testing.T, args []string) []string {
	t.Helper()
	if len(args) != 2 || args[0] != "--settings" {
		t.Fatalf("not a --settings pair: %q", args)
	}
	var s struct {
		Permissions struct {
			Allow []string `json:"allow"`
		} `json:"permissions"`
	}
	if err := json.Unmarshal([]byte(args[1]), &s); err != nil {
		t.Fatalf("settings are not JSON: %v", err)
	}
	return s.Permissions.Allow
}

// codex gets -c overrides of mcp_servers.pam: its command and args, the
// run's variables it must pass on, and tools that never ask.
func TestMCPArgsCodex(t *testing.T) {
	t.Parallel()
	c, _ := Load("")
	cx, _ := c.Get("codex")
	got := cx.MCPArgs(`/opt/p"am/bin/pam`)
	want := []string{
		"-c", `mcp_servers.pam.command="/opt/p\"am/bin/pam"`,
		"-c", `mcp_servers.pam.args=["mcp"]`,
		"-c", `mcp_servers.pam.env_vars=["PAM_RUN_ID","PAM_ATTEMPT","PAM_API_URL","PAM_SIGNAL_TOKEN","PAM_WORKER_DATA_DIR","PAM_CA_FILE"]`,
		"-c", `mcp_servers.pam.default_tools_approval_mode="approve"`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("codex MCPArgs:\n%q\nwant\n%q", got, want)
	}
	for _, name := range []string{"gemini", "grok", "shell"} {
		p, _ := c.Get(name)
		if got := p.MCPArgs("/usr/local/bin/pam"); got != nil {
			t.Errorf("%s MCPArgs = %q", name, got)
		}
	}
}

// gemini's settings add pam's trusted server to whatever system defaults
// there were, keeping the rest.
func TestGeminiSettings(t *testing.T) {
	t.Parallel()
	type server struct {
		Command string   `json:"command"`
		Args    []string `json:"args"`
		Trust   bool     `json:"trust"`
	}
	var out struct {
		MCPServers map[string]server `json:"mcpServers"`
		UI         map[string]any    `json:"ui"`
	}
	for _, base := range []string{"", "  \n", "{}", "null"} {
		b, err := GeminiSettings([]byte(base), "/usr/local/bin/pam")
		if err != nil {
			t.Fatalf("base %q: %v", base, err)
		}
		out.MCPServers = nil
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		if s := out.MCPServers["pam"]; len(out.MCPServers) != 1 || s.Command != "/usr/local/bin/pam" || !slices.Equal(s.Args, []string{"mcp"}) || !s.Trust {
			t.Errorf("base %q: %s", base, b)
		}
	}
	b, err := GeminiSettings([]byte(`{"ui":{"theme":"Dracula"},"mcpServers":{"github":{"command":"gh-mcp"},"pam":{"command":"/old/pam"}}}`), "/usr/local/bin/pam")
	if err != nil {
		t.Fatal(err)
	}
	out.MCPServers = nil
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if out.UI["theme"] != "Dracula" || out.MCPServers["github"].Command != "gh-mcp" || out.MCPServers["pam"].Command != "/usr/local/bin/pam" {
		t.Errorf("merged: %s", b)
	}
	for _, bad := range []string{"[]", `{"mcpServers":`, "// a comment\n{}"} {
		if _, err := GeminiSettings([]byte(bad), "/p"); err == nil {
			t.Errorf("base %q accepted", bad)
		}
	}
}

func TestGeminiDefaultsPath(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{nil, "/etc/gemini-cli/system-defaults.json"},
		{map[string]string{"GEMINI_CLI_SYSTEM_SETTINGS_PATH": "/opt/g/settings.json"}, "/opt/g/system-defaults.json"},
		{map[string]string{"GEMINI_CLI_SYSTEM_SETTINGS_PATH": "/opt/g/settings.json", GeminiDefaultsVar: "/d.json"}, "/d.json"},
	} {
		if got := GeminiDefaultsPath(func(k string) string { return c.env[k] }); got != c.want {
			t.Errorf("%v: %s, want %s", c.env, got, c.want)
		}
	}
}

// gemini reads system settings only from root's files in root's folders
// that nobody else may write: pam checks the same before handing it one.
func TestGeminiTrusts(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir() // under a world-writable /tmp
	if err := GeminiTrusts(filepath.Join(tmp, "s.json")); err == nil || !strings.Contains(err.Error(), "writable by group or others") && !strings.Contains(err.Error(), "not root") {
		t.Errorf("a file under %s: %v", tmp, err)
	}
	if os.Getuid() != 0 {
		if err := GeminiTrusts("/etc/passwd"); err != nil {
			t.Errorf("/etc/passwd: %v", err)
		}
		return
	}
	cache, err := os.UserCacheDir()
	if err != nil || GeminiTrusts(cache) != nil {
		t.Skipf("no folder of root's that only root may write (%s: %v)", cache, GeminiTrusts(cache))
	}
	dir, err := os.MkdirTemp(cache, "pam-gemini-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	file := filepath.Join(dir, "s.json")
	if err := GeminiTrusts(file); err != nil {
		t.Errorf("a missing file in root's folder: %v", err)
	}
	if err := os.WriteFile(file, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := GeminiTrusts(file); err != nil {
		t.Errorf("root's 0600 file: %v", err)
	}
	if err := os.Chmod(file, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := GeminiTrusts(file); err == nil {
		t.Error("a file anyone may write was trusted")
	}
	if err := os.Chmod(file, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := GeminiTrusts(file); err == nil {
		t.Error("a file in a folder anyone may write was trusted")
	}
}
