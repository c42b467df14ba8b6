package holder

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	"pam/internal/datadir"
)

// The files of one holder, beside its socket in the holders folder
// (docs/architecture.md#the-pty-holder):
//
//	<name>.sock   the socket readers connect to (0600)
//	<name>.lock   the flock that makes one holder per name
//	<name>.json   the whole-file note: who holds the PTY
//	<name>.jsonl  one complete line per event, appended as it happens
//	<name>.log    failures no terminal could show
//	ws-<hash>.lock  the flock that makes one live run per workspace

var nameRe = regexp.MustCompile(`^pam-[0-9a-f]{8}$`)

// ValidName reports whether s may name a holder: ^pam-[0-9a-f]{8}$, the
// session names of pam's runs. Nothing else ever becomes a file name.
func ValidName(s string) bool { return nameRe.MatchString(s) }

// SocketPath is where the holder called name listens.
func SocketPath(dir, name string) string { return filepath.Join(dir, name+".sock") }

// NotePath is the holder's whole-file note.
func NotePath(dir, name string) string { return filepath.Join(dir, name+".json") }

// EventsPath is the holder's event journal.
func EventsPath(dir, name string) string { return filepath.Join(dir, name+".jsonl") }

// LogPath is the holder's failure log.
func LogPath(dir, name string) string { return filepath.Join(dir, name+".log") }

func lockPath(dir, name string) string { return filepath.Join(dir, name+".lock") }

// Note is the whole-file note of a holder, replaced atomically: a reader
// sees a complete note or none.
type Note struct {
	Name      string    `json:"name"`
	PID       int       `json:"pid"`
	ChildPID  int       `json:"child_pid"`
	RunID     string    `json:"run_id,omitempty"`
	Attempt   int       `json:"attempt,omitempty"`
	Instance  string    `json:"instance,omitempty"`
	Cwd       string    `json:"cwd"`
	Term      string    `json:"term"`
	StartedAt time.Time `json:"started_at"`
}

func writeNote(dir string, n Note) error {
	b, err := json.MarshalIndent(n, "", "  ")
	if err != nil {
		return err
	}
	if err := datadir.WriteFileAtomic(NotePath(dir, n.Name), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write note: %w", err)
	}
	return nil
}

// ReadNote reads the note of the holder called name.
func ReadNote(dir, name string) (Note, error) {
	if !ValidName(name) {
		return Note{}, fmt.Errorf("holder name %q: want pam-<8 lowercase hex>", name)
	}
	b, err := os.ReadFile(NotePath(dir, name))
	if err != nil {
		return Note{}, err
	}
	var n Note
	if err := json.Unmarshal(b, &n); err != nil {
		return Note{}, fmt.Errorf("note of %s: %w", name, err)
	}
	return n, nil
}

// Event is one line of a holder's journal.
type Event struct {
	Time  time.Time `json:"time"`
	Event string    `json:"event"`
	// The fields below are set by the events that have them.
	PID      int    `json:"pid,omitempty"`
	ChildPID int    `json:"child_pid,omitempty"`
	RunID    string `json:"run_id,omitempty"`
	Attempt  int    `json:"attempt,omitempty"`
	Reader   int    `json:"reader,omitempty"`
	Rows     int    `json:"rows,omitempty"`
	Cols     int    `json:"cols,omitempty"`
	Code     *int   `json:"code,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

// journal appends events to <name>.jsonl, one write per complete line,
// so an abrupt end leaves every earlier line whole.
type journal struct {
	mu sync.Mutex
	f  *os.File
}

func openJournal(dir, name string) (*journal, error) {
	f, err := os.OpenFile(EventsPath(dir, name), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open journal: %w", err)
	}
	return &journal{f: f}, nil
}

// add writes one event; a failure is returned for the log, never fatal.
func (j *journal) add(e Event) error {
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	_, err = j.f.Write(append(b, '\n'))
	return err
}

func (j *journal) close() error { return j.f.Close() }

// ReadEvents reads a holder's journal. A last line without its newline
// (the holder died while writing it) or one that is not JSON is skipped:
// every complete line before it is returned.
func ReadEvents(path string) ([]Event, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if i := bytes.LastIndexByte(b, '\n'); i < len(b)-1 {
		b = b[:i+1] // torn last line
	}
	var out []Event
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			continue
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("read %s: %w", path, err)
	}
	return out, nil
}

// errLog is the holder's <name>.log: appended lines, each whole.
type errLog struct {
	mu sync.Mutex
	f  *os.File
}

func openErrLog(dir, name string) (*errLog, error) {
	f, err := os.OpenFile(LogPath(dir, name), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	return &errLog{f: f}, nil
}

// Write implements io.Writer for a slog handler: one call, one line.
func (l *errLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Write(p)
}

func (l *errLog) close() error { return l.f.Close() }

// isNotExist reports a missing file, whatever wrapped it.
func isNotExist(err error) bool { return errors.Is(err, os.ErrNotExist) }
