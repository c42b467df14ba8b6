package pamtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// CoverDirEnv names the variable that asks for the coverage of the pam
// processes tests start (make cover sets it): the binary is built with
// -cover and every process writes its counters there (GOCOVERDIR).
const CoverDirEnv = "PAM_COVERDIR"

// buildTimeout bounds the one build per test process; a cold -race build
// on a busy two-core machine takes minutes.
const buildTimeout = 15 * time.Minute

var (
	// buildEnv is the environment the test process started with: a test
	// that points HOME elsewhere (t.Setenv) must not send the build to an
	// empty cache.
	buildEnv = os.Environ()
	// cacheBase is where built binaries are kept between test processes,
	// resolved before any test changes HOME.
	cacheBase, cacheErr = os.UserCacheDir()

	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Pam returns the path of the pam binary, built once per test process
// from pam/cmd/pam: with -race when this test binary has it, and with
// -cover (every package of the module) when PAM_COVERDIR is set. The
// package's TestMain must call Main (or storetest.Main), which removes
// the process's copy of it.
func Pam(t testing.TB) string {
	t.Helper()
	mainMu.Lock()
	ok := inMain
	mainMu.Unlock()
	if !ok {
		t.Fatal("pamtest.Pam: the package's TestMain must call pamtest.Main or storetest.Main")
	}
	buildOnce.Do(func() { binPath, buildErr = build() })
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// BuildFlags are the go build flags of the pam binary: what Pam uses.
func BuildFlags() []string {
	var flags []string
	if raceEnabled {
		flags = append(flags, "-race")
	}
	if coverDir() != "" {
		flags = append(flags, "-cover", "-covermode="+coverMode(), "-coverpkg=pam/...")
	}
	return flags
}

// build links pam into a folder of the user's cache named after the
// module's folder and the flags, and copies it into a folder of this
// process. go build does not relink a binary whose build ID is current,
// so the test binaries of one `go test ./...` (and the next run, while
// nothing changed) share one link instead of each relinking a -race
// binary; another worktree gets its own folder. The build and the copy
// hold a lock on the folder: go build rewrites the file even when it does
// not relink, and no process may exec it half-written.
func build() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	mod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("build pam: go env GOMOD: %w", err)
	}
	if cacheErr != nil {
		return "", fmt.Errorf("build pam: %w", cacheErr)
	}
	flags := BuildFlags()
	key := sha256.Sum256([]byte(strings.TrimSpace(string(mod)) + "\x00" + strings.Join(flags, " ")))
	shared := filepath.Join(cacheBase, "pam-test", hex.EncodeToString(key[:8]))
	if err := os.MkdirAll(shared, 0o755); err != nil {
		return "", fmt.Errorf("build pam: %w", err)
	}
	unlock, err := lockDir(shared)
	if err != nil {
		return "", fmt.Errorf("build pam: %w", err)
	}
	defer unlock()
	built := filepath.Join(shared, "pam")
	args := append(append([]string{"build", "-o", built}, flags...), "pam/cmd/pam")
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Env = buildEnv
	start := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, b)
	}
	if d := time.Since(start); d > 30*time.Second {
		fmt.Fprintf(os.Stderr, "pamtest: go %s took %s\n", strings.Join(args, " "), d.Round(time.Second))
	}
	dir, err := os.MkdirTemp("", "pambin-")
	if err != nil {
		return "", fmt.Errorf("build pam: %w", err)
	}
	AtExit(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", fmt.Errorf("build pam: %w", err)
	}
	out := filepath.Join(dir, "pam")
	if err := copyFile(out, built); err != nil {
		return "", fmt.Errorf("build pam: %w", err)
	}
	return out, nil
}

// lockDir takes an exclusive lock on dir's lock file, waiting for it.
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return func() { f.Close() }, nil // closing releases the lock
}

// copyFile copies the executable src to dst.
func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return out.Close()
}

// coverDir is the absolute folder the processes' coverage goes to, or
// empty when none is wanted.
func coverDir() string {
	d := os.Getenv(CoverDirEnv)
	if d == "" {
		return ""
	}
	if abs, err := filepath.Abs(d); err == nil {
		return abs
	}
	return d
}

// coverMode matches the test binary's mode, since counters of one
// package in two modes cannot be merged.
func coverMode() string {
	if m := testing.CoverMode(); m != "" {
		return m
	}
	if raceEnabled {
		return "atomic"
	}
	return "set"
}
