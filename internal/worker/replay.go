package worker

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"pam/internal/spool"
	"pam/internal/wire"
	"pam/internal/wrap"
)

// replayTimeout bounds one replayed post.
const replayTimeout = 10 * time.Second

// connectReplayTimeout bounds the replay a (re)connect makes before it
// opens the uplink: a large spool or a slow orchestrator must not keep the
// host silent until it is judged offline. What is left then is replayed by
// the replay loop, after the heartbeats resumed.
const connectReplayTimeout = 30 * time.Second

// replayLoop drains the spool (docs/architecture.md#configuration-and-files-on-disk, docs/architecture.md#internal-api): when reconciliation asks,
// and every LivenessInterval while files wait (a look at an empty folder
// costs one ReadDir). The orchestrator may be reachable over HTTP before
// the uplink is back; replaying then is safe, since writers of a run with
// spooled signals spool behind them. Every (re)connect replays too, before
// the uplink opens (replayBeforeUplink).
func (w *agent) replayLoop(ctx context.Context) {
	t := time.NewTicker(w.o.LivenessInterval)
	defer t.Stop()
	for {
		w.replay(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-w.rs.replayWake:
		}
	}
}

// replayBeforeUplink replays the spool once registration succeeded and
// before the uplink opens, whose first frame is a heartbeat: the
// orchestrator judges this host's runs (spawn and CLI-hang timers, lost
// sessions, the reports reconciliation sends over the uplink) from the
// moment the host is back, so the signals written while it could not be
// reached — a finished, a started — must be in before it hears from the
// host again (the spool is replayed before live heartbeats resume:
// docs/architecture.md#spool-and-replay). Bounded by connectReplayTimeout.
func (w *agent) replayBeforeUplink(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, connectReplayTimeout)
	defer cancel()
	w.replay(ctx)
}

// replay posts the spooled signals in seq order, verbatim, each with the
// signal token it was made with (POST /api/internal/runs/{id}/signals), and
// deletes a file only on an answer that is not a transport failure, a 5xx,
// 401, 403 or 429. A transport failure, a 5xx or a 429 ends the pass (the
// orchestrator is not taking signals; the order is kept for the next
// pass). A 401 or 403 keeps the file and holds back the later signals of
// that run's attempt only, so that one bad token never blocks the others.
// Unreadable files are set aside in spool/bad and reported. One pass runs
// at a time (the replay loop's or a connect's), so that no file is posted
// twice by two passes at once.
func (w *agent) replay(ctx context.Context) {
	w.rs.replayMu.Lock()
	defer w.rs.replayMu.Unlock()
	st := &w.rs.replayed
	dir := spool.Dir(w.dir)
	files, bad, err := spool.List(dir)
	if err != nil {
		w.log.Warn("spool: list", "err", err)
		return
	}
	for _, b := range bad {
		w.setAside(b.Path, filepath.Join(dir, "bad"), b.Err)
	}
	if len(files) == 0 {
		return
	}
	start := time.Now()
	held := map[string]bool{}
	sent := 0
	for _, f := range files {
		if ctx.Err() != nil {
			return
		}
		key := runKey(f.RunID, *f.Signal.Attempt)
		if held[key] {
			continue
		}
		s := &wrap.Sender{Client: w.client.HTTP, APIURL: w.o.URL, Token: f.Token, RunID: f.RunID, TryTimeout: replayTimeout}
		res, err := s.Post(ctx, f.Signal)
		var we *wire.Error
		switch {
		case err != nil && ctx.Err() != nil:
			return // stopping, or the connect's time for it is up: not an outage
		case err == nil:
			st.paused = false
			w.log.Info("spooled signal replayed", "run_id", f.RunID, "attempt", *f.Signal.Attempt, "kind", f.Signal.Kind, "seq", f.Seq, "result", res)
		case !errors.As(err, &we) || we.Status >= 500 || we.Status == http.StatusTooManyRequests:
			level := slog.LevelDebug
			if !st.paused {
				level = slog.LevelWarn // once per outage
			}
			st.paused = true
			w.log.Log(ctx, level, "spool replay paused: the orchestrator is not taking signals", "err", err, "waiting", len(files)-sent)
			return
		case we.Status == http.StatusUnauthorized || we.Status == http.StatusForbidden:
			held[key] = true
			if !st.kept[f.Path] {
				st.kept[f.Path] = true
				w.report("spooled signal kept: its token was refused", "file", f.Path, "status", we.Status, "code", we.Code)
			}
			continue
		default:
			// Any other answer is final: the orchestrator has judged it.
			w.report("spooled signal refused by the orchestrator and dropped", "file", f.Path, "status", we.Status, "code", we.Code, "message", we.Message)
		}
		if err := removeFile(f.Path); err != nil {
			w.report("replayed spool file not removed", "file", f.Path, "err", err)
			return // replaying it again would be a duplicate; try later
		}
		sent++
	}
	if sent > 0 {
		w.log.Info("spool replayed", "signals", sent, "took", time.Since(start).Round(time.Millisecond))
	}
}

// replayState is what replay remembers between passes, so that an outage
// or a refused file is reported once, not on every pass.
type replayState struct {
	paused bool
	kept   map[string]bool // files kept after a 401/403, already reported
}

// removeFile deletes a replayed spool file; one already gone is fine.
func removeFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
