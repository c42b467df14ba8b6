package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/wire"
)

// TestPassEnvReachesCLI: the tmux server's environment is clean, so a
// credential exported to the worker reaches the CLI only when a provider's
// pass_env or PAM_PASS_ENV names it. Its value travels in the 0600
// dispatch file alone: never on a command line of the session's
// processes, in the tmux server's environment, or in the worker's log.
func TestPassEnvReachesCLI(t *testing.T) {
	t.Parallel()
	s, _ := newFaultSystem(t, "")
	secret := func(name string) string {
		b := make([]byte, 8)
		rand.Read(b)
		return name + "-" + hex.EncodeToString(b)
	}
	catalogKey, extraKey, notListed := secret("catalog"), secret("extra"), secret("unlisted")
	conf := pamtest.ShortDir(t, "pamc-")
	if err := os.WriteFile(filepath.Join(conf, "providers.toml"), []byte("[providers.shell]\npass_env = [\"CATALOG_KEY\", \"CATALOG_UNSET\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w := s.faultWorker("passenv-host", s.url, "PAM_CONFIG_DIR="+conf, "PAM_LOG_LEVEL=debug",
		"CATALOG_KEY="+catalogKey, "EXTRA_KEY="+extraKey, "NOT_LISTED="+notListed, "PAM_PASS_ENV=EXTRA_KEY, EXTRA_UNSET")

	out := filepath.Join(pamtest.ShortDir(t, "pamo-"), "env")
	prompt := fmt.Sprintf(`printf 'catalog=%%s extra=%%s unlisted=%%s unset=%%s\n' "$CATALOG_KEY" "$EXTRA_KEY" "${NOT_LISTED-none}" "${CATALOG_UNSET-none}${EXTRA_UNSET-none}" > %s.tmp && mv %s.tmp %s; exec sleep 300`, out, out, out)
	r := s.runShell(s.task().ID, prompt, nil)
	var got string
	eventually.Wait(t, 60*time.Second, "the CLI to write its environment", func() bool {
		b, err := os.ReadFile(out)
		got = string(b)
		return err == nil
	})
	want := fmt.Sprintf("catalog=%s extra=%s unlisted=none unset=nonenone\n", catalogKey, extraKey)
	if got != want {
		t.Fatalf("the CLI saw %q, want %q", got, want)
	}
	s.waitRun(r.ID, "running", eventually.Long, func(r wire.Run) bool { return r.Status == "running" })

	// The dispatch file carries the values, readable by the worker's user
	// alone.
	st, err := os.Stat(filepath.Join(w.opts.DataDir, "worker", "dispatch", r.ID+".json"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("dispatch file: %v %v", st, err)
	}

	// The session's processes: the wrapper (the pane's process) and the
	// CLI under it. Their command lines never hold a value; the CLI's
	// environment does (so the scan reads what it should).
	wrapper := w.panePID(r.SessionName)
	values := []string{catalogKey, extraKey, notListed}
	var cli int
	eventually.Wait(t, eventually.Medium, "the CLI under the wrapper", func() bool {
		cli = childOf(wrapper)
		return cli != 0
	})
	for _, pid := range []int{wrapper, cli} {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			t.Fatalf("cmdline of %d: %v", pid, err)
		}
		for _, v := range values {
			if bytes.Contains(cmdline, []byte(v)) {
				t.Errorf("process %d's command line holds a passed value: %q", pid, cmdline)
			}
		}
	}
	if env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", cli)); err != nil || !bytes.Contains(env, []byte("CATALOG_KEY="+catalogKey)) {
		t.Errorf("the CLI's environment lacks CATALOG_KEY (%v)", err)
	}
	// No process of this machine shows a value on its command line.
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		for _, v := range values {
			if bytes.Contains(b, []byte(v)) {
				t.Errorf("%s holds a passed value: %q", p, b)
			}
		}
	}
	genv, err := w.serverEnv()
	if err != nil {
		t.Fatalf("the session server's environment: %v %s", err, genv)
	}
	for _, v := range values {
		if strings.Contains(genv, v) {
			t.Errorf("the tmux server's environment holds a passed value:\n%s", genv)
		}
	}
	s.must(202, "POST", "/api/v1/runs/"+r.ID+"/stop", map[string]any{"force": true}, nil)
	eventually.Wait(t, 15*time.Second, "the session to end", func() bool { return !w.hasSession(r.SessionName) })
	logs := w.proc.Stderr.String()
	if !strings.Contains(logs, r.ID) {
		t.Fatalf("the worker's log does not mention the run; nothing was checked:\n%s", logs)
	}
	for _, v := range values {
		if strings.Contains(logs, v) {
			t.Errorf("the worker's log holds a passed value:\n%s", logs)
		}
	}
}

// childOf returns the pid of a child process of parent, or 0.
func childOf(parent int) int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(parent) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			return pid
		}
	}
	return 0
}
