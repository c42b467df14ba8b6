package serve

import (
	"bufio"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"pam/internal/datadir"
	"pam/internal/eventually"
	"pam/internal/store/storetest"
)

// pam up prints the dashboard URL with the token in its fragment only to
// a terminal: written to a pipe (a log collector, a file, a journal) the
// line names the token file instead, and the token appears nowhere in
// the output.
func TestDashboardTokenOnlyToTerminal(t *testing.T) {
	t.Parallel()
	// dashboardLine runs serve with stdout on w until it prints the
	// dashboard line, read from r, and returns that line and the token.
	dashboardLine := func(w *os.File, r *os.File) (string, string, string) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		tokens := make(chan string, 1)
		dir := t.TempDir()
		o := Options{Bind: "127.0.0.1", DataDir: dir, DatabaseURL: storetest.URL(t), Stdout: w,
			DashboardURL: true, Ready: func(_, token string) { tokens <- token }}
		go func() { done <- Run(ctx, o) }()
		defer func() {
			cancel()
			select {
			case <-done:
			case <-time.After(eventually.Long):
				t.Errorf("serve did not stop within %s", eventually.Long)
			}
		}()
		lines := make(chan string, 4)
		go func() {
			sc := bufio.NewScanner(r)
			for sc.Scan() {
				lines <- strings.TrimRight(sc.Text(), "\r")
			}
		}()
		deadline := time.After(60 * time.Second)
		for {
			select {
			case l := <-lines:
				if strings.HasPrefix(l, "dashboard:") {
					return l, <-tokens, dir
				}
			case err := <-done:
				t.Fatalf("serve ended: %v", err)
			case <-deadline:
				t.Fatal("no dashboard line within 60s")
			}
		}
	}

	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	line, token, dir := dashboardLine(pw, pr)
	if strings.Contains(line, token) {
		t.Fatalf("the token went to a pipe: %q", line)
	}
	if !strings.Contains(line, "http://127.0.0.1:") || !strings.Contains(line, datadir.TokenPath(dir)) {
		t.Fatalf("the line to a pipe says neither where the dashboard is nor where the token is: %q", line)
	}

	master, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	defer tty.Close()
	line, token, _ = dashboardLine(tty, master)
	if !strings.Contains(line, "/#token="+token) {
		t.Fatalf("to a terminal the dashboard line has no token: %q", line)
	}
}
