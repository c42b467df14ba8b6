package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"pam/internal/eventually"
	"pam/internal/holder"
	"pam/internal/pamtest"
	"pam/internal/store/storetest"
	"pam/internal/wire"
)

// Helpers of the fault-injection tests: a serve that can be killed and
// restarted on its port, workers that can be killed and restarted on
// their data dir (each with its own tmux socket directory), and a TCP
// proxy that can cut a worker off from serve.

// serveProc is one `pam serve` that a test may kill -9 and start again.
type serveProc struct {
	t    testing.TB
	opts pamtest.ServeOptions
	proc *pamtest.Serve
}

// newFaultSystem starts serve on the database at dbURL (a storetest clone
// when empty) with the given extra environment.
func newFaultSystem(t *testing.T, dbURL string, extraEnv ...string) (*system, *serveProc) {
	t.Helper()
	pamtest.Require(t, "tmux")
	if dbURL == "" {
		dbURL = storetest.URL(t)
	}
	sp := &serveProc{t: t, opts: pamtest.ServeOptions{DataDir: pamtest.ShortDir(t, "pams-"), DatabaseURL: dbURL,
		Env: append([]string{"PAM_DISPATCH_ACK_TIMEOUT=5s", "PAM_RESTART_INITIAL_DELAY=100ms", "PAM_RESTART_MAX_DELAY=500ms"}, extraEnv...)}}
	base := sp.start()
	sp.opts.Port = sp.proc.Port
	return &system{t: t, url: base, token: sp.proc.Token}, sp
}

// start runs serve (on its first port after the first start) and waits
// until it listens; it returns the base URL.
func (sp *serveProc) start() string {
	sp.t.Helper()
	sp.proc = pamtest.StartServe(sp.t, sp.opts)
	return sp.proc.URL
}

// kill9 kills serve with SIGKILL and reaps it.
func (sp *serveProc) kill9() { sp.proc.Kill9() }

// workerProc is one host's `pam worker`, restartable on its data dir.
type workerProc struct {
	s    *system
	opts pamtest.WorkerOptions
	proc *pamtest.Proc
}

// usesPTY reports whether a worker started with env (on top of this
// process's environment, as pamtest starts it) runs the pty executor:
// the e2e suites run once per executor (PAM_EXECUTOR=pty go test …).
func usesPTY(env []string) bool {
	pty := os.Getenv("PAM_EXECUTOR") == "pty"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PAM_EXECUTOR="); ok {
			pty = v == "pty"
		}
	}
	return pty
}

// holdersOf is the holders folder of a worker's data dir.
func holdersOf(dataDir string) string { return filepath.Join(dataDir, "worker", "holders") }

// sessionAlive reports whether a worker with data dir and env has the
// session: a tmux session, or a live PTY holder.
func (s *system) sessionAlive(dataDir, session string, env ...string) bool {
	if usesPTY(env) {
		_, ok := holder.Alive(holdersOf(dataDir), session)
		return ok
	}
	_, err := s.tmux("has-session", "-t", "="+session)
	return err == nil
}

// faultWorker provisions a host and starts its worker against pamURL (the
// system's URL, or a proxy in front of it), with its own tmux socket dir.
func (s *system) faultWorker(name, pamURL string, extraEnv ...string) *workerProc {
	s.t.Helper()
	var created wire.HostCreated
	s.must(201, "POST", "/api/v1/hosts", map[string]any{"name": name}, &created)
	w := &workerProc{s: s, opts: pamtest.WorkerOptions{URL: pamURL, Token: created.WorkerToken, Name: name,
		DataDir: pamtest.ShortDir(s.t, "pamw-"), Tmux: pamtest.NewTmux(s.t),
		Env: append([]string{"PAM_CAPTURE_INTERVAL=200ms", "PAM_LIVENESS_INTERVAL=300ms", "PAM_RECONCILE_INTERVAL=500ms",
			"PAM_HEARTBEAT_INTERVAL=500ms", "PAM_STOP_GRACE=2s", "PAM_HOLD_OPEN=1s"}, extraEnv...)}}
	w.start()
	s.waitHost(name, "online", eventually.Long)
	return w
}

// start runs the worker process (again).
func (w *workerProc) start() {
	w.s.t.Helper()
	w.proc = pamtest.StartWorker(w.s.t, w.opts)
}

// kill9 kills the worker with SIGKILL: no cleanup of any kind.
func (w *workerProc) kill9() { w.proc.Kill9() }

// waitLog waits until the current process's log has a line with all of
// the given strings.
func (w *workerProc) waitLog(d time.Duration, parts ...string) {
	w.s.t.Helper()
	eventually.Wait(w.s.t, d, "worker log line with "+strings.Join(parts, " "), func() bool {
		for _, line := range strings.Split(w.proc.Stderr.String(), "\n") {
			all := true
			for _, p := range parts {
				all = all && strings.Contains(line, p)
			}
			if all {
				return true
			}
		}
		return false
	})
}

// tmuxCmd runs tmux on this worker's socket.
func (w *workerProc) tmuxCmd(args ...string) (string, error) {
	out, err := w.opts.Tmux.Run(args...)
	return strings.TrimSpace(out), err
}

// panePID is the pid of the session's pane process (the wrapper): under
// the pty executor, the holder's program.
func (w *workerProc) panePID(session string) int {
	w.s.t.Helper()
	if usesPTY(w.opts.Env) {
		n, ok := holder.Alive(holdersOf(w.opts.DataDir), session)
		if !ok {
			w.s.t.Fatalf("pane of %s: no live holder", session)
		}
		return n.ChildPID
	}
	out, err := w.tmuxCmd("list-panes", "-t", "="+session+":", "-F", "#{pane_pid}")
	if err != nil {
		w.s.t.Fatalf("pane of %s: %v %s", session, err, out)
	}
	pid, _ := strconv.Atoi(out)
	return pid
}

// serverEnv is the environment of what holds the sessions: the tmux
// server's global environment, or every live PTY holder's.
func (w *workerProc) serverEnv() (string, error) {
	if !usesPTY(w.opts.Env) {
		return w.tmuxCmd("show-environment", "-g")
	}
	notes, err := holder.List(holdersOf(w.opts.DataDir))
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, n := range notes {
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", n.PID))
		if err != nil {
			return "", err
		}
		b.Write(bytes.ReplaceAll(env, []byte{0}, []byte{'\n'}))
	}
	return b.String(), nil
}

func (w *workerProc) hasSession(session string) bool {
	if usesPTY(w.opts.Env) {
		_, ok := holder.Alive(holdersOf(w.opts.DataDir), session)
		return ok
	}
	_, err := w.tmuxCmd("has-session", "-t", "="+session)
	return err == nil
}

// spooled lists the signal files in the worker's spool.
func (w *workerProc) spooled() []string {
	ents, _ := os.ReadDir(filepath.Join(w.opts.DataDir, "worker", "spool"))
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".json") && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, e.Name())
		}
	}
	return out
}

func (s *system) waitHost(name, status string, d time.Duration) {
	s.t.Helper()
	eventually.Wait(s.t, d, "host "+name+" "+status, func() bool {
		var h wire.Host
		s.must(200, "GET", "/api/v1/hosts/"+name, nil, &h)
		return h.Status == status
	})
}

func (s *system) host(name string) wire.Host {
	s.t.Helper()
	var h wire.Host
	s.must(200, "GET", "/api/v1/hosts/"+name, nil, &h)
	return h
}

// events is the run's journal with payloads.
func (s *system) events(runID string) []wire.Event {
	s.t.Helper()
	var l wire.EventList
	s.must(200, "GET", "/api/v1/runs/"+runID+"/events", nil, &l)
	return l.Events
}

// hostEvents lists the journal's events of a host with a topic matching glob.
func (s *system) hostEvents(hostID, glob string) []wire.Event {
	s.t.Helper()
	var l wire.EventList
	s.must(200, "GET", "/api/v1/events?limit=1000&topic="+url.QueryEscape(glob), nil, &l)
	var out []wire.Event
	for _, e := range l.Events {
		if e.HostID != nil && *e.HostID == hostID {
			out = append(out, e)
		}
	}
	return out
}

func countTopic(evs []wire.Event, topic string) int {
	n := 0
	for _, e := range evs {
		if e.Topic == topic {
			n++
		}
	}
	return n
}

func eventPayload(e wire.Event) map[string]any {
	var p map[string]any
	_ = json.Unmarshal(e.Payload, &p)
	return p
}

// progressSeqs is the seqs of the run's applied progress signals, in
// journal order.
func progressSeqs(evs []wire.Event) []int {
	var out []int
	for _, e := range evs {
		if e.Topic == "run.progress" {
			if f, ok := eventPayload(e)["seq"].(float64); ok {
				out = append(out, int(f))
			}
		}
	}
	return out
}

func (s *system) runShell(taskID, prompt string, extra map[string]any) wire.Run {
	s.t.Helper()
	body := map[string]any{"task_id": taskID, "provider": "shell", "prompt": prompt}
	for k, v := range extra {
		body[k] = v
	}
	var r wire.Run
	s.must(202, "POST", "/api/v1/runs", body, &r)
	return r
}

// ownCwd gives a run a folder of its own as its cwd: under the pty
// executor one workspace has one live run
// (docs/architecture.md#the-pty-holder), and runs started together
// would otherwise share the worker's home.
func ownCwd(t testing.TB) map[string]any { return map[string]any{"cwd": t.TempDir()} }

// gate is a folder of files a run's prompt waits for, so that a test
// decides when the agent moves on.
type gate string

func newGate(t *testing.T) gate { return gate(pamtest.ShortDir(t, "pamg-")) }

// wait is the shell text that waits for the file name in the gate.
func (g gate) wait(name string) string {
	return fmt.Sprintf("while [ ! -e %s/%s ]; do sleep 0.05; done", g, name)
}

func (g gate) open(t *testing.T, name string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(string(g), name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// hookCall is the shell text that calls `pam hook kind` the way a
// provider's hook does, with a JSON event on stdin.
func hookCall(t testing.TB, kind string) string {
	return fmt.Sprintf(`echo '{"hook_event_name":"PostToolUse"}' | %s hook %s`, pamtest.Pam(t), kind)
}

// proxy is a TCP proxy between a worker and serve that a test can cut
// (every connection closed, new ones accepted and closed at once: the
// worker sees its uplink and every request fail) and heal.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]bool
	wg     sync.WaitGroup
}

func newProxy(t *testing.T, targetURL string) *proxy {
	t.Helper()
	u, err := url.Parse(targetURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: u.Host, conns: map[net.Conn]bool{}}
	p.wg.Go(p.serve)
	t.Cleanup(func() {
		ln.Close()
		p.Cut()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut, target := p.cut, p.target
		p.mu.Unlock()
		if cut {
			c.Close()
			continue
		}
		up, err := net.DialTimeout("tcp", target, 2*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			up.Close()
			continue
		}
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
			p.mu.Lock()
			delete(p.conns, dst)
			delete(p.conns, src)
			p.mu.Unlock()
		}
		p.wg.Go(func() { pipe(up, c) })
		p.wg.Go(func() { pipe(c, up) })
	}
}

// Cut closes every connection and refuses new ones until Heal.
func (p *proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Retarget sends new connections to targetURL's host from now on, as a
// load balancer does when its health check finds another backend
// serving; connections already made stay where they are.
func (p *proxy) Retarget(t *testing.T, targetURL string) {
	t.Helper()
	u, err := url.Parse(targetURL)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = u.Host
}

// Heal lets connections through again.
func (p *proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}
