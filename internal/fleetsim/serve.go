package fleetsim

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"pam/internal/benchproc"
	"pam/internal/embeddb"
)

// serveStopGrace is how long serve has to shut down after SIGTERM before
// it is killed.
const serveStopGrace = 20 * time.Second

// serveProc is one `pam serve` process with the embedded database in a
// data dir of the simulation's, bound to loopback.
type serveProc struct {
	*benchproc.Proc
	dataDir string
	url     string
	port    int
	token   string
}

// startServe runs `pam serve` on dataDir and port (0 picks one) and waits
// until it listens. Its stdout and stderr are appended to the file
// logPath, which a restarted serve shares. The process has a group of
// its own, so a terminal's Ctrl-C reaches only the simulation, which then
// stops it in order (the database with it).
func startServe(ctx context.Context, pam string, environ []string, dataDir string, port int, env []string, logPath string) (*serveProc, error) {
	cmdEnv := append(servingEnv(environ), "PAM_DATA_DIR="+dataDir, "PAM_DATABASE_URL=", "PAM_BIND=127.0.0.1",
		"PAM_PORT="+strconv.Itoa(port))
	cmdEnv = append(cmdEnv, env...)
	proc, err := benchproc.Start("serve", pam, "", logPath, cmdEnv, "serve")
	if err != nil {
		return nil, err
	}
	p := &serveProc{Proc: proc, dataDir: dataDir}
	// A cold start runs initdb: allow for a slow machine.
	if p.url, err = p.WaitListening(ctx, 2*time.Minute); err != nil {
		p.stop()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
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

// stop ends serve (SIGTERM, SIGKILL after serveStopGrace) and, if it left
// its embedded database running (it was killed), that too.
func (p *serveProc) stop() {
	p.Stop(serveStopGrace)
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
