package worker

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"

	"pam/internal/lifecycle"
	"pam/internal/wire"
)

// cleanRunLogs removes the pane logs (<data>/runs/<run_id>.log and its
// rotated .log.1) of runs that ended more than RunLogRetention ago
// (docs/architecture.md#bounded-journal), so that the disk does not
// fill with the logs of every run the host ever ran. A log is a
// candidate only once it has not been written for RunLogRetention (a
// live run's pane changes, so its log keeps moving); then the
// orchestrator is asked about its run: a run this host holds, a live
// run, or one the orchestrator could not be asked about keeps its log;
// an ended run's goes once its end is past the retention, and so does
// the log of a run the orchestrator does not know.
func (w *agent) cleanRunLogs(ctx context.Context) {
	dir := filepath.Join(w.o.DataDir, "runs")
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			w.log.Warn("run logs: list", "err", err)
		}
		return
	}
	now := w.now()
	// The newest write of each run's log files, by run id.
	newest := map[string]time.Time{}
	files := map[string][]string{}
	for _, e := range entries {
		id, ok := runLogID(e.Name())
		if !ok || !e.Type().IsRegular() {
			continue // not a run log: never touched
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		if info.ModTime().After(newest[id]) {
			newest[id] = info.ModTime()
		}
		files[id] = append(files[id], filepath.Join(dir, e.Name()))
	}
	for id, at := range newest {
		if ctx.Err() != nil {
			return
		}
		if now.Sub(at) < w.o.RunLogRetention || w.holds(id) {
			continue
		}
		wr, err := w.lookupRun(ctx, id)
		switch {
		case wire.HasCode(err, wire.CodeNotFound):
		case err != nil:
			w.log.Debug("run logs: run not looked up; log kept", "run_id", id, "err", err)
			continue
		case lifecycle.Active(wr.Status):
			continue
		case wr.FinishedAt != nil && now.Sub(*wr.FinishedAt) < w.o.RunLogRetention:
			continue
		}
		if w.holds(id) {
			continue // taken since the list: never a live run's
		}
		for _, path := range files[id] {
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				w.log.Warn("run logs: remove", "path", path, "err", err)
				continue
			}
		}
		w.log.Info("run log removed", "run_id", id, "retention", w.o.RunLogRetention)
	}
}

// runLogID is the run id a run log's file name carries: <run_id>.log or
// <run_id>.log.1, with a canonical UUID; ok is false for any other name.
func runLogID(name string) (string, bool) {
	base, ok := strings.CutSuffix(name, ".log")
	if !ok {
		base, ok = strings.CutSuffix(name, ".log.1")
	}
	if !ok {
		return "", false
	}
	id, err := uuid.Parse(base)
	if err != nil || id.String() != base {
		return "", false
	}
	return base, true
}
