package fleetsim

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"pam/internal/embeddb"
)

// serveStopGrace is how long serve has to shut down after SIGTERM before
// it is killed.
const serveStopGrace = 20 * time.Second

var listenRe = regexp.MustCompile(`pam serve listening on (\S+)`)

// serveProc is one `pam serve` process with the embedded database in a
// data dir of the simulation's, bound to loopback.
type serveProc struct {
	cmd     *exec.Cmd
	dataDir string
	url     string
	port    int
	token   string
	done    chan struct{}
	err     error // the exit, once done is closed
}

// startServe runs `pam serve` on dataDir and port (0 picks one) and waits
// until it listens. Its stdout and stderr are appended to logw. The
// process has a group of its own, so a terminal's Ctrl-C reaches only the
// simulation, which then stops it in order (the database with it).
func startServe(ctx context.Context, pam string, environ []string, dataDir string, port int, env []string, logw io.Writer) (*serveProc, error) {
	cmd := exec.Command(pam, "serve")
	cmd.Env = append(servingEnv(environ), "PAM_DATA_DIR="+dataDir, "PAM_DATABASE_URL=", "PAM_BIND=127.0.0.1",
		"PAM_PORT="+strconv.Itoa(port))
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = logw
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start pam serve: %w", err)
	}
	p := &serveProc{cmd: cmd, dataDir: dataDir, done: make(chan struct{})}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logw, line)
			if m := listenRe.FindStringSubmatch(line); m != nil {
				select {
				case urls <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	go func() { p.err = cmd.Wait(); close(p.done) }()

	// A cold start runs initdb: allow for a slow machine.
	timer := time.NewTimer(2 * time.Minute)
	defer timer.Stop()
	select {
	case p.url = <-urls:
	case <-p.done:
		return nil, fmt.Errorf("pam serve exited before listening (%v); its log is in %s", p.err, dataDir)
	case <-timer.C:
		p.stop()
		return nil, errors.New("pam serve did not listen within 2m")
	case <-ctx.Done():
		p.stop()
		return nil, ctx.Err()
	}
	i := strings.LastIndex(p.url, ":")
	p.port, _ = strconv.Atoi(p.url[i+1:])
	b, err := os.ReadFile(filepath.Join(dataDir, "token"))
	if err != nil {
		p.stop()
		return nil, fmt.Errorf("read serve's operator token: %w", err)
	}
	p.token = strings.TrimSpace(string(b))
	return p, nil
}

// servingEnv is environ without any PAM_ setting: the operator's
// PAM_DATABASE_URL or PAM_PORT must not reach the serve of a simulation.
func servingEnv(environ []string) []string {
	var env []string
	for _, kv := range environ {
		if !strings.HasPrefix(kv, "PAM_") {
			env = append(env, kv)
		}
	}
	return env
}

// pid is the serve process's id.
func (p *serveProc) pid() int { return p.cmd.Process.Pid }

// stop ends serve (SIGTERM, SIGKILL after serveStopGrace) and, if it left
// its embedded database running (it was killed), that too.
func (p *serveProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(serveStopGrace)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	if pid := embeddb.RunningPID(filepath.Join(p.dataDir, "postgres")); pid > 0 {
		// A fast shutdown of the orphaned cluster, then wait for it.
		if syscall.Kill(pid, syscall.SIGINT) == nil {
			deadline := time.Now().Add(serveStopGrace)
			for time.Now().Before(deadline) && syscall.Kill(pid, 0) == nil {
				time.Sleep(50 * time.Millisecond)
			}
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// serveMetrics is what serve's /metrics says of its Go runtime and
// uplinks: where its memory goes.
type serveMetrics struct {
	Goroutines, HeapInuse, StackInuse, Uplinks float64
}

// scrapeMetrics reads serve's /metrics with the operator token.
func scrapeMetrics(ctx context.Context, c *http.Client, base, token string) (serveMetrics, error) {
	var m serveMetrics
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return m, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return m, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	want := map[string]*float64{"go_goroutines": &m.Goroutines, "go_memstats_heap_inuse_bytes": &m.HeapInuse,
		"go_memstats_stack_inuse_bytes": &m.StackInuse, "pam_uplinks_connected": &m.Uplinks}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if p := want[name]; ok && p != nil {
			*p, _ = strconv.ParseFloat(strings.TrimSpace(val), 64)
		}
	}
	return m, sc.Err()
}
