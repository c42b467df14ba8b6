package provider

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"pam/internal/wire"
)

// MCP wirings: how pam's MCP server, `pam mcp`, reaches a CLI
// (docs/architecture.md#pams-tools-for-the-agent). Each was read off the
// CLI it is named after (claude 2.1, codex 0.171, gemini 0.61); none
// writes into the user's repository or the CLI's own config files.
const (
	// MCPNone gives the CLI no MCP server.
	MCPNone = "none"
	// MCPClaude passes Claude Code --mcp-config with inline JSON, and
	// allows pam's tools in the --settings pam passes.
	MCPClaude = "claude"
	// MCPCodex passes codex -c overrides of mcp_servers.pam.
	MCPCodex = "codex"
	// MCPGemini points gemini at a system defaults file in the worker's
	// data dir (GeminiDefaultsVar) that adds pam's server.
	MCPGemini = "gemini"
)

// mcpEnv are the run's variables pam mcp reads: a CLI that passes its MCP
// servers only the variables it is told to (codex) is told these.
var mcpEnv = []string{"PAM_RUN_ID", "PAM_ATTEMPT", "PAM_API_URL", "PAM_SIGNAL_TOKEN", "PAM_WORKER_DATA_DIR", "PAM_CA_FILE"}

// mcpCommand is how a CLI starts pam's MCP server: pam's absolute path
// and "mcp", never through a shell.
func mcpCommand(pamBinary string) map[string]any {
	return map[string]any{"command": pamBinary, "args": []string{"mcp"}}
}

// claudeTools are pam's tools as Claude Code names them in its
// permission rules: mcp__<server>__<tool>.
func claudeTools() []string {
	out := make([]string, len(wire.MCPTools))
	for i, t := range wire.MCPTools {
		out[i] = "mcp__" + wire.MCPServerName + "__" + t
	}
	return out
}

// claudePermissions is the permissions part of Claude Code's settings
// that lets pam's tools run without asking.
func claudePermissions() map[string]any {
	return map[string]any{"allow": claudeTools()}
}

// MCPArgs returns the arguments that give the CLI pam's MCP server, with
// pamBinary the absolute path of the pam executable. They go before the
// hook arguments (HookArgs), whose settings already allow the tools when
// both are Claude Code's.
//
//   - claude: --mcp-config=<JSON naming pam as a stdio server>. The flag
//     takes several values (files or JSON strings), so the value is
//     joined to it with "=": nothing after it can be taken for another.
//     When the entry's hooks are not claude's, a --settings of its own
//     allows the tools; otherwise HookArgs' settings do. Claude starts
//     its MCP servers with its own environment, the run's variables
//     included.
//   - codex: -c mcp_servers.pam.command/args, env_vars naming the run's
//     variables (codex passes an MCP server only a few variables of its
//     own unless told), default_tools_approval_mode="approve" (its tools
//     never ask).
//   - gemini and the others: none (gemini reads a file: GeminiSettings).
func (p Provider) MCPArgs(pamBinary string) []string {
	switch p.MCP {
	case MCPClaude:
		server := mcpCommand(pamBinary)
		server["type"] = "stdio"
		args := []string{"--mcp-config=" + compactJSON(map[string]any{"mcpServers": map[string]any{wire.MCPServerName: server}})}
		if p.Hooks != HooksClaude {
			args = append(args, "--settings", compactJSON(map[string]any{"permissions": claudePermissions()}))
		}
		return args
	case MCPCodex:
		key := "mcp_servers." + wire.MCPServerName + "."
		// A JSON string or array of strings is also a valid TOML value.
		return []string{
			"-c", key + "command=" + compactJSON(pamBinary),
			"-c", key + "args=" + compactJSON([]string{"mcp"}),
			"-c", key + "env_vars=" + compactJSON(mcpEnv),
			"-c", key + `default_tools_approval_mode="approve"`,
		}
	default:
		return nil
	}
}

// GeminiDefaultsVar names gemini's variable for its system defaults file:
// the settings of lowest precedence, under the user's and the project's,
// whose mcpServers gemini merges with theirs server by server.
const GeminiDefaultsVar = "GEMINI_CLI_SYSTEM_DEFAULTS_PATH"

// GeminiDefaultsPath is the system defaults file gemini reads in the
// environment getenv reads: its variable, else system-defaults.json next
// to its system settings (GEMINI_CLI_SYSTEM_SETTINGS_PATH, else
// /etc/gemini-cli/settings.json).
func GeminiDefaultsPath(getenv func(string) string) string {
	if p := getenv(GeminiDefaultsVar); p != "" {
		return p
	}
	settings := getenv("GEMINI_CLI_SYSTEM_SETTINGS_PATH")
	if settings == "" {
		settings = "/etc/gemini-cli/settings.json"
	}
	return filepath.Join(filepath.Dir(settings), "system-defaults.json")
}

// GeminiSettings returns gemini settings that add pam's MCP server to
// base (the system defaults gemini would read otherwise; nil or empty
// for none), keeping everything else of base. pam's server is trusted, so
// its tools never ask (gemini still starts a stdio server only in a
// trusted folder). Gemini withholds variables named like secrets
// (*TOKEN*) from its MCP servers: pam mcp then reads the signal token from
// the run's dispatch file.
func GeminiSettings(base []byte, pamBinary string) ([]byte, error) {
	settings := map[string]any{}
	if len(strings.TrimSpace(string(base))) > 0 {
		if err := json.Unmarshal(base, &settings); err != nil {
			return nil, fmt.Errorf("gemini system defaults: %w", err)
		}
		if settings == nil {
			settings = map[string]any{}
		}
	}
	servers, _ := settings["mcpServers"].(map[string]any)
	if servers == nil {
		servers = map[string]any{}
	}
	server := mcpCommand(pamBinary)
	server["trust"] = true
	server["description"] = "pam's tools for the agent: this run's project's work items and progress"
	servers[wire.MCPServerName] = server
	settings["mcpServers"] = servers
	b, err := json.MarshalIndent(settings, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("gemini settings: %w", err)
	}
	return append(b, '\n'), nil
}

// GeminiTrusts reports why gemini would skip a system settings file at
// path, or nil: gemini reads one only when it and every folder above it
// belong to root and none is writable by group or others (a missing file
// is fine). So pam can hand gemini its settings only from a worker that
// runs as root, in a data dir no one else may write to.
func GeminiTrusts(path string) error {
	path, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	check := func(p string, dir bool) error {
		st, err := os.Stat(p)
		if errors.Is(err, os.ErrNotExist) && !dir {
			return nil
		}
		if err != nil {
			return err
		}
		sys, ok := st.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no owner to check", p)
		}
		if sys.Uid != 0 {
			return fmt.Errorf("%s belongs to uid %d, not root", p, sys.Uid)
		}
		if st.Mode().Perm()&0o022 != 0 {
			return fmt.Errorf("%s is writable by group or others (mode %o)", p, st.Mode().Perm())
		}
		return nil
	}
	chain := func(path string) error {
		if err := check(path, false); err != nil {
			return err
		}
		for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
			if err := check(dir, true); err != nil {
				return err
			}
			if dir == filepath.Dir(dir) {
				return nil
			}
		}
	}
	if err := chain(path); err != nil {
		return err
	}
	// Gemini checks the folders of the file's real path too.
	if real, err := filepath.EvalSymlinks(filepath.Dir(path)); err == nil && real != filepath.Dir(path) {
		return chain(filepath.Join(real, filepath.Base(path)))
	}
	return nil
}
