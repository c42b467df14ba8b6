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

	"pam/internal/datadir"
	"pam/internal/tmux"
)

// Files of <data>/worker (docs/architecture.md#configuration-and-files-on-disk).
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

// loadInstanceID returns the worker's instance id, generating it on first
// start; it is reused forever after (docs/architecture.md#internal-api). A file holding anything but a
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
	if err := datadir.WriteFileAtomic(path, []byte(id+"\n"), 0o600); err != nil {
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
	if err := datadir.WriteFileAtomic(filepath.Join(dir, noteFile), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("worker.json: %w", err)
	}
	return nil
}
