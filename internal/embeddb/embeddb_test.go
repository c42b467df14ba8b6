package embeddb

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"pam/internal/eventually"
	"pam/internal/pamtest"
)

// parentDir makes a short folder for one test's clusters and removes it when
// the test ends, after ending any postmaster a failed test left running in
// it. It is 0711 so that, when the tests run as root, the postgres user can
// traverse it (t.TempDir is 0700, and too deep for a socket path).
func parentDir(t *testing.T) string {
	t.Helper()
	pamtest.Require(t, "postgres")
	base := os.TempDir()
	if len(base) > 40 {
		base = "/tmp"
	}
	p, err := os.MkdirTemp(base, "pamdb-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pidFiles, _ := filepath.Glob(filepath.Join(p, "*", "postmaster.pid"))
		for _, f := range pidFiles {
			if pid := pidFromFile(f); pid > 0 && isPostgres(pid) {
				_ = syscall.Kill(pid, syscall.SIGQUIT)
				waitGone(t, pid, eventually.Long)
			}
		}
		if err := os.RemoveAll(p); err != nil {
			t.Errorf("remove %s: %v", p, err)
		}
	})
	return p
}

// clusterDir returns a fresh cluster folder path (not yet created).
func clusterDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(parentDir(t), "pg")
	if n := len(filepath.Join(dir, socketName)); n >= 100 {
		t.Fatalf("test socket path is %d bytes; set TMPDIR to a shorter folder", n)
	}
	return dir
}

// start starts a cluster and stops it when the test ends.
func start(t *testing.T, opts Options) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("start %s: %v", opts.Dir, err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	return c
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func mustExec(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(t.Context(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func queryString(t *testing.T, conn *pgx.Conn, sql string, args ...any) string {
	t.Helper()
	var s string
	if err := conn.QueryRow(t.Context(), sql, args...).Scan(&s); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

func pidFromFile(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	return pid
}

// procStat returns the state and parent pid of pid from /proc, ok false
// when there is no such process.
func procStat(pid int) (state byte, ppid int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	return f[0][0], ppid, true
}

// alive reports whether pid runs; a zombie has released everything it held
// (shared memory included) and counts as gone.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	state, _, ok := procStat(pid)
	return !ok || state != 'Z'
}

func isPostgres(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && strings.Contains(string(b), "postgres")
}

// children lists the processes whose parent is pid.
func children(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if _, ppid, ok := procStat(n); ok && ppid == pid {
			kids = append(kids, n)
		}
	}
	return kids
}

func waitGone(t *testing.T, pid int, timeout time.Duration) {
	t.Helper()
	eventually.Wait(t, timeout, fmt.Sprintf("process %d to end", pid), func() bool { return !alive(pid) })
}

func TestStartInitialisesThenReuses(t *testing.T) {
	t.Parallel()
	dir := clusterDir(t)

	c := start(t, Options{Dir: dir})
	if !c.Created || c.Adopted {
		t.Fatalf("first start: Created=%v Adopted=%v, want true false", c.Created, c.Adopted)
	}
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err != nil {
		t.Fatalf("PG_VERSION: %v", err)
	}
	if c.Dir() != dir || c.Pid() <= 0 {
		t.Fatalf("Dir=%q Pid=%d", c.Dir(), c.Pid())
	}

	// The cluster folder is private: 0700, owned by the postgres system
	// user when we are root (PostgreSQL refuses to run as root).
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 {
		t.Errorf("cluster dir mode %v, want 0700", st.Mode().Perm())
	}
	owner := st.Sys().(*syscall.Stat_t).Uid
	if os.Geteuid() == 0 {
		pg, err := user.Lookup("postgres")
		if err != nil {
			t.Fatal(err)
		}
		if strconv.Itoa(int(owner)) != pg.Uid {
			t.Errorf("cluster dir owned by uid %d, want postgres (%s)", owner, pg.Uid)
		}
	} else if int(owner) != os.Geteuid() {
		t.Errorf("cluster dir owned by uid %d, want %d", owner, os.Geteuid())
	}
	sock, err := os.Stat(filepath.Join(dir, socketName))
	if err != nil {
		t.Fatalf("socket: %v", err)
	}
	if sock.Mode()&os.ModeSocket == 0 || sock.Mode().Perm()&0o077 != 0 {
		t.Errorf("socket %s mode %v, want a socket only its owner may use", socketName, sock.Mode())
	}

	conn := connect(t, c.URL())
	if got := conn.Config().Host; got != dir {
		t.Errorf("connected to host %q, want the socket folder %q", got, dir)
	}
	if db := queryString(t, conn, "SELECT current_database()"); db != "pam" {
		t.Errorf("current_database = %q, want pam", db)
	}
	if la := queryString(t, conn, "SHOW listen_addresses"); la != "" {
		t.Errorf("listen_addresses = %q, want empty (no TCP)", la)
	}
	if sd := queryString(t, conn, "SHOW unix_socket_directories"); sd != dir {
		t.Errorf("unix_socket_directories = %q, want %q", sd, dir)
	}
	mustExec(t, conn, "CREATE TABLE kept (v text)")
	mustExec(t, conn, "INSERT INTO kept VALUES ('before restart')")
	_ = conn.Close(context.Background())

	if err := c.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "postmaster.pid")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("postmaster.pid after Stop: %v", err)
	}

	c2 := start(t, Options{Dir: dir})
	if c2.Created || c2.Adopted {
		t.Fatalf("second start: Created=%v Adopted=%v, want false false", c2.Created, c2.Adopted)
	}
	conn2 := connect(t, c2.URL())
	if v := queryString(t, conn2, "SELECT v FROM kept"); v != "before restart" {
		t.Errorf("row after restart = %q", v)
	}
}

func TestKilledServerIsAdoptedAndCrashIsRecovered(t *testing.T) {
	t.Parallel()
	dir := clusterDir(t)
	opts := Options{Dir: dir, Durable: true}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	// A server that is kill -9'd never runs Stop: its postmaster (in its own
	// session) keeps running. So this first cluster is simply dropped.
	c1, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, c1.URL())
	mustExec(t, conn, "CREATE TABLE kept (v text)")
	mustExec(t, conn, "INSERT INTO kept VALUES ('committed')")
	_ = conn.Close(context.Background())

	c2, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("start after a killed server: %v", err)
	}
	if !c2.Adopted || c2.Created || c2.Pid() != c1.Pid() {
		t.Fatalf("start after a killed server: Adopted=%v Created=%v pid %d, want true false %d",
			c2.Adopted, c2.Created, c2.Pid(), c1.Pid())
	}
	conn = connect(t, c2.URL())
	if v := queryString(t, conn, "SELECT v FROM kept"); v != "committed" {
		t.Fatalf("row in adopted cluster = %q", v)
	}
	_ = conn.Close(context.Background())

	// Now the postmaster itself crashes. Its children notice and exit soon;
	// until they have, the old shared memory is still in use.
	pid := pidFromFile(filepath.Join(dir, "postmaster.pid"))
	if pid != c2.Pid() {
		t.Fatalf("postmaster.pid holds %d, want %d", pid, c2.Pid())
	}
	kids := children(pid)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid, eventually.Long)
	for _, k := range kids {
		waitGone(t, k, eventually.Long)
	}

	c3 := start(t, opts)
	if c3.Adopted || c3.Created || c3.Pid() == pid {
		t.Fatalf("start after a crash: Adopted=%v Created=%v pid %d (crashed %d)", c3.Adopted, c3.Created, c3.Pid(), pid)
	}
	conn = connect(t, c3.URL())
	if v := queryString(t, conn, "SELECT v FROM kept"); v != "committed" {
		t.Fatalf("row after crash recovery = %q", v)
	}
}

func TestFindBinDir(t *testing.T) {
	t.Parallel()
	found, err := FindBinDir("")
	if err != nil {
		t.Fatalf("FindBinDir: %v (the tests need PostgreSQL's server binaries: make deps)", err)
	}
	for _, b := range []string{"initdb", "postgres"} {
		if !isExec(filepath.Join(found, b)) {
			t.Errorf("%s has no %s", found, b)
		}
	}
	v := binVersion(found)
	if v == "" {
		t.Fatalf("no version from %s/postgres", found)
	}
	if d, err := FindBinDir(v); err != nil || binVersion(d) != v {
		t.Errorf("FindBinDir(%q) = %q, %v", v, d, err)
	}

	// A cluster made by a version that is not installed names that version.
	_, err = FindBinDir("99")
	if err == nil || errors.Is(err, ErrNoBinaries) ||
		!strings.Contains(err.Error(), "PostgreSQL 99") || !strings.Contains(err.Error(), "PAM_DATABASE_URL") {
		t.Errorf("FindBinDir(99) = %v, want an error naming PostgreSQL 99 and PAM_DATABASE_URL", err)
	}

	// Nothing on PATH nor in the searched folders; a folder with initdb but
	// no postgres does not count.
	empty := t.TempDir()
	half := t.TempDir()
	if err := os.WriteFile(filepath.Join(half, "initdb"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, pathList := range []string{"", half, "relative/bin" + string(filepath.ListSeparator) + half} {
		_, err = findBinDir("", pathList, []string{filepath.Join(empty, "*", "bin")})
		if !errors.Is(err, ErrNoBinaries) {
			t.Fatalf("PATH %q: err = %v, want ErrNoBinaries", pathList, err)
		}
		for _, fix := range []string{"install PostgreSQL", "PAM_DATABASE_URL"} {
			if !strings.Contains(err.Error(), fix) {
				t.Errorf("error %q does not name the fix %q", err, fix)
			}
		}
	}

	// The glob folders are searched too, highest major version first.
	for _, major := range []string{"9", "15"} {
		bin := filepath.Join(empty, major, "bin")
		if err := os.MkdirAll(bin, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, b := range []string{"initdb", "postgres"} {
			if err := os.WriteFile(filepath.Join(bin, b), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, err := findBinDir("", "", []string{filepath.Join(empty, "*", "bin")})
	if want := filepath.Join(empty, "15", "bin"); err != nil || got != want {
		t.Errorf("findBinDir = %q, %v; want %q", got, err, want)
	}
}

func TestSocketPathLimit(t *testing.T) {
	t.Parallel()
	parent := parentDir(t)
	// dirOfSocketLen returns a cluster folder whose socket path is n bytes.
	dirOfSocketLen := func(n int) string {
		pad := n - len(parent) - len("/") - len("/"+socketName)
		if pad < 1 {
			t.Fatalf("temp dir %s too long for this test", parent)
		}
		return filepath.Join(parent, strings.Repeat("d", pad))
	}
	limit := maxSocketPath()

	tooLong := dirOfSocketLen(limit + 1)
	_, err := Start(t.Context(), Options{Dir: tooLong})
	if err == nil {
		t.Fatalf("Start with a %d-byte socket path succeeded", limit+1)
	}
	for _, want := range []string{strconv.Itoa(limit), "PAM_DATA_DIR"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if _, err := os.Stat(tooLong); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Start created %s before refusing it (%v)", tooLong, err)
	}

	// At the limit PostgreSQL itself accepts the path.
	c := start(t, Options{Dir: dirOfSocketLen(limit)})
	conn := connect(t, c.URL())
	if db := queryString(t, conn, "SELECT current_database()"); db != "pam" {
		t.Errorf("current_database = %q", db)
	}
}
