package wrap

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"pam/internal/datadir"
	"pam/internal/provider"
	"pam/internal/wire"
)

// pam's MCP server for the CLI (docs/architecture.md#pams-tools-for-the-agent):
// the CLI starts `pam mcp` itself, which inherits the run's variables
// from the CLI's environment. What a CLI reads from a file is written in
// the worker's data dir, never in the run's working directory.

// mcpDir is the folder of the MCP settings files, in the worker data dir.
const mcpDir = "mcp"

// maxGeminiDefaults bounds the system defaults file pam merges its server
// into.
const maxGeminiDefaults = 1 << 20

// MCPSettingsPath is the file of MCP settings a run's CLI reads, when its
// wiring takes one (gemini): <workerDataDir>/mcp/<runID>.json.
func MCPSettingsPath(workerDataDir, runID string) string {
	return filepath.Join(workerDataDir, mcpDir, runID+".json")
}

// mcpVars returns the variables that give the CLI pam's MCP server when
// it takes it from a file (gemini; the others take arguments,
// provider.MCPArgs). A gemini whose settings pam cannot hand over gets
// none, and the pane says why and what the operator can do instead.
func (w *wrapper) mcpVars(p provider.Provider, pam string, env []string) []string {
	if p.MCP != provider.MCPGemini {
		return nil
	}
	path, err := w.writeGeminiSettings(pam, env)
	if err != nil {
		w.printf("pam's tools are not given to gemini: %v; to give them to every gemini run on this host once: "+
			"gemini mcp add --scope user --trust %s %s mcp", err, wire.MCPServerName, pam)
		return nil
	}
	w.mcpFile = path
	return []string{provider.GeminiDefaultsVar + "=" + path}
}

// writeGeminiSettings writes gemini's system defaults with pam's server
// added to the run's MCP settings file, and returns its path. Gemini
// reads such a file only from root's folders that nobody else may write,
// so that is checked first; the defaults gemini would otherwise read are
// kept in it.
func (w *wrapper) writeGeminiSettings(pam string, env []string) (string, error) {
	path := MCPSettingsPath(w.o.WorkerDataDir, w.runID)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	if err := provider.GeminiTrusts(path); err != nil {
		return "", fmt.Errorf("gemini reads settings only from files of root's that nobody else may write, and %w", err)
	}
	getenv := func(k string) string { v, _ := lookupEnv(env, k); return v }
	base, err := readGeminiDefaults(provider.GeminiDefaultsPath(getenv))
	if err != nil {
		return "", err
	}
	data, err := provider.GeminiSettings(base, pam)
	if err != nil {
		return "", err
	}
	if err := datadir.ReplaceFile(path, data, 0o600); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return path, nil
}

// readGeminiDefaults reads the system defaults gemini would read without
// pam's file: none when there is no such file, or gemini would skip it.
func readGeminiDefaults(path string) ([]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("gemini's system defaults: %w", err)
	}
	defer f.Close()
	if provider.GeminiTrusts(path) != nil {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(f, maxGeminiDefaults+1))
	if err != nil {
		return nil, fmt.Errorf("gemini's system defaults %s: %w", path, err)
	}
	if len(b) > maxGeminiDefaults {
		return nil, fmt.Errorf("gemini's system defaults %s: larger than %d bytes", path, maxGeminiDefaults)
	}
	return b, nil
}

// removeMCPFile removes the run's MCP settings file, once the CLI that
// read it is gone.
func (w *wrapper) removeMCPFile() {
	if w.mcpFile != "" {
		_ = os.Remove(w.mcpFile)
	}
}

// lookupEnv finds key in env (KEY=value strings; the last one wins).
func lookupEnv(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}
