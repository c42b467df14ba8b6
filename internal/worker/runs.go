package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/coder/websocket"

	"pam/internal/datadir"
	"pam/internal/tmux"
	"pam/internal/wire"
	"pam/internal/wrap"
)

// handle acts on one frame from the orchestrator. Nothing it receives
// ends the uplink: a malformed or unexpected frame is logged and dropped.
func (w *agent) handle(ctx context.Context, conn *websocket.Conn, data []byte) {
	f, err := wire.DecodeFrame(data)
	if f == nil {
		w.log.Warn("malformed frame from the orchestrator dropped", "err", err, "bytes", len(data))
		return
	}
	if err == nil {
		err = f.Validate()
	}
	if err != nil {
		w.refuseInvalid(conn, f, err)
		return
	}
	if !orchestratorFrames.Handle(inbound{w: w, conn: conn}, ctx, f) {
		w.log.Warn("unexpected frame type from the orchestrator dropped", "type", f.Type())
	}
}

// inbound is where a frame from the orchestrator came in: the worker
// and the connection an answer goes back on.
type inbound struct {
	w    *agent
	conn *websocket.Conn
}

// orchestratorFrames are the frames the orchestrator sends, each with
// its handler; anything else is logged and dropped.
var orchestratorFrames = wire.NewHandlers(
	wire.On(func(in inbound, _ context.Context, f wire.HeartbeatAckFrame) { in.w.log.Debug("heartbeat acked") }),
	wire.On(func(in inbound, ctx context.Context, f wire.RunDispatchFrame) { in.w.dispatch(ctx, in.conn, f) }),
	wire.On(func(in inbound, ctx context.Context, f wire.RunStopFrame) { in.w.stop(ctx, f) }),
	wire.On(func(in inbound, ctx context.Context, f wire.SendKeysFrame) { in.w.sendKeys(ctx, f) }),
	wire.On(func(in inbound, _ context.Context, f wire.PaneWatchFrame) { in.w.watchPane(f) }),
	wire.On(func(in inbound, _ context.Context, f wire.LogRequestFrame) {
		in.w.ops.Go(func() { in.w.serveLog(in.conn, f) })
	}),
	wire.On(func(in inbound, ctx context.Context, f wire.WorkspaceRequestFrame) {
		in.w.ops.Go(func() { in.w.serveWorkspace(ctx, in.conn, f) })
	}),
	wire.On(func(in inbound, _ context.Context, f wire.SignalAckFrame) {
		in.w.log.Debug("signal acked", "run_id", f.RunID, "kind", f.Kind, "result", f.Result, "code", f.Code)
	}),
	wire.On(func(in inbound, _ context.Context, f wire.ErrorFrame) {
		in.w.log.Warn("orchestrator reported an error", "code", f.Code, "message", f.Message)
	}),
	wire.On(func(in inbound, _ context.Context, f wire.AttachOpenFrame) { in.w.openRelay(f) }),
	wire.On(func(in inbound, _ context.Context, f wire.AttachInputFrame) { in.w.relayInput(f) }),
	wire.On(func(in inbound, _ context.Context, f wire.AttachResizeFrame) { in.w.relayResize(f) }),
	wire.On(func(in inbound, _ context.Context, f wire.AttachCloseFrame) { in.w.closeRelay(f) }),
)

// refuseInvalid answers a frame that Validate refused, where an answer
// can name what it refuses: a run_dispatch of a valid run and attempt is
// acked as refused (so the offer is withdrawn at once), an attach_open
// with a valid attach id gets attach_closed. Anything else is logged and
// dropped: an answer the orchestrator could not match would be refused
// in turn.
func (w *agent) refuseInvalid(conn *websocket.Conn, f wire.Frame, err error) {
	reason := err.Error()
	if we, ok := wire.AsError(err); ok {
		reason = we.Message
	}
	reason = wire.BoundText(reason)
	w.log.Warn("invalid frame from the orchestrator refused", "type", f.Type(), "reason", reason)
	switch f := f.(type) {
	case wire.RunDispatchFrame:
		if wire.ValidUUID(f.RunID) && f.Attempt != nil && *f.Attempt >= 1 {
			no := false
			ack := wire.RunDispatchAckFrame{RunID: f.RunID, Attempt: f.Attempt, Accepted: &no, Reason: reason}
			if err := w.sendOn(conn, ack); err != nil {
				w.log.Warn("ack", "run_id", f.RunID, "err", err)
			}
		}
	case wire.AttachOpenFrame:
		if wire.ValidUUID(f.AttachID) {
			_ = w.send(wire.AttachClosedFrame{AttachID: f.AttachID, Reason: reason})
		}
	}
}

// dispatch answers a valid run_dispatch: check this host can take it,
// ack at once (before any kill or spawn), then spawn in the background.
func (w *agent) dispatch(ctx context.Context, conn *websocket.Conn, f wire.RunDispatchFrame) {
	attempt := *f.Attempt
	ack := func(accepted bool, reason string) error {
		return w.sendOn(conn, wire.RunDispatchAckFrame{RunID: f.RunID, Attempt: wire.IntPtr(attempt), Accepted: &accepted, Reason: wire.BoundText(reason)})
	}
	refuse := func(reason string) {
		w.log.Warn("run refused", "run_id", f.RunID, "attempt", attempt, "reason", reason)
		if err := ack(false, reason); err != nil {
			w.log.Warn("ack", "run_id", f.RunID, "err", err)
		}
	}
	name, err := tmux.SessionForRun(f.RunID)
	if err != nil {
		refuse(err.Error()) // not reached: Validate checked the run id
		return
	}
	binary, ok := w.o.Providers()[f.Provider]
	if !ok || binary == "" {
		refuse(fmt.Sprintf("provider %q is not available on this host", f.Provider))
		return
	}

	w.mu.Lock()
	full := w.runs[f.RunID] == nil && w.activeCount() >= w.o.MaxRuns
	w.mu.Unlock()
	if full {
		// Before saying no, make sure every run counted still runs: the
		// orchestrator, which offered it, counts only those.
		w.settleCapacity(ctx)
	}

	r, gen, undo, again, refusal := w.claimRun(f, attempt, name)
	switch {
	case again:
		// Already ours: ack again, never respawn.
		w.log.Info("repeated dispatch acked again", "run_id", f.RunID, "attempt", attempt)
		if err := ack(true, ""); err != nil {
			w.log.Warn("ack", "run_id", f.RunID, "err", err)
		}
		return
	case refusal != "":
		refuse(refusal)
		return
	}

	if err := ack(true, ""); err != nil {
		// The orchestrator never heard yes: it will withdraw the offer and
		// may place the run elsewhere, so this host must not run it.
		w.log.Warn("ack failed; run not spawned", "run_id", f.RunID, "err", err)
		w.mu.Lock()
		if r.gen == gen {
			undo()
		}
		w.mu.Unlock()
		return
	}
	w.log.Debug("run accepted", "run_id", f.RunID, "attempt", attempt, "provider", f.Provider)
	w.snaps.Remove(f.RunID)
	w.ops.Go(func() { w.spawn(ctx, r, gen, f, attempt, binary) })
}

// claimRun takes the run's place here for attempt, to be spawned (gen)
// once acked; undo gives it back if the ack fails. A repeated dispatch of
// the attempt that is ours is again; a newer attempt replaces an older
// one (kill-before-respawn); anything else that cannot be taken (an older
// attempt, a session name held by another run, no capacity) is refused
// with the reason.
func (w *agent) claimRun(f wire.RunDispatchFrame, attempt int, name tmux.SessionName) (r *run, gen uint64, undo func(), again bool, refusal string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r = w.runs[f.RunID]
	switch {
	case r != nil && r.attempt == attempt:
		return nil, 0, nil, true, ""
	case r != nil && r.attempt > attempt:
		return nil, 0, nil, false, fmt.Sprintf("attempt %d of this run is live here", r.attempt)
	case r != nil:
		// A newer attempt replaces ours: kill-before-respawn.
		prevAttempt, prevState, prevGen, prevEnded := r.attempt, r.state, r.gen, r.ended
		undo = func() { r.attempt, r.state, r.gen, r.ended = prevAttempt, prevState, prevGen, prevEnded }
		r.attempt, r.state, r.ended = attempt, stateSpawning, false
		r.provider, r.providerRead = f.Provider, true
		r.gen++
	default:
		for _, o := range w.runs {
			if o.name == name {
				return nil, 0, nil, false, fmt.Sprintf("session %s is held by run %s", name, o.id)
			}
		}
		if n := w.activeCount(); n >= w.o.MaxRuns {
			return nil, 0, nil, false, fmt.Sprintf("at capacity: %d of %d runs", n, w.o.MaxRuns)
		}
		r = &run{id: f.RunID, attempt: attempt, name: name, state: stateSpawning, gen: 1, provider: f.Provider, providerRead: true}
		w.runs[f.RunID] = r
		undo = func() { delete(w.runs, f.RunID) }
	}
	return r, r.gen, undo, false, ""
}

// spawn writes the dispatch file, stops any previous incarnation holding
// the session name, and creates the session. A failure is reported as
// run_state spawn_failed and the run is forgotten.
func (w *agent) spawn(ctx context.Context, r *run, gen uint64, f wire.RunDispatchFrame, attempt int, binary string) {
	r.op.Lock()
	defer r.op.Unlock()
	w.mu.Lock()
	current := r.gen == gen && r.state == stateSpawning
	w.mu.Unlock()
	if !current {
		return // stopped or replaced before it could start
	}
	fail := func(detail string) {
		w.log.Warn("spawn failed", "run_id", r.id, "attempt", attempt, "detail", detail)
		w.forget(r, gen, false)
		w.sendState(r.id, attempt, wire.StateSpawnFailed, detail)
	}
	cwd := f.Cwd // absolute or empty (Validate)
	worktree := ""
	// The orchestrator asks for a resume where the conversation lives; a
	// run with a worktree resumes only in the worktree it was in: one made
	// afresh holds no conversation (docs/architecture.md#resume-and-continue).
	resume := f.AgentSessionID != ""
	if f.Workspace != nil {
		// The run's worktree is its cwd (workspaces.go).
		ws, reused, ok := w.prepareWorkspace(ctx, r, gen, f, attempt)
		if !ok {
			return
		}
		cwd, worktree = ws.Path, ws.Path
		if resume && !reused {
			w.log.Info("worktree made afresh: the conversation is not resumed", "run_id", r.id, "attempt", attempt)
			resume = false
		}
	}
	cwd, detail := resolveCwd(cwd)
	if detail == "" {
		detail = w.writeDispatch(r, f, attempt, binary, cwd, worktree, resume)
	}
	if detail == "" {
		detail = w.startSession(ctx, r, f, attempt, cwd)
	}
	if detail != "" {
		fail(detail)
		return
	}
	now := time.Now()
	w.mu.Lock()
	if r.gen == gen && r.state == stateSpawning {
		r.state = stateLive
		r.next, r.interval, r.lastChange = now, w.o.CaptureInterval, now
	}
	w.mu.Unlock()
	w.log.Info("session started", "run_id", r.id, "attempt", attempt, "session", r.name.String(), "cwd", cwd)
}

// resolveCwd is the directory the run's session starts in: the one given
// (absolute or empty, Validate), else the worker's home; or why there is
// none on this host.
func resolveCwd(cwd string) (string, string) {
	if cwd == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", "no cwd given and no home directory: " + err.Error()
		}
		cwd = home
	}
	if !filepath.IsAbs(cwd) {
		return "", fmt.Sprintf("the home directory %q is not an absolute path", cwd)
	}
	if st, err := os.Stat(cwd); err != nil || !st.IsDir() {
		return "", fmt.Sprintf("cwd %s is not a directory on this host", cwd)
	}
	return cwd, ""
}

// writeDispatch writes the dispatch file pam exec run reads in the
// session (0600: it holds the run's signal token); it returns why it
// could not, or "".
func (w *agent) writeDispatch(r *run, f wire.RunDispatchFrame, attempt int, binary, cwd, worktree string, resume bool) string {
	d := wire.Dispatch{
		RunID: r.id, Attempt: attempt, APIURL: w.o.URL, SignalToken: f.SignalToken,
		Provider: f.Provider, Binary: binary, TaskID: f.TaskID, TaskTitle: f.TaskTitle,
		Prompt: f.Prompt, Args: f.Args, Cwd: cwd, SessionName: r.name.String(),
		WorkerDataDir: w.dir, CAFile: w.o.CAFile, Worktree: worktree,
	}
	if resume {
		d.Resume, d.AgentSessionID, d.ResumeText = true, f.AgentSessionID, f.Text
	}
	if w.o.PassEnv != nil {
		d.PassEnv = w.o.PassEnv(f.Provider)
	}
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return "encode dispatch: " + err.Error()
	}
	if err := datadir.ReplaceFile(w.dispatchPath(r.id), append(b, '\n'), 0o600); err != nil {
		return "write dispatch file: " + err.Error()
	}
	return ""
}

// startSession creates the run's session: one tmux call when the name is
// free, as it is for almost every run; a session holding it is replaced
// (replaceSession), then created again. It returns why it could not, or "".
func (w *agent) startSession(ctx context.Context, r *run, f wire.RunDispatchFrame, attempt int, cwd string) string {
	sp := tmux.Spawn{
		Name: r.name, Cwd: cwd, Title: tmux.Slug(f.TaskTitle), RunID: r.id, Attempt: attempt,
		Instance: w.instanceID, Command: w.command(r.id),
	}
	err := w.tm.NewSession(ctx, sp)
	if errors.Is(err, tmux.ErrSessionExists) {
		if detail := w.replaceSession(ctx, r.name); detail != "" {
			return detail
		}
		err = w.tm.NewSession(ctx, sp)
	}
	if err != nil {
		return err.Error()
	}
	return ""
}

// replaceSession is kill-before-respawn, for a spawn that found its
// session name taken: a session of this instance holding the name can
// only be an earlier incarnation of this run (the name derives from its
// id), and is stopped; one of another instance is never touched. It
// returns why the spawn fails, or "".
func (w *agent) replaceSession(ctx context.Context, name tmux.SessionName) string {
	list, err := w.tm.ListSessions(ctx)
	if err != nil {
		return "list sessions: " + err.Error()
	}
	for _, s := range list {
		if s.Name == name && !w.mine(s) {
			return fmt.Sprintf("session %s belongs to another pam instance (%q); left alone", name, s.Instance)
		}
	}
	if err := w.tm.Stop(ctx, name, w.o.StopGrace, false); err != nil {
		return "stop the previous session: " + err.Error()
	}
	return ""
}

// command is the session's foreground command: pam exec run, pointed at
// this worker's data and config dirs and given its hold-open (the tmux
// server's clean environment carries no PAM_* variable). Nothing secret:
// the signal token and the prompt are in the dispatch file.
func (w *agent) command(runID string) []string {
	cmd := []string{w.o.PamBinary, "exec", "run", "--data-dir=" + w.o.DataDir, "--hold-open=" + w.o.HoldOpen.String()}
	if w.o.ConfigDir != "" {
		cmd = append(cmd, "--config-dir="+w.o.ConfigDir)
	}
	return append(cmd, "--", runID)
}

func (w *agent) dispatchPath(runID string) string {
	return filepath.Join(w.dir, dispatchDir, runID+".json")
}

// forget drops a run whose session is gone (or never came), if it is
// still the incarnation gen; stopped says the stop ladder ended it.
func (w *agent) forget(r *run, gen uint64, stopped bool) {
	w.mu.Lock()
	if w.runs[r.id] != r || r.gen != gen {
		w.mu.Unlock()
		return
	}
	delete(w.runs, r.id)
	attempt := r.attempt
	w.mu.Unlock()
	w.snaps.Remove(r.id)
	if err := os.Remove(w.dispatchPath(r.id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		w.log.Warn("remove dispatch file", "run_id", r.id, "err", err)
	}
	_ = os.Remove(wrap.MCPSettingsPath(w.dir, r.id)) // the wrapper's, if it could not remove it
	w.log.Info("run forgotten", "run_id", r.id, "attempt", attempt, "stopped", stopped)
}

// stop answers run_stop: the graceful ladder (or a forced kill) in the
// background. A stop naming an older attempt than the live one is
// ignored: it must not end the newer incarnation.
func (w *agent) stop(ctx context.Context, f wire.RunStopFrame) {
	name, err := tmux.SessionForRun(f.RunID)
	if err != nil {
		w.log.Warn("run_stop with a bad run_id dropped", "run_id", f.RunID)
		return
	}
	grace := w.o.StopGrace
	w.mu.Lock()
	r := w.runs[f.RunID]
	if r != nil && f.Attempt != nil && *f.Attempt < r.attempt {
		w.mu.Unlock()
		w.log.Warn("run_stop for an older attempt ignored", "run_id", f.RunID, "attempt", *f.Attempt, "live_attempt", r.attempt)
		return
	}
	var gen uint64
	if r != nil {
		r.state = stateStopping
		gen = r.gen
	}
	w.mu.Unlock()
	w.log.Info("stopping run", "run_id", f.RunID, "force", f.Force)
	w.ops.Go(func() {
		if r != nil {
			r.op.Lock()
			defer r.op.Unlock()
			w.mu.Lock()
			replaced := r.gen != gen
			w.mu.Unlock()
			if replaced {
				// A newer attempt was dispatched meanwhile: its spawn stops
				// this incarnation (kill-before-respawn) or already did, and
				// the session now holding the name is the new one.
				w.log.Info("stop superseded by a newer attempt", "run_id", f.RunID)
				return
			}
		} else if !w.foreignSession(ctx, f, name) {
			return
		}
		if err := w.tm.Stop(ctx, name, grace, f.Force); err != nil {
			w.log.Warn("stop", "run_id", f.RunID, "err", err)
			return
		}
		if r != nil {
			w.forget(r, gen, true)
		}
		w.log.Info("run stopped", "run_id", f.RunID)
	})
}

// foreignSession decides a stop for a run this worker does not know: the
// session is stopped only if its options name this run (at this attempt
// or an older one), never a session of another run that shares the prefix.
func (w *agent) foreignSession(ctx context.Context, f wire.RunStopFrame, name tmux.SessionName) bool {
	list, err := w.tm.ListSessions(ctx)
	if err != nil {
		w.log.Warn("stop: list sessions", "run_id", f.RunID, "err", err)
		return false
	}
	for _, s := range list {
		if s.Name != name {
			continue
		}
		if !w.mine(s) {
			w.log.Warn("stop: session belongs to another pam instance; left alone", "run_id", f.RunID, "session", name.String(), "instance", s.Instance)
			return false
		}
		if s.RunID != f.RunID {
			w.log.Warn("stop: session belongs to another run; left alone", "run_id", f.RunID, "session", name.String(), "session_run_id", s.RunID)
			return false
		}
		if f.Attempt != nil && s.Attempt > *f.Attempt {
			w.log.Warn("stop: session runs a newer attempt; left alone", "run_id", f.RunID, "attempt", *f.Attempt, "session_attempt", s.Attempt)
			return false
		}
		return true
	}
	return false // no such session: nothing to stop
}

// sendKeys answers a valid send_keys: Validate checked the allowlist
// again (docs/api.md#resources), and tmux checks it once more before it runs.
func (w *agent) sendKeys(ctx context.Context, f wire.SendKeysFrame) {
	w.mu.Lock()
	r := w.runs[f.RunID]
	if r == nil || r.state != stateLive || (f.Attempt != nil && *f.Attempt != r.attempt) {
		w.mu.Unlock()
		w.log.Warn("send_keys for a run without a live session here dropped", "run_id", f.RunID)
		return
	}
	name := r.name
	// Input usually changes the screen: look again soon, at full speed;
	// and a person answered, so a new quiet spell starts.
	now := time.Now()
	r.next, r.interval, r.lastChange, r.idleSent = now, w.o.CaptureInterval, now, false
	w.mu.Unlock()
	if err := w.tm.SendKeys(ctx, name, f.Keys); err != nil {
		w.log.Warn("send_keys", "run_id", f.RunID, "err", err)
	}
}
