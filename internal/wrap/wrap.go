// Package wrap is `pam exec run <run_id>` (docs/architecture.md#pam-exec-run, docs/architecture.md#tmux
// "Foreground Command"): the foreground command of every agent session. It
// reads the run's dispatch file, starts the provider CLI on the pane,
// reports started and finished (or failed) signals to the orchestrator,
// spools what it cannot deliver, and holds the session open for a while
// after the CLI ends so that its last screen can be read.
//
// The prompt reaches the CLI only as an argv element: no shell of pam's
// ever parses it (the built-in shell provider is the operator explicitly
// asking for /bin/sh -c). The CLI's environment never carries the worker
// or operator token.
package wrap

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"

	"pam/internal/provider"
	"pam/internal/spool"
	"pam/internal/wire"
)

// Exit codes of the wrapper itself; otherwise it exits with the CLI's code.
const (
	// ExitUsage: the run id argument is not a UUID.
	ExitUsage = 2
	// ExitNoDispatch: the dispatch file is missing or unreadable.
	ExitNoDispatch = 1
	// ExitCannotRun: the CLI could not be started (shell convention).
	ExitCannotRun = 126
	// ExitNotFound: the CLI's binary is missing (shell convention).
	ExitNotFound = 127
)

// maxDispatch bounds the dispatch file (prompts are at most 64 KiB).
const maxDispatch = 1 << 20

// Options configure one wrapper run; `pam exec run` fills them from its
// flags and environment.
type Options struct {
	// WorkerDataDir is <data>/worker: dispatch/ and spool/ live there.
	WorkerDataDir string
	// ConfigDir holds providers.toml.
	ConfigDir string
	// RunID is the command-line argument.
	RunID string
	// Stdin, Stdout and Stderr are the pane. When they are *os.File the
	// CLI gets them directly (a real terminal); nil Stdin is /dev/null.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// HoldOpen is how long the session stays after the CLI ends
	// (PAM_HOLD_OPEN); 0 ends at once.
	HoldOpen time.Duration
	// Logger gets debug records; nil discards them. What the operator
	// must see goes to Stderr as plain lines.
	Logger *slog.Logger
	// HTTPClient posts the signals; nil builds one from the dispatch
	// (trusting its CA file).
	HTTPClient *http.Client
	// Environ is the wrapper's environment the CLI's is built from; nil
	// means os.Environ().
	Environ []string
	// PamBinary is the absolute path of pam for provider hooks; empty
	// means os.Executable().
	PamBinary string
	// HandleSignals makes Run catch SIGINT, SIGTERM, SIGHUP and SIGQUIT
	// for its lifetime, as the real foreground command must: the pane's
	// process group gets the terminal's signals, the wrapper has to outlive
	// the CLI to report how it ended, and a SIGTERM sent to the wrapper
	// alone is passed on to the CLI. SIGTERM and SIGHUP while the CLI runs,
	// or any of them during hold-open, end the session after the report.
	HandleSignals bool
	// RetryDelays and TryTimeout tune signal posting; see Sender.
	RetryDelays []time.Duration
	TryTimeout  time.Duration
	// Now is the clock of the closing line; nil means time.Now.
	Now func() time.Time
}

// Run is the wrapper. It returns the exit code: the CLI's (128+signal
// number when a signal ended it), or one of the Exit* codes. Cancelling
// ctx stops the CLI with SIGTERM (its finished signal is still sent) and
// ends hold-open; `pam exec run` passes a context that is never cancelled
// and sets HandleSignals instead, so that Ctrl-C in the pane reaches only
// the CLI.
func Run(ctx context.Context, o Options) int {
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	id, err := uuid.Parse(o.RunID)
	if err != nil || len(o.RunID) != 36 {
		fmt.Fprintf(o.Stderr, "pam exec run: %q is not a run id (want a UUID)\n", o.RunID)
		return ExitUsage
	}
	// The CLI runs elsewhere (the dispatch's cwd); its hooks need an
	// absolute PAM_WORKER_DATA_DIR.
	if abs, err := filepath.Abs(o.WorkerDataDir); err == nil {
		o.WorkerDataDir = abs
	}
	w := &wrapper{o: o, runID: id.String()}
	if o.HandleSignals {
		w.sigs = make(chan os.Signal, 8)
		signal.Notify(w.sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
		defer signal.Stop(w.sigs)
	}
	return w.run(ctx)
}

// wrapper is the state of one Run.
type wrapper struct {
	o       Options
	runID   string
	sigs    chan os.Signal // nil without HandleSignals
	d       *wire.Dispatch
	sender  *Sender
	spooled int
	// mcpFile is the MCP settings file written for the CLI, or "".
	mcpFile string
}

func (w *wrapper) printf(format string, args ...any) {
	fmt.Fprintf(w.o.Stderr, "pam: "+format+"\n", args...)
}

// run reads the dispatch, starts the CLI, reports started, waits for
// the CLI while relaying the pane's signals, and reports how it ended.
// Whatever goes wrong is said in the pane, which holds open so that the
// operator can read it.
func (w *wrapper) run(ctx context.Context) int {
	d, err := ReadDispatch(w.o.WorkerDataDir, w.runID)
	if err != nil {
		w.printf("run %s cannot start: %v", w.runID, err)
		w.holdOpen(ctx, fmt.Sprintf("run %s could not start: no usable dispatch (exit code %d)", w.runID, ExitNoDispatch), false)
		return ExitNoDispatch
	}
	w.d = d
	w.sender = w.newSender()
	// Reports are made even while stopping: the worker's stop ladder
	// waits PAM_STOP_GRACE for them, and the retries are short.
	sendCtx := context.WithoutCancel(ctx)

	cmd, code, err := w.start()
	defer w.removeMCPFile()
	if err != nil {
		w.printf("run %s attempt %d: cannot start %s: %v", w.runID, d.Attempt, d.Provider, err)
		w.send(sendCtx, wire.SignalFailed, map[string]any{"reason": "spawn_failed", "detail": oneLine(err.Error())})
		w.holdOpen(ctx, fmt.Sprintf("run %s attempt %d could not start (%s, exit code %d)", w.runID, d.Attempt, oneLine(err.Error()), code), false)
		return code
	}
	w.o.Logger.Debug("cli started", "run_id", w.runID, "attempt", d.Attempt, "pid", cmd.Process.Pid, "argv0", cmd.Path)

	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	startedSent := make(chan struct{})
	go func() {
		defer close(startedSent)
		w.send(sendCtx, wire.SignalStarted, nil)
	}()

	tty := paneTerminal(w.o.Stdin)
	waitErr, stopped := w.wait(ctx, cmd, waited)
	<-startedSent
	code, how := exitCode(cmd.ProcessState, waitErr)
	if tty != nil && !isTerminal(tty) {
		// The session went with its terminal (kill-session, or the tmux
		// server died) and took the CLI with it: that is not the CLI's exit
		// to report. The worker sees the session vanish and reports it
		// (session_lost or tmux_crash); a finished now would read as the
		// CLI failing by itself. Nobody is left to read a closing line.
		w.o.Logger.Debug("terminal hung up; no finished signal", "run_id", w.runID, "exit_code", code)
		return code
	}
	w.send(sendCtx, wire.SignalFinished, map[string]any{"exit_code": code})
	w.holdOpen(ctx, fmt.Sprintf("run %s attempt %d finished with exit code %d (%s)", w.runID, d.Attempt, code, how), stopped)
	return code
}

// newSender posts the run's signals with the dispatch's token.
func (w *wrapper) newSender() *Sender {
	d := w.d
	client := w.o.HTTPClient
	if client == nil {
		var err error
		if client, err = NewClient(d.APIURL, d.CAFile); err != nil {
			// Without a client nothing can be posted; the spool still can be
			// written, and the worker replays with its own client.
			w.printf("orchestrator client: %v", err)
			client = http.DefaultClient
		}
	}
	return &Sender{
		Client:      client,
		APIURL:      d.APIURL,
		Token:       d.SignalToken,
		RunID:       w.runID,
		SpoolDir:    spool.Dir(w.o.WorkerDataDir),
		RetryDelays: w.o.RetryDelays,
		TryTimeout:  w.o.TryTimeout,
		Report:      w.o.Stderr,
		Logger:      w.o.Logger,
	}
}

// start builds and starts the CLI, or says why it cannot (with the exit
// code to end with: not found apart from other failures).
func (w *wrapper) start() (*exec.Cmd, int, error) {
	cmd, code, err := w.command()
	if err != nil {
		return nil, code, err
	}
	if err := cmd.Start(); err != nil {
		code = ExitCannotRun
		if errors.Is(err, os.ErrNotExist) {
			code = ExitNotFound
		}
		return nil, code, err
	}
	return cmd, 0, nil
}

// wait waits for the CLI (its cmd.Wait result on waited) while passing on
// what must reach it: ctx's end and SIGTERM as a SIGTERM, a hang-up to its
// whole process group. stopped is whether the CLI was asked to stop.
func (w *wrapper) wait(ctx context.Context, cmd *exec.Cmd, waited <-chan error) (waitErr error, stopped bool) {
	hungUp := false
	done := ctx.Done()
	for {
		select {
		case waitErr = <-waited:
			return waitErr, stopped
		case <-done:
			done = nil
			stopped = true
			_ = cmd.Process.Signal(syscall.SIGTERM)
		case sig := <-w.sigs:
			w.o.Logger.Debug("signal while the CLI runs", "signal", sig.String())
			switch sig {
			case syscall.SIGTERM:
				// The pane's process group may have had it too; a second
				// SIGTERM is harmless, a lost one is not.
				stopped = true
				_ = cmd.Process.Signal(syscall.SIGTERM)
			case syscall.SIGHUP:
				stopped = true
				if !hungUp {
					hungUp = true
					passHangup(cmd)
				}
			default:
				// SIGINT, SIGQUIT: typed at the terminal, meant for the CLI,
				// which is in the same process group and has it already.
			}
		}
	}
}

// passHangup is the terminal hanging up (kill-session, or the tmux server
// died). The kernel tells only the session leader, the wrapper: pass it on
// to the whole process group, as a shell does for its jobs, so that no CLI
// outlives its session unseen. The wrapper's own copy comes back to wait.
// A wrapper that leads no group (tests) tells its CLI.
func passHangup(cmd *exec.Cmd) {
	if pg := syscall.Getpgrp(); pg == os.Getpid() {
		_ = syscall.Kill(-pg, syscall.SIGHUP)
	} else {
		_ = cmd.Process.Signal(syscall.SIGHUP)
	}
}

// argvParts renders the CLI's arguments (see provider.ArgvParts): the
// provider's args with the prompt, or — when the dispatch says to resume
// the agent's conversation — its resume_args with the session id and the
// resume's message (the dispatch's, else the provider's
// continue_message) (docs/architecture.md#resume-and-continue). A
// provider of this host's catalog that cannot resume starts afresh.
func (w *wrapper) argvParts(p provider.Provider) (head, tail []string, err error) {
	d := w.d
	v := provider.Vars{Prompt: d.Prompt, TaskTitle: d.TaskTitle, RunID: w.runID, Attempt: d.Attempt, Cwd: d.Cwd, Args: d.Args}
	if !d.Resume {
		return p.ArgvParts(v)
	}
	if err := wire.ValidAgentSessionID(d.AgentSessionID); err != nil {
		return nil, nil, fmt.Errorf("the dispatch's agent session: %w", err)
	}
	if len(p.ResumeArgs) == 0 {
		w.printf("provider %s has no resume_args: run %s starts afresh instead of resuming its conversation", d.Provider, w.runID)
		return p.ArgvParts(v)
	}
	v.SessionID, v.Prompt = d.AgentSessionID, d.ResumeText
	if v.Prompt == "" {
		v.Prompt = p.ContinueMessage
	}
	w.o.Logger.Debug("resuming the conversation", "run_id", w.runID, "attempt", d.Attempt, "agent_session_id", d.AgentSessionID)
	return p.ResumeParts(v)
}

// command builds the CLI's exec.Cmd, or says why it cannot run (with the
// exit code to end with).
func (w *wrapper) command() (*exec.Cmd, int, error) {
	d := w.d
	cat, err := provider.Load(w.o.ConfigDir)
	if err != nil {
		return nil, ExitCannotRun, fmt.Errorf("provider catalog: %w", err)
	}
	p, ok := cat.Get(d.Provider)
	if !ok {
		where := "the built-in providers"
		if cat.File != "" {
			where = cat.File
		}
		return nil, ExitCannotRun, fmt.Errorf("provider %q is not in %s", d.Provider, where)
	}
	if code, err := checkLaunch(d); err != nil {
		return nil, code, err
	}
	pam := w.o.PamBinary
	if pam == "" {
		if pam, err = os.Executable(); err != nil {
			return nil, ExitCannotRun, fmt.Errorf("path of pam for the provider hooks: %w", err)
		}
	}
	head, tail, err := w.argvParts(p)
	if err != nil {
		return nil, ExitCannotRun, fmt.Errorf("provider %q: %w", d.Provider, err)
	}
	// A prompt starting with "-" comes last, after "--": the run's
	// arguments and the hook options must stay before it to be options.
	argv := []string{d.Binary}
	argv = append(argv, head...)
	argv = append(argv, d.Args...)
	argv = append(argv, p.MCPArgs(pam)...)
	argv = append(argv, p.HookArgs(pam)...)
	argv = append(argv, tail...)

	env := w.environ(p, cat, pam)
	w.markTrust(p, env)

	cmd := &exec.Cmd{
		Path:   d.Binary,
		Args:   argv,
		Env:    env,
		Dir:    d.Cwd,
		Stdin:  w.o.Stdin,
		Stdout: w.o.Stdout,
		Stderr: w.o.Stderr,
		// When the pane is not a file (tests), output is copied through
		// pipes; a grandchild holding them must not block the report.
		WaitDelay: 2 * time.Second,
	}
	return cmd, 0, nil
}

// checkLaunch says why the dispatch's binary cannot run in its working
// directory, before anything is written for it (with the exit code to end
// with: a missing binary apart from other failures).
func checkLaunch(d *wire.Dispatch) (int, error) {
	if !filepath.IsAbs(d.Binary) {
		return ExitNotFound, fmt.Errorf("the dispatch's binary %q is not an absolute path", d.Binary)
	}
	if err := provider.CheckExecutable(d.Binary); err != nil {
		code := ExitCannotRun
		if errors.Is(err, os.ErrNotExist) {
			code = ExitNotFound
		}
		return code, err
	}
	if d.Cwd != "" {
		if st, err := os.Stat(d.Cwd); err != nil {
			return ExitCannotRun, fmt.Errorf("working directory: %w", err)
		} else if !st.IsDir() {
			return ExitCannotRun, fmt.Errorf("working directory %s is not a directory", d.Cwd)
		}
	}
	return 0, nil
}

// environ is the CLI's environment: the wrapper's without its
// credentials, the worker's pass_env values first, then [proxy] and env,
// then the run's own PAM_* variables (and the MCP server's), later ones
// winning.
func (w *wrapper) environ(p provider.Provider, cat *provider.Catalog, pam string) []string {
	d := w.d
	base := w.o.Environ
	if base == nil {
		base = os.Environ()
	}
	env := p.Env(provider.WithPassed(scrubEnv(base), d.PassEnv), cat.Proxy)
	pamVars := []string{
		"PAM_RUN_ID=" + w.runID,
		"PAM_ATTEMPT=" + strconv.Itoa(d.Attempt),
		"PAM_API_URL=" + d.APIURL,
		"PAM_SIGNAL_TOKEN=" + d.SignalToken,
		"PAM_WORKER_DATA_DIR=" + w.o.WorkerDataDir,
	}
	if d.CAFile != "" {
		pamVars = append(pamVars, "PAM_CA_FILE="+d.CAFile)
	}
	return setEnv(env, append(pamVars, w.mcpVars(p, pam, env)...))
}

// secretEnv are variables of the wrapper that never reach the CLI.
var secretEnv = map[string]bool{"PAM_WORKER_TOKEN": true, "PAM_TOKEN": true, "PAM_DATABASE_URL": true}

// scrubEnv drops the credentials the wrapper's environment may carry.
func scrubEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !secretEnv[k] {
			out = append(out, kv)
		}
	}
	return out
}

// setEnv sets each KEY=value of vars in env, replacing earlier values.
func setEnv(env, vars []string) []string {
	set := map[string]bool{}
	for _, kv := range vars {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	out := make([]string, 0, len(env)+len(vars))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if !set[k] {
			out = append(out, kv)
		}
	}
	return append(out, vars...)
}

// exitCode is the CLI's exit code, 128+N for a death by signal N, and a
// word for the closing line.
func exitCode(ps *os.ProcessState, err error) (int, string) {
	if ps == nil {
		return ExitCannotRun, "lost: " + oneLine(fmt.Sprint(err))
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), fmt.Sprintf("killed by signal %d, %s", int(ws.Signal()), ws.Signal())
	}
	if ps.ExitCode() == 0 {
		return 0, "exited"
	}
	return ps.ExitCode(), "failed"
}

// send posts one signal of the wrapper.
func (w *wrapper) send(ctx context.Context, kind string, payload any) {
	attempt := w.d.Attempt
	now := w.o.Now().UTC()
	sig := wire.Signal{Kind: kind, Attempt: &attempt, Source: wire.SourceWrapper, Timestamp: &now}
	if payload != nil {
		b, err := json.Marshal(payload)
		if err != nil {
			panic(err) // maps of plain values always encode
		}
		sig.Payload = b
	}
	if out := w.sender.Send(ctx, sig); out.Spooled != "" {
		w.spooled++
	}
}

// holdOpen prints the closing line and keeps the session for HoldOpen, or
// until ctx ends or (with HandleSignals) a signal arrives. A stopped run
// ends at once.
func (w *wrapper) holdOpen(ctx context.Context, what string, stopped bool) {
	if w.spooled > 0 {
		w.printf("%d signal(s) could not be delivered and wait in %s for the worker to replay them", w.spooled, spool.Dir(w.o.WorkerDataDir))
	}
	hold := w.o.HoldOpen
	if stopped || hold <= 0 || ctx.Err() != nil {
		why := "the run was stopped"
		if !stopped && ctx.Err() == nil {
			why = "PAM_HOLD_OPEN=0"
		}
		fmt.Fprintf(w.o.Stderr, "\npam: %s — this session closes now (%s)\n", what, why)
		return
	}
	until := w.o.Now().Add(hold).UTC()
	layout := "15:04:05 UTC"
	if hold >= 12*time.Hour {
		layout = "2006-01-02 15:04:05 UTC"
	}
	fmt.Fprintf(w.o.Stderr, "\npam: %s — this session stays open until %s (PAM_HOLD_OPEN=%s)\n", what, until.Format(layout), shortDuration(hold))
	t := time.NewTimer(hold)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-w.sigs:
	}
}

// shortDuration drops the zero units of a duration: 5m0s → 5m, 1h0m0s → 1h.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// ReadDispatch reads <workerDataDir>/dispatch/<runID>.json: bounded,
// strict (unknown fields refused), and it must name runID.
func ReadDispatch(workerDataDir, runID string) (*wire.Dispatch, error) {
	id, err := uuid.Parse(runID)
	if err != nil {
		return nil, fmt.Errorf("run id %q is not a UUID", runID)
	}
	path := filepath.Join(workerDataDir, "dispatch", id.String()+".json")
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("dispatch file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxDispatch+1))
	if err != nil {
		return nil, fmt.Errorf("dispatch file %s: %w", path, err)
	}
	if len(data) > maxDispatch {
		return nil, fmt.Errorf("dispatch file %s: larger than %d bytes", path, maxDispatch)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var d wire.Dispatch
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("dispatch file %s: %w", path, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("dispatch file %s: data after the JSON object", path)
	}
	if got, err := uuid.Parse(d.RunID); err != nil || got != id {
		return nil, fmt.Errorf("dispatch file %s: run_id %q is not this run", path, d.RunID)
	}
	if d.Attempt < 1 {
		return nil, fmt.Errorf("dispatch file %s: attempt %d (want 1 or more)", path, d.Attempt)
	}
	if u, err := url.Parse(d.APIURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("dispatch file %s: api_url %q is not an http(s) URL", path, d.APIURL)
	}
	if d.SignalToken == "" {
		return nil, fmt.Errorf("dispatch file %s: no signal_token", path)
	}
	return &d, nil
}
