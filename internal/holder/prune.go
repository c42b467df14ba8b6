package holder

import (
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Prune removes what holders that ended long ago left in dir: a dead
// holder's events, error log and name lock (Sweep already removed its
// socket and note), and the locks of workspaces no run has held since.
// A file set goes only when every file of it is older than age and its
// lock can be taken, so a live or starting holder never loses a file;
// the lock file is unlinked while held, and names are per run, so nobody
// is waiting to open it again. It returns how many sets it removed.
func Prune(dir string, age time.Duration, now time.Time) int {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	old := func(path string) bool {
		fi, err := os.Stat(path)
		return os.IsNotExist(err) || (err == nil && now.Sub(fi.ModTime()) > age)
	}
	removed := 0
	for _, e := range ents {
		base, ok := strings.CutSuffix(e.Name(), ".lock")
		if !ok || e.IsDir() {
			continue
		}
		var files []string
		switch {
		case ValidName(base):
			files = []string{EventsPath(dir, base), LogPath(dir, base), SocketPath(dir, base), NotePath(dir, base)}
		case strings.HasPrefix(base, "ws-"):
		default:
			continue
		}
		lock := filepath.Join(dir, e.Name())
		if !old(lock) {
			continue
		}
		stale := true
		for _, f := range files {
			stale = stale && old(f)
		}
		if !stale {
			continue
		}
		l, err := tryFlock(lock, "pruning")
		if err != nil {
			continue
		}
		for _, f := range files {
			_ = os.Remove(f)
		}
		_ = os.Remove(lock)
		l.release()
		removed++
	}
	return removed
}
