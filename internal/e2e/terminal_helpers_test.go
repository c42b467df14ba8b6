package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"pam/internal/eventually"
	"pam/internal/wire"
)

// Helpers for the live-terminal tests: WebSocket clients of the pane and
// attach sockets, as a browser or the CLI would be.

// wsURL is the ws:// URL of a run's socket (kind "pane" or "attach").
func (s *system) wsURL(runID, kind string, q url.Values) string {
	u := "ws://" + strings.TrimPrefix(s.url, "http://") + "/api/v1/runs/" + runID + "/" + kind + "/ws"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// dialWS opens a socket; hdr nil means the operator token in the header.
// A refused handshake returns its HTTP status.
func (s *system) dialWS(runID, kind string, q url.Values, hdr http.Header) (*websocket.Conn, int, error) {
	return s.dialWSWith(nil, runID, kind, q, hdr)
}

func (s *system) dialWSWith(client *http.Client, runID, kind string, q url.Values, hdr http.Header) (*websocket.Conn, int, error) {
	if hdr == nil {
		hdr = http.Header{"Authorization": {"Bearer " + s.token}}
	}
	ctx, cancel := context.WithTimeout(s.t.Context(), 15*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, s.wsURL(runID, kind, q), &websocket.DialOptions{HTTPHeader: hdr, HTTPClient: client})
	if err != nil {
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		return nil, code, err
	}
	c.SetReadLimit(4 << 20)
	s.t.Cleanup(func() { c.CloseNow() })
	return c, 101, nil
}

// mustWS dials with the operator token or fails the test.
func (s *system) mustWS(runID, kind string, q url.Values) *websocket.Conn {
	s.t.Helper()
	c, code, err := s.dialWS(runID, kind, q, nil)
	if err != nil {
		s.t.Fatalf("dial %s socket of %s: %d %v", kind, runID, code, err)
	}
	return c
}

// tclient is one attach client: it reads frames in the background and
// collects the output bytes, so a test can wait on what the screen got.
type tclient struct {
	t      testing.TB
	c      *websocket.Conn
	mu     sync.Mutex
	frames []wire.TermFrame // every non-data frame, in order
	out    strings.Builder  // every data byte
	closed error            // why reading stopped
	change chan struct{}
}

func (s *system) attach(runID string, q url.Values) *tclient {
	s.t.Helper()
	tm := &tclient{t: s.t, c: s.mustWS(runID, "attach", q), change: make(chan struct{}, 1)}
	go tm.read()
	return tm
}

func (tm *tclient) read() {
	for {
		_, b, err := tm.c.Read(tm.t.Context())
		tm.mu.Lock()
		if err != nil {
			tm.closed = err
			tm.mu.Unlock()
			tm.signal()
			return
		}
		var f wire.TermFrame
		if json.Unmarshal(b, &f) == nil {
			if f.Type == wire.WSData {
				tm.out.Write(f.Bytes)
			} else {
				tm.frames = append(tm.frames, f)
			}
		}
		tm.mu.Unlock()
		tm.signal()
	}
}

func (tm *tclient) signal() {
	select {
	case tm.change <- struct{}{}:
	default:
	}
}

// wait polls cond (under the lock) until it holds or d passes.
func (tm *tclient) wait(d time.Duration, what string, cond func() bool) {
	tm.t.Helper()
	deadline := time.After(d)
	for {
		tm.mu.Lock()
		ok := cond()
		tm.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-tm.change:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			tm.mu.Lock()
			defer tm.mu.Unlock()
			tm.t.Fatalf("no %s within %s; frames %+v; closed %v; output %q", what, d, tm.frames, tm.closed, tail(tm.out.String(), 400))
		}
	}
}

// waitFrame waits for a non-data frame of this type (and code, if given).
func (tm *tclient) waitFrame(typ, code string) wire.TermFrame {
	tm.t.Helper()
	var got wire.TermFrame
	tm.wait(15*time.Second, typ+" "+code, func() bool {
		for _, f := range tm.frames {
			if f.Type == typ && (code == "" || f.Code == code) {
				got = f
				return true
			}
		}
		return false
	})
	return got
}

// waitOutput waits until the collected output contains want.
func (tm *tclient) waitOutput(want string) {
	tm.t.Helper()
	tm.wait(15*time.Second, "output "+strconv.Quote(want), func() bool { return strings.Contains(tm.out.String(), want) })
}

// waitClosed waits until the socket has closed and returns how.
func (tm *tclient) waitClosed() error {
	tm.t.Helper()
	tm.wait(15*time.Second, "close", func() bool { return tm.closed != nil })
	return tm.closed
}

func (tm *tclient) has(typ, code string) bool {
	tm.mu.Lock()
	defer tm.mu.Unlock()
	for _, f := range tm.frames {
		if f.Type == typ && f.Code == code {
			return true
		}
	}
	return false
}

// send writes one client frame.
func (tm *tclient) send(f wire.TermFrame) error {
	b, _ := json.Marshal(f)
	return tm.sendRaw(b)
}

func (tm *tclient) sendRaw(b []byte) error {
	ctx, cancel := context.WithTimeout(tm.t.Context(), 10*time.Second)
	defer cancel()
	return tm.c.Write(ctx, websocket.MessageText, b)
}

func (tm *tclient) input(s string) {
	tm.t.Helper()
	if err := tm.send(wire.TermFrame{Type: wire.WSInput, Bytes: []byte(s)}); err != nil {
		tm.t.Fatalf("input: %v", err)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// startRun starts a shell run and waits until it runs.
//
// Each run gets a folder of its own as its cwd: under the pty executor
// one workspace has one live run (docs/architecture.md#the-pty-holder).
func (s *system) startRun(task wire.WorkItem, prompt string) wire.Run {
	s.t.Helper()
	var r wire.Run
	s.must(202, "POST", "/api/v1/runs", map[string]any{"task_id": task.ID, "provider": "shell", "prompt": prompt, "cwd": s.t.TempDir()}, &r)
	return s.waitRun(r.ID, "running", 60*time.Second, func(r wire.Run) bool { return r.Status == "running" })
}

// waitPane waits until the run's cached pane contains want.
func (s *system) waitPane(runID, want string) wire.Pane {
	s.t.Helper()
	var p wire.Pane
	if !eventually.Within(20*time.Second, func() bool {
		p = wire.Pane{}
		s.must(200, "GET", "/api/v1/runs/"+runID+"/pane", nil, &p)
		return strings.Contains(p.Capture, want)
	}) {
		s.t.Fatalf("pane of %s never showed %q:\n%s", runID, want, p.Capture)
	}
	return p
}

// events returns the run's events of one topic.
func (s *system) runEvents(runID, topic string) []wire.Event {
	var l wire.EventList
	s.must(200, "GET", "/api/v1/runs/"+runID+"/events", nil, &l)
	var out []wire.Event
	for _, ev := range l.Events {
		if ev.Topic == topic {
			out = append(out, ev)
		}
	}
	return out
}

// metric reads one unlabelled sample from /metrics.
func (s *system) metric(name string) float64 {
	s.t.Helper()
	req, _ := http.NewRequestWithContext(s.t.Context(), "GET", s.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			if err == nil {
				return v
			}
		}
	}
	s.t.Fatalf("metric %s not found", name)
	return 0
}

// tinyReceiveBuffer is an HTTP client whose sockets have a 4 KiB receive
// buffer, so a client that stops reading stalls the server's writes to
// it quickly instead of after megabytes of kernel buffering.
func tinyReceiveBuffer() *http.Client {
	d := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		return errors.Join(err, serr)
	}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
}

// listenerPID finds the process listening on the TCP port of url (serve),
// through /proc: the test did not start serve itself.
func listenerPID(rawURL string) (int, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return 0, err
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		return 0, err
	}
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 10 || fs[3] != "0A" { // LISTEN
				continue
			}
			_, p, ok := strings.Cut(fs[1], ":")
			if n, err := strconv.ParseInt(p, 16, 32); ok && err == nil && int(n) == port {
				inodes[fs[9]] = true
			}
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range procs {
		link, err := os.Readlink(fd)
		if err != nil || !strings.HasPrefix(link, "socket:[") {
			continue
		}
		if inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] {
			return strconv.Atoi(strings.Split(fd, "/")[2])
		}
	}
	return 0, fmt.Errorf("no process listens on port %d", port)
}
