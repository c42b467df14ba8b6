package pamtest

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ListenTimeout bounds how long StartServe waits for serve to listen:
// with an embedded database a cold start runs initdb, under -race, on a
// busy machine.
const ListenTimeout = 90 * time.Second

// ServeOptions says how to run `pam serve`.
type ServeOptions struct {
	// DataDir is PAM_DATA_DIR; a fresh ShortDir when empty.
	DataDir string
	// DatabaseURL is PAM_DATABASE_URL (a storetest.URL clone, say); empty
	// runs serve's embedded cluster in DataDir.
	DatabaseURL string
	// Port is PAM_PORT; 0 takes a free one. A restarted serve passes the
	// port it had, so its workers find it again.
	Port int
	// Env is added last, overriding the defaults (PAM_LOG_LEVEL=debug,
	// PAM_BIND=127.0.0.1).
	Env []string
	// NoWait returns at once instead of waiting until serve listens: for a
	// serve expected to exit, or to wait as a standby.
	NoWait bool
}

// Serve is a `pam serve` process.
type Serve struct {
	*Proc
	// DataDir is its data dir.
	DataDir string
	// URL is where it listens (http://127.0.0.1:port), once it does.
	URL string
	// Port is URL's port.
	Port int
	// Token is the operator token it wrote to DataDir, once it listens.
	Token string
}

var (
	listenRe  = regexp.MustCompile(`pam serve listening on (\S+)`)
	standbyRe = regexp.MustCompile(`pam serve standing by on (\S+)`)
)

// ListenURL finds the address in serve's (or `pam up`'s) "pam serve
// listening on URL" line of out.
func ListenURL(out string) string {
	if m := listenRe.FindStringSubmatch(out); m != nil {
		return m[1]
	}
	return ""
}

// StartServe runs `pam serve` and, unless opts.NoWait, waits until it
// listens. It is ended when the test ends.
func StartServe(t testing.TB, opts ServeOptions) *Serve {
	t.Helper()
	if opts.DataDir == "" {
		opts.DataDir = ShortDir(t, "pams-")
	}
	env := append([]string{"PAM_DATA_DIR=" + opts.DataDir, "PAM_DATABASE_URL=" + opts.DatabaseURL,
		"PAM_BIND=127.0.0.1", "PAM_PORT=" + strconv.Itoa(opts.Port), "PAM_LOG_LEVEL=debug"}, opts.Env...)
	s := &Serve{Proc: Start(t, "serve", env, "serve"), DataDir: opts.DataDir}
	if !opts.NoWait {
		s.WaitListening(ListenTimeout)
	}
	return s
}

// WaitListening waits up to d until serve says where it listens, then
// reads its token; it fails the test if serve exits first or d passes.
func (s *Serve) WaitListening(d time.Duration) {
	s.t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for s.URL == "" {
		s.URL = ListenURL(s.Stdout.String())
		if s.URL != "" {
			break
		}
		select {
		case <-tick.C:
		case <-s.Done():
			if s.URL = ListenURL(s.Stdout.String()); s.URL == "" {
				s.t.Fatalf("pam serve exited (%s) before listening: %s", s.Cmd.ProcessState, s.Stderr.String())
			}
		case <-deadline.C:
			s.t.Fatalf("pam serve did not listen within %s: %s", d, s.Stderr.String())
		}
	}
	i := strings.LastIndex(s.URL, ":")
	s.Port, _ = strconv.Atoi(s.URL[i+1:])
	b, err := os.ReadFile(filepath.Join(s.DataDir, "token"))
	if err != nil {
		s.t.Fatalf("serve's token: %v", err)
	}
	s.Token = strings.TrimSpace(string(b))
}

// WaitStandby waits up to d until serve says it stands by (another serve
// is active on its database) and returns the URL where it answers as a
// standby; it fails the test if serve exits first or d passes.
func (s *Serve) WaitStandby(d time.Duration) string {
	s.t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if m := standbyRe.FindStringSubmatch(s.Stdout.String()); m != nil {
			return m[1]
		}
		select {
		case <-tick.C:
		case <-s.Done():
			if m := standbyRe.FindStringSubmatch(s.Stdout.String()); m != nil {
				return m[1]
			}
			s.t.Fatalf("pam serve exited (%s) before standing by: %s", s.Cmd.ProcessState, s.Stderr.String())
		case <-deadline.C:
			s.t.Fatalf("pam serve did not stand by within %s: %s", d, s.Stderr.String())
		}
	}
}
