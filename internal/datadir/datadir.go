// Package datadir knows pam's files on disk (docs/architecture.md#configuration-and-files-on-disk): where the data
// and config dirs are on each platform, the operator token file, and the
// serve.lock that keeps one server per data dir.
package datadir

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gofrs/flock"
)

// DefaultDataDir is the platform data dir: /var/lib/pam for root,
// ~/.local/share/pam on Linux, ~/Library/Application Support/pam on macOS.
func DefaultDataDir() string { return DefaultDataDirIn(os.Getenv) }

// DefaultDataDirIn is DefaultDataDir for the environment getenv reads
// (HOME, XDG_DATA_HOME), for a caller that is not using the process's own
// (the command line's tests).
func DefaultDataDirIn(getenv func(string) string) string {
	if os.Geteuid() == 0 {
		return "/var/lib/pam"
	}
	home := getenv("HOME")
	if runtime.GOOS == "darwin" {
		return filepath.Join(home, "Library", "Application Support", "pam")
	}
	if x := getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "pam")
	}
	return filepath.Join(home, ".local", "share", "pam")
}

// DefaultConfigDir is ~/.config/pam on Linux and the data dir on macOS.
func DefaultConfigDir() string { return DefaultConfigDirIn(os.Getenv) }

// DefaultConfigDirIn is DefaultConfigDir for the environment getenv reads
// (HOME, XDG_CONFIG_HOME), as DefaultDataDirIn.
func DefaultConfigDirIn(getenv func(string) string) string {
	if runtime.GOOS == "darwin" {
		return DefaultDataDirIn(getenv)
	}
	if x := getenv("XDG_CONFIG_HOME"); x != "" {
		return filepath.Join(x, "pam")
	}
	return filepath.Join(getenv("HOME"), ".config", "pam")
}

// Ensure creates dir if needed and makes it private: 0700, or 0711 when the
// embedded database must traverse it as the postgres user.
func Ensure(dir string, traversable bool) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data dir %s: %w", dir, err)
	}
	mode := fs.FileMode(0o700)
	if traversable {
		mode = 0o711
	}
	if err := os.Chmod(dir, mode); err != nil {
		return fmt.Errorf("data dir %s: %w", dir, err)
	}
	return nil
}

var tokenRe = regexp.MustCompile(`^[0-9a-f]{32}$`)

// TokenPath is <data>/token.
func TokenPath(dir string) string { return filepath.Join(dir, "token") }

// NewToken makes an operator token: 16 random bytes as 32 lowercase hex.
func NewToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("make the operator token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// WriteToken replaces <data>/token with tok (0600), atomically: the
// operator's CLI reads the old token or the new one, never a torn file.
// The token is the database's; this file is the local copy serve keeps in
// sync when it becomes active.
func WriteToken(dir, tok string) error {
	if !ValidToken(tok) {
		return errors.New("write token file: not 32 lowercase hex characters")
	}
	if err := WriteFileAtomic(TokenPath(dir), []byte(tok+"\n"), 0o600); err != nil {
		return fmt.Errorf("write token file: %w", err)
	}
	return nil
}

// ReadToken reads and validates <data>/token, repairing a too-open mode.
func ReadToken(dir string) (string, error) {
	p := TokenPath(dir)
	b, err := os.ReadFile(p)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if !tokenRe.MatchString(tok) {
		return "", fmt.Errorf("token file %s does not hold 32 lowercase hex characters; remove it to have a new one made", p)
	}
	if st, err := os.Stat(p); err == nil && st.Mode().Perm() != 0o600 {
		_ = os.Chmod(p, 0o600)
	}
	return tok, nil
}

// ValidToken reports whether s has the operator token's shape.
func ValidToken(s string) bool { return tokenRe.MatchString(s) }

// Lock is a held flock on a lock file.
type Lock struct{ fl *flock.Flock }

// ErrLocked is returned when another process holds the lock.
var ErrLocked = errors.New("locked by another process")

// lockSettle bounds how long TryLock waits for a lock whose recorded
// holder is gone (see TryLock).
const lockSettle = 3 * time.Second

// TryLock takes the flock at path without waiting for a live holder,
// writing our pid into the file for the operator's benefit (the flock, not
// the pid, is the proof).
//
// A holder killed with SIGKILL releases the lock when its last descriptor
// closes, and for a moment that may be a child it was starting (a forked
// child keeps the descriptor until its exec closes it). So when the pid
// in the file is not a running process the lock is tried again for up to
// lockSettle; a running holder is reported at once.
func TryLock(path string) (*Lock, error) {
	fl := flock.New(path, flock.SetFlag(os.O_CREATE|os.O_RDWR), flock.SetPermissions(0o600))
	deadline := time.Now().Add(lockSettle)
	for {
		ok, err := fl.TryLock()
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if ok {
			break
		}
		pid := holderPID(path)
		if running(pid) || time.Now().After(deadline) {
			return nil, fmt.Errorf("%s is %w (pid %s)", path, ErrLocked, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A flock belongs to its open file description, so writing the pid
	// through another descriptor leaves the lock in place.
	_ = os.WriteFile(path, []byte(fmt.Sprintf("%d\n", os.Getpid())), 0o600)
	return &Lock{fl: fl}, nil
}

// running reports whether pid names a process that exists.
func running(pid string) bool {
	n, err := strconv.Atoi(pid)
	if err != nil || n <= 0 {
		return false
	}
	err = syscall.Kill(n, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Unlock releases the lock.
func (l *Lock) Unlock() error { return l.fl.Unlock() }

// holderPID reads the pid the lock's holder wrote. A holder that has just
// taken the lock may not have written it yet: wait for it briefly, so
// that two processes started together still name each other.
func holderPID(path string) string {
	for range 50 {
		b, _ := os.ReadFile(path)
		if pid := strings.TrimSpace(string(b)); pid != "" {
			return pid
		}
		time.Sleep(2 * time.Millisecond)
	}
	return "unknown"
}

// WriteFileAtomic replaces path with data: a temp file in the same
// folder, fsync, rename, fsync of the folder. Readers see the old or the
// new content, never a mix.
func WriteFileAtomic(path string, data []byte, perm fs.FileMode) error {
	return writeFile(path, data, perm, true)
}

// ReplaceFile replaces path with data like WriteFileAtomic, readers
// seeing the old or the new content, but without the fsyncs: for a file
// that only matters while the host stays up (a run's dispatch file is
// read by its wrapper moments later, and a host that loses power loses
// the run's session with it), where the fsyncs are milliseconds on the
// path that starts a run.
func ReplaceFile(path string, data []byte, perm fs.FileMode) error {
	return writeFile(path, data, perm, false)
}

func writeFile(path string, data []byte, perm fs.FileMode, durable bool) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if durable {
		if err := f.Sync(); err != nil {
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	ok = true
	if !durable {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
