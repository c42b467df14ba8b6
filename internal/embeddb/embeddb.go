// Package embeddb runs the private PostgreSQL cluster that `pam serve` uses
// when PAM_DATABASE_URL is unset (docs/architecture.md#configuration-and-files-on-disk). It is a real PostgreSQL:
// initialised on first start, listening only on a Unix socket inside the
// cluster folder, run as the postgres system user when we are root, and
// stopped on exit. A cluster left running by a killed server is adopted; one
// left crashed is recovered by PostgreSQL's own crash recovery on start.
package embeddb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNoBinaries is returned when no PostgreSQL server binaries are found.
var ErrNoBinaries = errors.New("PostgreSQL server binaries (initdb, postgres) not found on PATH, in /usr/lib/postgresql/*/bin or in Homebrew's paths; " +
	"fix: install PostgreSQL (Debian: apt-get install -y postgresql), or set PAM_DATABASE_URL to an existing server")

// Superuser is the database role the cluster is initialised with.
const Superuser = "pam"

// socketName is the server's socket file inside the cluster folder.
const socketName = ".s.PGSQL.5432"

// maxSocketPath is the longest path a Unix socket address holds: sun_path
// is 108 bytes on Linux and 104 on macOS and the BSDs, with its terminating
// NUL. PostgreSQL refuses a longer socket path.
func maxSocketPath() int {
	if runtime.GOOS == "linux" {
		return 107
	}
	return 103
}

// Options configures a cluster.
type Options struct {
	// Dir is the cluster folder (PGDATA); its socket lives inside it.
	Dir string
	// Database is created on start when missing ("pam" when empty).
	Database string
	// Durable=false turns off fsync: for test clusters only.
	Durable bool
	// Logger receives start/stop events.
	Logger *slog.Logger
	// StartTimeout bounds how long start and recovery may take.
	StartTimeout time.Duration
}

// Cluster is a started private PostgreSQL.
type Cluster struct {
	opts    Options
	binDir  string
	cred    *syscall.Credential
	cmd     *exec.Cmd     // set when this process started the postmaster
	exited  chan struct{} // closed when cmd has been reaped
	pid     int
	Created bool // true when Start initialised a new cluster
	Adopted bool // true when Start found the cluster already running
}

// Start initialises the cluster if needed, starts it (or adopts a running
// postmaster), waits until it accepts connections and creates the database.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Database == "" {
		opts.Database = "pam"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 2 * time.Minute
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	if sock := filepath.Join(dir, socketName); len(sock) > maxSocketPath() {
		return nil, fmt.Errorf("embedded database socket path %s is %d bytes, over the Unix socket limit of %d bytes; "+
			"fix: use a shorter PAM_DATA_DIR (the socket lives in <data>/postgres)", sock, len(sock), maxSocketPath())
	}
	opts.Dir = dir
	c := &Cluster{opts: opts}
	if os.Geteuid() == 0 {
		cred, err := postgresCredential()
		if err != nil {
			return nil, err
		}
		c.cred = cred
	}
	version := ""
	if b, err := os.ReadFile(filepath.Join(dir, "PG_VERSION")); err == nil {
		version = strings.TrimSpace(string(b))
	}
	c.binDir, err = FindBinDir(version)
	if err != nil {
		return nil, err
	}
	if version == "" {
		if err := c.initdb(ctx); err != nil {
			return nil, err
		}
		c.Created = true
	}
	if err := c.start(ctx); err != nil {
		return nil, err
	}
	if err := c.ensureDatabase(ctx); err != nil {
		_ = c.Stop()
		return nil, err
	}
	return c, nil
}

// ConnString returns a connection string for database db over the socket.
func (c *Cluster) ConnString(db string) string {
	return fmt.Sprintf("host=%s port=5432 user=%s dbname=%s sslmode=disable", quoteConn(c.opts.Dir), Superuser, quoteConn(db))
}

// URL is the connection string of the configured database.
func (c *Cluster) URL() string { return c.ConnString(c.opts.Database) }

// Dir is the cluster folder.
func (c *Cluster) Dir() string { return c.opts.Dir }

// Pid is the postmaster's process id.
func (c *Cluster) Pid() int { return c.pid }

func quoteConn(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

func postgresCredential() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, the embedded database must run as the postgres system user, which does not exist (%v); install PostgreSQL (apt-get install -y postgresql) or set PAM_DATABASE_URL", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// binGlobs are the folders searched after PATH, in order: Debian's, then
// Homebrew's. Within one pattern the highest major version comes first.
var binGlobs = []string{
	"/usr/lib/postgresql/*/bin",
	"/opt/homebrew/opt/postgresql*/bin",
	"/usr/local/opt/postgresql*/bin",
}

// FindBinDir finds a folder holding initdb and postgres. With a version
// (the PG_VERSION of an existing cluster) only that major version is taken.
func FindBinDir(version string) (string, error) {
	return findBinDir(version, os.Getenv("PATH"), binGlobs)
}

// findBinDir searches the folders of pathList (a PATH value), then globs.
func findBinDir(version, pathList string, globs []string) (string, error) {
	var candidates []string
	for _, d := range filepath.SplitList(pathList) {
		if filepath.IsAbs(d) && isExec(filepath.Join(d, "initdb")) {
			candidates = append(candidates, d)
		}
	}
	for _, g := range globs {
		found, _ := filepath.Glob(g)
		sort.SliceStable(found, func(i, j int) bool { return majorOf(found[i]) > majorOf(found[j]) })
		candidates = append(candidates, found...)
	}
	for _, dir := range candidates {
		if !isExec(filepath.Join(dir, "initdb")) || !isExec(filepath.Join(dir, "postgres")) {
			continue
		}
		if version != "" && binVersion(dir) != version {
			continue
		}
		return dir, nil
	}
	if version != "" {
		return "", fmt.Errorf("the cluster was made by PostgreSQL %s, whose server binaries are not installed; fix: install PostgreSQL %s (Debian: apt-get install -y postgresql-%s), or set PAM_DATABASE_URL", version, version, version)
	}
	return "", ErrNoBinaries
}

func majorOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// binVersion returns the major version of the postgres binary in dir.
func binVersion(dir string) string {
	out, err := exec.Command(filepath.Join(dir, "postgres"), "--version").Output()
	if err != nil {
		return ""
	}
	// "postgres (PostgreSQL) 15.18 (Debian ...)"
	f := strings.Fields(string(out))
	if len(f) < 3 {
		return ""
	}
	return strings.SplitN(f[2], ".", 2)[0]
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, name), args...)
	cmd.Env = []string{"LC_ALL=C.UTF-8", "LANG=C.UTF-8", "PATH=/usr/bin:/bin", "TZ=UTC"}
	cmd.Dir = c.opts.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: c.cred}
	return cmd
}

func (c *Cluster) initdb(ctx context.Context) error {
	dir := c.opts.Dir
	c.opts.Logger.Info("initialising embedded database", "dir", dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return err
	}
	if c.cred != nil {
		if err := os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return err
		}
	}
	args := []string{"-D", dir, "-U", Superuser, "--auth=trust", "-E", "UTF8", "--no-locale", "--no-instructions"}
	if !c.opts.Durable {
		args = append(args, "--no-sync")
	}
	cmd := c.command(ctx, "initdb", args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb %s: %w: %s", dir, err, strings.TrimSpace(string(out)))
	}
	// Settings live in the cluster, not on a command line: a Unix socket in
	// the cluster folder only (which admits nobody but its owner), no TCP.
	conf := fmt.Sprintf("\n# written by pam\nlisten_addresses = ''\nunix_socket_directories = '%s'\nunix_socket_permissions = 0700\nmax_connections = 200\n",
		strings.ReplaceAll(dir, "'", "''"))
	if !c.opts.Durable {
		conf += "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n"
	}
	f, err := os.OpenFile(filepath.Join(dir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(conf); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// runningPid returns the pid of a live postmaster of this cluster, or 0.
func (c *Cluster) runningPid() int { return RunningPID(c.opts.Dir) }

// RunningPID returns the pid of a live postmaster of the cluster in dir
// (serve's is <data>/postgres), or 0: the load drivers measure and stop
// the cluster of the serve they started with it.
func RunningPID(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil || pid <= 0 {
		return 0
	}
	if syscall.Kill(pid, 0) != nil {
		return 0
	}
	return pid
}

func (c *Cluster) start(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	// A pid file alone is no proof of life: adopt only a postmaster that
	// answers. A stale pid file is left to postgres, which checks it itself.
	if pid := c.runningPid(); pid != 0 {
		if err := c.ping(ctx, "postgres"); err == nil {
			c.pid = pid
			c.Adopted = true
			c.opts.Logger.Info("adopted running embedded database", "pid", pid)
			return nil
		}
	}
	logf, err := os.OpenFile(filepath.Join(filepath.Dir(c.opts.Dir), "postgres.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	// Not CommandContext: the postmaster must outlive a cancelled start-up
	// context; Stop ends it.
	cmd := c.command(context.Background(), "postgres", "-D", c.opts.Dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	c.cmd, c.pid = cmd, cmd.Process.Pid
	c.exited = make(chan struct{})
	go func() { _ = cmd.Wait(); close(c.exited) }()
	for {
		if err := c.ping(ctx, "postgres"); err == nil {
			c.opts.Logger.Info("embedded database started", "pid", c.pid, "dir", c.opts.Dir)
			return nil
		}
		select {
		case <-c.exited:
			return fmt.Errorf("postgres exited during start-up; see %s", logf.Name())
		case <-ctx.Done():
			_ = c.Stop()
			return fmt.Errorf("postgres did not accept connections within %s; see %s", c.opts.StartTimeout, logf.Name())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Cluster) ping(ctx context.Context, db string) error {
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(pctx, c.ConnString(db))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.Ping(pctx)
}

func (c *Cluster) ensureDatabase(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.ConnString("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", c.opts.Database).Scan(&exists); err != nil {
		return err
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{c.opts.Database}.Sanitize())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P04" { // duplicate_database: created meanwhile
		return nil
	}
	if err != nil {
		return fmt.Errorf("create database %s: %w", c.opts.Database, err)
	}
	return nil
}

// Stop shuts the postmaster down (fast shutdown: sessions are ended,
// everything committed is kept) and waits for it to exit.
func (c *Cluster) Stop() error {
	if c.pid == 0 {
		return nil
	}
	_ = syscall.Kill(c.pid, syscall.SIGINT)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if c.gone() {
			c.opts.Logger.Info("embedded database stopped", "pid", c.pid)
			c.pid = 0
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = syscall.Kill(c.pid, syscall.SIGQUIT)
	return fmt.Errorf("postgres (pid %d) did not stop within 30s; sent SIGQUIT", c.pid)
}

func (c *Cluster) gone() bool {
	if c.exited != nil {
		select {
		case <-c.exited:
			return true
		default:
			return false
		}
	}
	return syscall.Kill(c.pid, 0) != nil
}
