package holder

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"pam/internal/eventually"
)

// TestPruneDeadHolderFiles: what a holder killed long ago left (events,
// log, name lock, its workspace's lock) is removed; a live holder's
// files, old as they may be, and a recently dead holder's files stay.
func TestPruneDeadHolderFiles(t *testing.T) {
	f := newFixture(t)
	f.start(f.spec("pam-000000a1", f.ws, "__sleep"))
	oldWS, recentWS := t.TempDir(), t.TempDir()
	killed := func(name, ws string) {
		pid := f.start(f.spec(name, ws, "__sleep"))
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		eventually.Wait(t, eventually.Medium, "the holder to die", func() bool { return processGone(pid) && !listening(f.dir, name) })
		Sweep(f.dir, name)
	}
	killed("pam-000000b2", oldWS)
	killed("pam-000000c3", recentWS)

	ents, err := os.ReadDir(f.dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	long := now.Add(-48 * time.Hour)
	recentReal, _ := Workspace(recentWS)
	for _, e := range ents {
		p := filepath.Join(f.dir, e.Name())
		// Everything is old but the recently dead holder's files.
		if strings.HasPrefix(e.Name(), "pam-000000c3") || p == workspaceLockPath(f.dir, recentReal) {
			continue
		}
		if err := os.Chtimes(p, long, long); err != nil {
			t.Fatal(err)
		}
	}
	mustExist := func(paths ...string) {
		t.Helper()
		for _, p := range paths {
			if _, err := os.Stat(p); err != nil {
				t.Errorf("%s: %v", filepath.Base(p), err)
			}
		}
	}
	mustExist(EventsPath(f.dir, "pam-000000b2"), LogPath(f.dir, "pam-000000b2"), lockPath(f.dir, "pam-000000b2"))

	n := Prune(f.dir, 24*time.Hour, now)

	for _, p := range []string{EventsPath(f.dir, "pam-000000b2"), LogPath(f.dir, "pam-000000b2"), lockPath(f.dir, "pam-000000b2")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s of a holder dead for two days is still there (%v)", filepath.Base(p), err)
		}
	}
	oldWSReal, _ := Workspace(oldWS)
	if _, err := os.Stat(workspaceLockPath(f.dir, oldWSReal)); !os.IsNotExist(err) {
		t.Errorf("the lock of a workspace unused for two days is still there (%v)", err)
	}
	mustExist(NotePath(f.dir, "pam-000000a1"), SocketPath(f.dir, "pam-000000a1"), EventsPath(f.dir, "pam-000000a1"), lockPath(f.dir, "pam-000000a1"))
	liveWS, _ := Workspace(f.ws)
	mustExist(workspaceLockPath(f.dir, liveWS))
	mustExist(EventsPath(f.dir, "pam-000000c3"), lockPath(f.dir, "pam-000000c3"), workspaceLockPath(f.dir, recentReal))
	if _, ok := Alive(f.dir, "pam-000000a1"); !ok {
		t.Error("the live holder is no longer alive")
	}
	if n != 2 {
		t.Errorf("Prune removed %d sets, want 2 (the dead holder's and its workspace's)", n)
	}
}
