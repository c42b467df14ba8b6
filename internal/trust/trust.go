// Package trust marks a folder trusted in an agent CLI's own
// configuration, the way the CLI records it when a person answers its
// folder-trust question (docs/agents.md#trust): Claude Code's
// projects[<path>].hasTrustDialogAccepted in ~/.claude.json, codex's
// [projects."<path>"] trust_level = "trusted" in ~/.codex/config.toml,
// gemini-cli's "<path>": "TRUST_FOLDER" in ~/.gemini/trustedFolders.json.
// pam does it for the worktrees it makes, and only for those, so that a
// run starts unattended.
//
// Every change is a locked read-modify-write that keeps everything else
// in the file: pam's own flock (<file>.pam-lock) orders pam's processes,
// the CLI's own lock (where it has one) keeps the CLI out meanwhile, the
// file is parsed, one key is set, the result is written to a temporary
// file in the same folder with the same mode, synced and renamed over
// the old one. A file that does not parse is left untouched and named
// in the error.
package trust

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"pam/internal/datadir"
)

// The CLIs whose trust pam knows how to record (a catalog entry's trust
// key).
const (
	Claude = "claude"
	Codex  = "codex"
	Gemini = "gemini"
)

// Kinds lists the known kinds.
func Kinds() []string { return []string{Claude, Codex, Gemini} }

// Known reports whether kind is one of Kinds.
func Known(kind string) bool { return slices.Contains(Kinds(), kind) }

// Options tune Mark; the zero value is what pam uses.
type Options struct {
	// LockTimeout bounds the wait for the locks; default 10 s.
	LockTimeout time.Duration
}

// ErrLocked is returned when a lock could not be had within the timeout.
var ErrLocked = errors.New("locked by another process")

// File returns the configuration file in which the CLI of kind records
// trust, for a CLI whose environment getenv reads (HOME, and the CLI's
// own variables that move its configuration).
func File(kind string, getenv func(string) string) (string, error) {
	home := getenv("HOME")
	need := func(dir, what string) error {
		if dir == "" || !filepath.IsAbs(dir) {
			return fmt.Errorf("%s: %s is not an absolute path (%q)", kind, what, dir)
		}
		return nil
	}
	switch kind {
	case Claude:
		// Claude Code reads <config dir>/.config.json when it exists
		// (an old layout), else .claude.json in CLAUDE_CONFIG_DIR or HOME.
		base := getenv("CLAUDE_CONFIG_DIR")
		what := "CLAUDE_CONFIG_DIR"
		if base == "" {
			base, what = home, "HOME"
		}
		if err := need(base, what); err != nil {
			return "", err
		}
		cfgDir := getenv("CLAUDE_CONFIG_DIR")
		if cfgDir == "" {
			cfgDir = filepath.Join(home, ".claude")
		}
		if legacy := filepath.Join(cfgDir, ".config.json"); exists(legacy) {
			return legacy, nil
		}
		return filepath.Join(base, ".claude.json"), nil
	case Codex:
		if h := getenv("CODEX_HOME"); h != "" {
			return filepath.Join(h, "config.toml"), need(h, "CODEX_HOME")
		}
		return filepath.Join(home, ".codex", "config.toml"), need(home, "HOME")
	case Gemini:
		if p := getenv("GEMINI_CLI_TRUSTED_FOLDERS_PATH"); p != "" {
			return p, need(p, "GEMINI_CLI_TRUSTED_FOLDERS_PATH")
		}
		if h := getenv("GEMINI_CLI_HOME"); h != "" {
			return filepath.Join(h, ".gemini", "trustedFolders.json"), need(h, "GEMINI_CLI_HOME")
		}
		return filepath.Join(home, ".gemini", "trustedFolders.json"), need(home, "HOME")
	}
	return "", fmt.Errorf("unknown trust kind %q (known: claude, codex, gemini)", kind)
}

// Mark records dir as trusted for the CLI of kind whose environment
// getenv reads, and returns the file it changed (or found already
// saying so). dir must be absolute; its real path (symbolic links
// resolved, as the CLI sees its working directory) is recorded, and dir
// as given too when that differs.
func Mark(kind string, getenv func(string) string, dir string, o Options) (string, error) {
	if !filepath.IsAbs(dir) {
		return "", fmt.Errorf("trust %s: %q is not an absolute path", kind, dir)
	}
	dir = filepath.Clean(dir)
	dirs := []string{dir}
	if real, err := filepath.EvalSymlinks(dir); err == nil && real != dir {
		dirs = []string{real, dir}
	}
	file, err := File(kind, getenv)
	if err != nil {
		return "", fmt.Errorf("trust: %w", err)
	}
	// Like the CLIs, a configuration file that is a symbolic link is
	// edited where it points.
	named := file
	if real, err := filepath.EvalSymlinks(file); err == nil {
		file = real
	}
	var edit func([]byte, []string) ([]byte, bool, error)
	var cliLock string
	switch kind {
	case Claude:
		// saveConfigWithLock: proper-lockfile's lockSync with the lock
		// directory named after the file's path as Claude names it.
		edit, cliLock = editClaude, named+".lock"
	case Codex:
		// codex takes no lock on config.toml.
		edit = editCodex
	case Gemini:
		// TrustedFolders.setValue: proper-lockfile's lock on the file,
		// whose lock directory is its real path + ".lock".
		edit, cliLock = editGemini, file+".lock"
	}
	if err := update(file, cliLock, o, func(b []byte) ([]byte, bool, error) { return edit(b, dirs) }); err != nil {
		return file, fmt.Errorf("trust %s: %s: %w", kind, file, err)
	}
	return file, nil
}

// update runs edit on the content of file (nil when it does not exist)
// under pam's flock and the CLI's lock directory (when cliLock is not
// empty), and replaces the file with what edit returns when it says it
// changed something.
func update(file, cliLock string, o Options, edit func([]byte) ([]byte, bool, error)) error {
	if o.LockTimeout <= 0 {
		o.LockTimeout = 10 * time.Second
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	deadline := time.Now().Add(o.LockTimeout)
	unlock, err := lockFile(file+".pam-lock", deadline)
	if err != nil {
		return err
	}
	defer unlock()
	if cliLock != "" {
		release, err := lockDir(cliLock, deadline)
		if err != nil {
			return err
		}
		defer release()
	}
	perm := fs.FileMode(0o600)
	old, err := os.ReadFile(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		old = nil
	case err != nil:
		return err
	default:
		if st, err := os.Stat(file); err == nil {
			perm = st.Mode().Perm()
		}
	}
	data, changed, err := edit(old)
	if err != nil || !changed {
		return err
	}
	return datadir.WriteFileAtomic(file, data, perm)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
