package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"

	"pam/internal/tmux"
)

// Files of <data>/worker (contract §4).
const (
	lockFile       = "worker.lock"
	noteFile       = "worker.json"
	instanceIDFile = "instance_id"
	dispatchDir    = "dispatch"
)

// Note is worker.json: who runs on this data dir. It is informative only;
// the flock on worker.lock is the proof of life.
type Note struct {
	PID        int       `json:"pid"`
	HostName   string    `json:"host_name"`
	InstanceID string    `json:"instance_id"`
	Executor   string    `json:"executor"`
	StartedAt  time.Time `json:"started_at"`
	Version    string    `json:"version"`
}

// writeFileAtomic replaces path with data: a temp file in the same
// folder, fsync, rename, fsync of the folder. Readers see the old or the
// new content, never a mix.
func writeFileAtomic(path string, data []byte, perm fs.FileMode) error {
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
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	ok = true
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

// loadInstanceID returns the worker's instance id, generating it on first
// start; it is reused forever after (§10). A file holding anything but a
// UUID is an error, never silently replaced: a new id would make the
// orchestrator see a reinstall (or a suspect twin).
func loadInstanceID(dir string) (string, error) {
	path := filepath.Join(dir, instanceIDFile)
	b, err := os.ReadFile(path)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if !tmux.ValidRunID(id) {
			return "", fmt.Errorf("%s holds %q, not a UUID; remove it only if this host is meant to register as a new installation", path, id)
		}
		return id, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("instance id: %w", err)
	}
	id := uuid.NewString()
	if err := writeFileAtomic(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("instance id: %w", err)
	}
	return id, nil
}

// writeNote writes worker.json.
func writeNote(dir string, n Note) error {
	b, err := json.MarshalIndent(n, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(dir, noteFile), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("worker.json: %w", err)
	}
	return nil
}
