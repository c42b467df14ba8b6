package trust

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/gofrs/flock"
)

// lockPoll is how often a held lock is tried again.
const lockPoll = 20 * time.Millisecond

// lockFile takes pam's flock on path (created when missing), waiting
// until deadline; it returns the release.
func lockFile(path string, deadline time.Time) (func(), error) {
	fl := flock.New(path, flock.SetPermissions(0o600))
	for {
		ok, err := fl.TryLock()
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if ok {
			return func() { _ = fl.Unlock() }, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("lock %s: %w", path, ErrLocked)
		}
		time.Sleep(lockPoll)
	}
}

// cliLockStale is when a CLI's lock directory is taken to be left over
// by a process that died holding it: proper-lockfile's default (10 s),
// which the CLIs use. Its holder refreshes the directory's mtime well
// within that while it holds it.
const cliLockStale = 10 * time.Second

// lockDir takes a lock the way proper-lockfile (the Node module Claude
// Code and gemini-cli lock their configuration with) does: mkdir of the
// lock directory succeeds for one process at a time; a directory older
// than cliLockStale is stale and removed. It waits until deadline and
// returns the release, which removes the directory.
func lockDir(path string, deadline time.Time) (func(), error) {
	for {
		err := os.Mkdir(path, 0o755)
		if err == nil {
			return func() { _ = os.Remove(path) }, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if st, err := os.Stat(path); err == nil && time.Since(st.ModTime()) > cliLockStale {
			// Left by a process that died holding it; like
			// proper-lockfile, take it over.
			_ = os.Remove(path)
			continue
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("lock %s (the CLI's own): %w", path, ErrLocked)
		}
		time.Sleep(lockPoll)
	}
}
