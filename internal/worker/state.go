package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"pam/internal/datadir"
	"pam/internal/wire"
)

// More files of <data>/worker (docs/architecture.md#configuration-and-files-on-disk).
const (
	runCacheFile = "runcache.json"
	failureFile  = "worker.log"
	// badDir holds worker files that could not be read, set aside so the
	// operator can look at them (the spool has its own spool/bad/).
	badDir = "bad"
	// maxFailureLog is the size past which worker.log is rotated to
	// worker.log.1 (one old file kept).
	maxFailureLog = 8 << 20
	// maxStateFile bounds what is read of worker.json and runcache.json.
	maxStateFile = 16 << 20
)

// failureLog is worker.log: failures no terminal or uplink could show —
// corrupt files set aside, signals the orchestrator will not take, orphans
// killed. Each line is also logged; worker.log is what is left when the
// worker's stderr went nowhere.
type failureLog struct {
	mu   sync.Mutex
	path string
}

// printf appends one timestamped line.
func (l *failureLog) printf(format string, args ...any) {
	line := fmt.Sprintf("%s %s\n", time.Now().UTC().Format(time.RFC3339), strings.TrimSpace(fmt.Sprintf(format, args...)))
	l.mu.Lock()
	defer l.mu.Unlock()
	if st, err := os.Stat(l.path); err == nil && st.Size()+int64(len(line)) > maxFailureLog {
		_ = os.Rename(l.path, l.path+".1")
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return // nowhere left to say it
	}
	defer f.Close()
	_, _ = f.WriteString(line)
}

// report says a failure both in the log and in worker.log.
func (w *agent) report(msg string, args ...any) {
	w.log.Warn(msg, args...)
	var b strings.Builder
	b.WriteString(msg)
	for i := 0; i+1 < len(args); i += 2 {
		fmt.Fprintf(&b, " %v=%q", args[i], fmt.Sprint(args[i+1]))
	}
	w.rs.failures.printf("%s", b.String())
}

// setAside moves an unreadable file into folder bad (created 0700) under a
// name that keeps the original and says when, and reports it. It never
// fails the caller: a file that cannot be moved is reported as such.
func (w *agent) setAside(path, bad string, why error) {
	if err := os.MkdirAll(bad, 0o700); err != nil {
		w.report("unreadable file left in place", "file", path, "err", why, "move_err", err)
		return
	}
	dst := filepath.Join(bad, filepath.Base(path)+"."+time.Now().UTC().Format("20060102T150405.000000000Z"))
	if err := os.Rename(path, dst); err != nil {
		w.report("unreadable file left in place", "file", path, "err", why, "move_err", err)
		return
	}
	w.report("unreadable file set aside", "file", path, "moved_to", dst, "err", why)
}

// readState reads a worker state file, bounded. A missing file is
// fs.ErrNotExist.
func readState(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxStateFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxStateFile {
		return nil, fmt.Errorf("larger than %d bytes", maxStateFile)
	}
	return b, nil
}

// decodeState decodes a whole state file strictly: one JSON object, no
// unknown fields, nothing after it.
func decodeState(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the JSON object")
	}
	return nil
}

// checkNote looks at the worker.json a previous worker left: one that
// does not parse is set aside (and reported) before this worker writes its
// own, so that whatever damaged it can still be looked at.
func (w *agent) checkNote() {
	path := filepath.Join(w.dir, noteFile)
	b, err := readState(path)
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	var n Note
	if err == nil {
		err = decodeState(b, &n)
	}
	if err == nil && n.PID <= 0 {
		err = errors.New("no pid")
	}
	if err != nil {
		w.setAside(path, filepath.Join(w.dir, badDir), err)
	}
}

// runCache is runcache.json: the desired runs of this host as the
// orchestrator last listed them (GET /api/internal/worker/runs), so that
// desired state survives a partition and a worker restart at once.
type runCache struct {
	FetchedAt time.Time        `json:"fetched_at"`
	HostID    string           `json:"host_id"`
	Runs      []wire.WorkerRun `json:"runs"`
}

// loadRunCache reads runcache.json; a corrupt one is set aside and
// reported, and reads as no cache.
func (w *agent) loadRunCache() (runCache, bool) {
	path := filepath.Join(w.dir, runCacheFile)
	b, err := readState(path)
	if errors.Is(err, fs.ErrNotExist) {
		return runCache{}, false
	}
	var c runCache
	if err == nil {
		err = decodeState(b, &c)
	}
	if err == nil {
		for _, r := range c.Runs {
			if _, perr := runName(r); perr != nil {
				err = perr
				break
			}
		}
	}
	if err != nil {
		w.setAside(path, filepath.Join(w.dir, badDir), err)
		return runCache{}, false
	}
	return c, true
}

// saveRunCache replaces runcache.json atomically.
func (w *agent) saveRunCache(c runCache) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := datadir.WriteFileAtomic(filepath.Join(w.dir, runCacheFile), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("runcache.json: %w", err)
	}
	return nil
}
