// Package spool keeps the signals that could not be delivered to the
// orchestrator (docs/architecture.md#configuration-and-files-on-disk): one file per signal in <worker data
// dir>/spool/, named <seq>-<run_id>-<attempt>-<kind>.json, where <seq> is a
// per-host counter kept under a lock (never the wall clock) and zero-padded
// so that names sort in seq order. The wrapper, `pam hook` and the worker
// write here; only the worker replays, in seq order, verbatim.
//
// Files are created atomically (temp file in the same folder, fsync,
// rename, fsync of the folder), so a reader never sees half a signal.
package spool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofrs/flock"
	"github.com/google/uuid"

	"pam/internal/datadir"
	"pam/internal/wire"
)

// DefaultCap is how many signal files the spool holds before Write starts
// dropping the oldest progress signals.
const DefaultCap = 10000

// maxFile bounds one spool file: a signal is at most a 1 MiB frame.
const maxFile = 2 << 20

// lockTimeout bounds the wait for the spool lock; the lock is only ever
// held for one file write.
const lockTimeout = 30 * time.Second

// ErrFull is returned by Write for a progress signal when the spool is at
// its cap and holds nothing but one-shot signals, which are never dropped.
var ErrFull = errors.New("spool full")

// Entry is one spooled signal: the signal exactly as it was (or would have
// been) posted, and what is needed to post it again.
type Entry struct {
	RunID  string      `json:"run_id"`
	Signal wire.Signal `json:"signal"`
	// Token is the signal token the signal was made with; replay sends it
	// unchanged.
	Token     string    `json:"token"`
	APIURL    string    `json:"api_url"`
	SpooledAt time.Time `json:"spooled_at"`
}

// File is an Entry read back from the spool.
type File struct {
	Entry
	Seq  uint64
	Path string
}

// Bad is a file in the spool that could not be read as a signal.
type Bad struct {
	Path string
	Err  error
}

// Dir is the spool folder of a worker data dir.
func Dir(workerDataDir string) string { return filepath.Join(workerDataDir, "spool") }

// nameRe matches a spool file name: seq, run id, attempt (1 or more,
// without leading zeros), kind.
var nameRe = regexp.MustCompile(`^([0-9]{20})-([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})-([1-9][0-9]*)-([a-z_]+)\.json$`)

// name is a parsed spool file name.
type name struct {
	seq     uint64
	runID   string
	attempt int
	kind    string
}

// parseName takes only the names Write makes: a name is listed, read and
// deleted as n.String(), so a name that does not print back as itself
// (an attempt 0 or 01) would stand for another file, or for none, and
// hold its run's signals in the spool for ever.
func parseName(s string) (name, bool) {
	m := nameRe.FindStringSubmatch(s)
	if m == nil {
		return name{}, false
	}
	seq, err1 := strconv.ParseUint(m[1], 10, 64)
	att, err2 := strconv.Atoi(m[3])
	if err1 != nil || err2 != nil || !validKind(m[4]) {
		return name{}, false
	}
	n := name{seq: seq, runID: m[2], attempt: att, kind: m[4]}
	if n.String() != s {
		return name{}, false
	}
	return n, true
}

func (n name) String() string {
	return fmt.Sprintf("%020d-%s-%d-%s.json", n.seq, n.runID, n.attempt, n.kind)
}

func validKind(k string) bool { return wire.IsSignalKind(k) }

// check validates e and returns its canonical run id.
func (e *Entry) check() (string, error) {
	id, err := uuid.Parse(e.RunID)
	if err != nil || len(e.RunID) != 36 {
		return "", fmt.Errorf("run id %q is not a UUID", e.RunID)
	}
	if !validKind(e.Signal.Kind) {
		return "", fmt.Errorf("signal kind %q is not one of %s", e.Signal.Kind, wire.SignalKindList)
	}
	if e.Signal.Attempt == nil || *e.Signal.Attempt < 1 {
		return "", errors.New("signal has no attempt")
	}
	return id.String(), nil
}

// Write spools e into dir (the spool folder, see Dir), creating it 0700
// if needed, and returns the new file's path. The run id must be a UUID,
// the kind a signal kind and the attempt set. SpooledAt is filled in when
// zero. Beyond DefaultCap files the oldest progress signals are dropped
// first; one-shot kinds never are.
func Write(dir string, e Entry) (string, error) { return WriteCap(dir, e, DefaultCap) }

// WriteCap is Write with another cap (at least 1).
func WriteCap(dir string, e Entry, limit int) (string, error) {
	runID, err := e.check()
	if err != nil {
		return "", fmt.Errorf("spool signal: %w", err)
	}
	e.RunID = runID
	if e.SpooledAt.IsZero() {
		e.SpooledAt = time.Now().UTC()
	}
	data, err := json.Marshal(e)
	if err != nil {
		return "", fmt.Errorf("spool signal: %w", err)
	}
	if len(data) > maxFile {
		return "", fmt.Errorf("spool signal: %d bytes is too large", len(data))
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("spool: %w", err)
	}
	unlock, err := lock(dir)
	if err != nil {
		return "", err
	}
	defer unlock()

	names, err := readNames(dir)
	if err != nil {
		return "", err
	}
	if limit < 1 {
		limit = 1
	}
	if len(names) >= limit {
		if names, err = makeRoom(dir, names, limit-1); err != nil {
			return "", err
		}
		if len(names) >= limit && e.Signal.Kind == wire.SignalProgress {
			return "", fmt.Errorf("spool %s holds %d one-shot signals: %w", dir, len(names), ErrFull)
		}
	}
	seq, err := nextSeq(dir, names)
	if err != nil {
		return "", err
	}
	n := name{seq: seq, runID: runID, attempt: *e.Signal.Attempt, kind: e.Signal.Kind}
	path := filepath.Join(dir, n.String())
	if err := datadir.WriteFileAtomic(path, data, 0o600); err != nil {
		return "", fmt.Errorf("spool: %w", err)
	}
	return path, nil
}

// makeRoom deletes the oldest progress signals until at most keep files
// remain (or no progress signal is left), returning the names left.
func makeRoom(dir string, names []name, keep int) ([]name, error) {
	out := names[:0:0]
	drop := len(names) - keep
	for _, n := range names {
		if drop > 0 && n.kind == wire.SignalProgress {
			if err := os.Remove(filepath.Join(dir, n.String())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("spool: drop oldest progress signal: %w", err)
			}
			drop--
			continue
		}
		out = append(out, n)
	}
	return out, nil
}

// lock takes the spool's flock (spool/.lock), waiting at most lockTimeout.
// Each call opens its own handle, so goroutines of one process exclude
// each other as other processes do.
func lock(dir string) (func(), error) {
	fl := flock.New(filepath.Join(dir, ".lock"), flock.SetFlag(os.O_CREATE|os.O_RDWR), flock.SetPermissions(0o600))
	ctx, cancel := context.WithTimeout(context.Background(), lockTimeout)
	defer cancel()
	ok, err := fl.TryLockContext(ctx, 2*time.Millisecond)
	if err != nil || !ok {
		fl.Close()
		return nil, fmt.Errorf("spool lock %s: %w", fl.Path(), err)
	}
	return func() { _ = fl.Close() }, nil
}

// nextSeq increments the counter in spool/.seq; the caller holds the lock.
// A missing or damaged counter restarts above the highest seq on disk, so
// the order of the files already spooled always holds.
func nextSeq(dir string, names []name) (uint64, error) {
	seqPath := filepath.Join(dir, ".seq")
	var cur uint64
	b, err := os.ReadFile(seqPath)
	if err == nil {
		cur, err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		cur = 0 // damaged: rebuilt from the files below
	}
	for _, n := range names {
		cur = max(cur, n.seq)
	}
	next := cur + 1
	if err := datadir.WriteFileAtomic(seqPath, []byte(strconv.FormatUint(next, 10)+"\n"), 0o600); err != nil {
		return 0, fmt.Errorf("spool counter: %w", err)
	}
	return next, nil
}

// readNames lists the signal files of dir in seq order; other names (the
// lock, the counter, temp files, strays) are left out.
func readNames(dir string) ([]name, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	var out []name
	for _, de := range ents {
		if n, ok := parseName(de.Name()); ok && de.Type().IsRegular() {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b name) int {
		switch {
		case a.seq < b.seq:
			return -1
		case a.seq > b.seq:
			return 1
		}
		return strings.Compare(a.String(), b.String())
	})
	return out, nil
}

// List reads every signal file of dir in seq order. Files that cannot be
// read as a signal, or whose content disagrees with their name, are
// returned apart in bad rather than failing the listing; what to do with
// them is the caller's decision. A missing dir is an empty spool.
func List(dir string) (files []File, bad []Bad, err error) {
	names, err := readNames(dir)
	if err != nil {
		return nil, nil, err
	}
	for _, n := range names {
		path := filepath.Join(dir, n.String())
		e, err := readEntry(path, n)
		if errors.Is(err, fs.ErrNotExist) {
			continue // replayed and deleted meanwhile
		}
		if err != nil {
			bad = append(bad, Bad{Path: path, Err: err})
			continue
		}
		files = append(files, File{Entry: e, Seq: n.seq, Path: path})
	}
	return files, bad, nil
}

func readEntry(path string, n name) (Entry, error) {
	f, err := os.Open(path)
	if err != nil {
		return Entry{}, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		return Entry{}, err
	}
	return decodeEntry(data, n)
}

// decodeEntry reads the content of the spool file named n: a whole
// signal that agrees with its name, or an error (a torn or foreign file).
func decodeEntry(data []byte, n name) (Entry, error) {
	if len(data) > maxFile {
		return Entry{}, fmt.Errorf("larger than %d bytes", maxFile)
	}
	var e Entry
	if err := json.Unmarshal(data, &e); err != nil {
		return Entry{}, fmt.Errorf("not a spooled signal: %w", err)
	}
	if _, err := e.check(); err != nil {
		return Entry{}, err
	}
	if e.RunID != n.runID || *e.Signal.Attempt != n.attempt || e.Signal.Kind != n.kind {
		return Entry{}, fmt.Errorf("content (run %s attempt %d %s) disagrees with the file name", e.RunID, *e.Signal.Attempt, e.Signal.Kind)
	}
	return e, nil
}

// HasPending reports whether dir holds a signal of the run's attempt. A
// writer that finds one spools its next signal too instead of posting it,
// so that the run's signals keep their order. An unreadable spool reads as
// empty.
func HasPending(dir, runID string, attempt int) bool {
	id, err := uuid.Parse(runID)
	if err != nil {
		return false
	}
	names, err := readNames(dir)
	if err != nil {
		return false
	}
	canon := id.String()
	return slices.ContainsFunc(names, func(n name) bool { return n.runID == canon && n.attempt == attempt })
}
