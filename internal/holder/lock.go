package holder

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Ownership (docs/architecture.md#the-pty-holder): one holder per name
// and one live run per workspace, each a kernel-held flock the kernel
// drops however the holder ends. A pid or a socket file is never proof:
// pids are reused and socket files outlive their listeners.

// ErrHeld is returned when a name or a workspace has a live holder.
var ErrHeld = errors.New("held by a live holder")

// flock is a held lock file. Its descriptor is close-on-exec (Go opens
// every file so), so the program on the PTY never inherits it: a killed
// holder's lock is free at once even while its program lingers.
type flock struct{ f *os.File }

// tryFlock takes an exclusive flock on path without waiting, and then
// writes who in it (for the error a loser prints; the flock is the
// proof). When the lock is held it returns ErrHeld with what the holder
// wrote.
func tryFlock(path, who string) (*flock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			b, _ := os.ReadFile(path)
			holder := strings.TrimSpace(string(b))
			if holder == "" {
				holder = "a holder that is starting"
			}
			return nil, fmt.Errorf("%w (%s)", ErrHeld, holder)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(who+"\n"), 0)
	}
	return &flock{f: f}, nil
}

// release drops the lock (closing the descriptor releases the flock).
func (l *flock) release() {
	if l != nil {
		_ = l.f.Close()
	}
}

// Workspace resolves a run's working directory to the full path that
// names its workspace: absolute, symbolic links followed, so that two
// spellings of one checkout are one workspace and another checkout is
// another.
func Workspace(cwd string) (string, error) {
	abs, err := filepath.Abs(cwd)
	if err != nil {
		return "", fmt.Errorf("workspace %s: %w", cwd, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("workspace %s: %w", cwd, err)
	}
	return real, nil
}

// workspaceLockPath is the lock file of a workspace: named by a hash of
// its full path, so any path makes a safe file name.
func workspaceLockPath(dir, workspace string) string {
	sum := sha256.Sum256([]byte(workspace))
	return filepath.Join(dir, "ws-"+hex.EncodeToString(sum[:8])+".lock")
}
