package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"pam/internal/datadir"
	"pam/internal/provider"
	"pam/internal/worker"
)

var workerCmd = &command{
	name:    "worker",
	summary: "run this host's worker agent: agents in tmux sessions or built-in PTY holders (SIGHUP reconciles; SIGTERM stops, sessions keep running)",
	group:   "worker",
	setup: func(fs *flag.FlagSet) func(*invocation) error {
		return func(x *invocation) error {
			o, err := workerOptions(x)
			if err != nil {
				return err
			}
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			reconcile := make(chan struct{}, 1)
			// The forwarder lives as long as the worker, not the command's
			// context: it is stopped and waited for when the worker returns.
			ctx, cancel := context.WithCancel(x.ctx)
			var wg sync.WaitGroup
			defer wg.Wait()
			defer cancel()
			wg.Go(func() {
				for {
					select {
					case <-ctx.Done():
						return
					case <-hup:
						select {
						case reconcile <- struct{}{}:
						default: // one pending request is enough
						}
					}
				}
			})
			o.Reconcile = reconcile
			return x.env.Worker(x.ctx, o)
		}
	},
}

// workerTokenPath is <data>/worker/token.
func workerTokenPath(dataDir string) string { return filepath.Join(dataDir, "worker", "token") }

// workerOptions resolves the worker's settings into worker.Options.
func workerOptions(x *invocation) (worker.Options, error) {
	c := x.cfg
	base := c.str("PAM_URL")
	if err := checkURL(base, c.bool("PAM_ALLOW_INSECURE")); err != nil {
		return worker.Options{}, err
	}
	dataDir := c.str("PAM_DATA_DIR")
	token := strings.TrimSpace(c.str("PAM_WORKER_TOKEN"))
	if token == "" {
		b, err := os.ReadFile(workerTokenPath(dataDir))
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return worker.Options{}, fmt.Errorf("worker token: %w", err)
		default:
			token = strings.TrimSpace(string(b))
		}
	}
	if token == "" {
		return worker.Options{}, fmt.Errorf("no worker token: set PAM_WORKER_TOKEN (or --worker-token-file FILE), or put the token `pam host add` printed into %s (mode 0600)", workerTokenPath(dataDir))
	}
	o, err := localWorkerOptions(x, base, token)
	o.CAFile = c.str("PAM_CA_FILE")
	if err == nil {
		warnOperatorToken(x, dataDir, o.Logger)
	}
	return o, err
}

// warnOperatorToken warns, in the log and in a line of its own on
// stderr, when the operator token is within reach of this worker: set as
// PAM_TOKEN in its environment, or a token file in its data dir. Every
// agent the worker starts runs as the worker's uid, so it could read
// either and then act as the operator over the whole fleet; a worker
// needs only its own token. pam up is exempt: there the operator's
// machine is the worker host by design.
func warnOperatorToken(x *invocation, dataDir string, log *slog.Logger) {
	var where []string
	if v, ok := x.env.lookup("PAM_TOKEN"); ok && strings.TrimSpace(v) != "" {
		where = append(where, "PAM_TOKEN is set in the worker's environment")
	}
	file := datadir.TokenPath(dataDir)
	if _, err := os.Stat(file); err == nil {
		where = append(where, "an operator token file is in its data dir ("+file+")")
	}
	if len(where) == 0 {
		return
	}
	const why = "every agent on this host runs as the worker's user and can read it, then act as the operator; a worker needs only its worker token (see the README's Security section)"
	log.Warn("the operator token is on this worker host: "+why, "found", strings.Join(where, "; "))
	fmt.Fprintf(x.stderr, "pam worker: warning: the operator token is on this worker host (%s): %s\n", strings.Join(where, "; "), why)
}

// localWorkerOptions resolves the settings every worker has (pam worker
// and the one pam up runs in-process) for the given orchestrator and token.
func localWorkerOptions(x *invocation, base, token string) (worker.Options, error) {
	c := x.cfg
	executor := c.str("PAM_EXECUTOR")
	if executor != "tmux" && executor != "pty" {
		return worker.Options{}, usagef("PAM_EXECUTOR %q: want tmux or pty", executor)
	}
	dataDir := c.str("PAM_DATA_DIR")
	configDir := c.str("PAM_CONFIG_DIR")
	if configDir == "" {
		configDir = datadir.DefaultConfigDirIn(x.env.getenv)
	}
	catalog, err := provider.Load(configDir)
	if err != nil {
		return worker.Options{}, err
	}
	passEnv, err := provider.ParsePassEnv(c.str("PAM_PASS_ENV"))
	if err != nil {
		return worker.Options{}, usagef("%v", err)
	}
	self, err := os.Executable()
	if err != nil {
		return worker.Options{}, fmt.Errorf("locate the pam binary: %w", err)
	}
	if self, err = filepath.Abs(self); err != nil {
		return worker.Options{}, fmt.Errorf("locate the pam binary: %w", err)
	}
	log, err := newLogger(c, x.stderr)
	if err != nil {
		return worker.Options{}, err
	}
	return worker.Options{
		URL:               base,
		Token:             token,
		HostName:          c.str("PAM_HOST_NAME"),
		DataDir:           dataDir,
		ConfigDir:         configDir,
		Executor:          executor,
		MaxRuns:           c.int("PAM_MAX_RUNS"),
		HeartbeatInterval: c.dur("PAM_HEARTBEAT_INTERVAL"),
		CaptureInterval:   c.dur("PAM_CAPTURE_INTERVAL"),
		IdleAfter:         c.dur("PAM_IDLE_AFTER"),
		LivenessInterval:  c.dur("PAM_LIVENESS_INTERVAL"),
		StopGrace:         c.dur("PAM_STOP_GRACE"),
		ReconcileInterval: c.dur("PAM_RECONCILE_INTERVAL"),
		OrphanHold:        c.dur("PAM_ORPHAN_HOLD"),
		HoldOpen:          c.dur("PAM_HOLD_OPEN"),
		WorktreeRetention: c.dur("PAM_WORKTREE_RETENTION"),
		WorktreeBudget:    c.size("PAM_WORKTREE_BUDGET"),
		RunLogRetention:   c.dur("PAM_RUN_LOG_RETENTION"),
		PamBinary:         self,
		Version:           versionString(),
		Logger:            log,
		Providers:         catalog.Available,
		Resumable:         catalog.Resumable,
		ContinueMessages:  catalog.ContinueMessages,
		Screens:           catalog.Patterns,
		PassEnv: func(name string) map[string]string {
			return provider.Passed(catalog.PassEnvNames(name, passEnv), x.env.lookup)
		},
	}, nil
}

// The worker sits after the operator's commands in help, before the
// diagnostics (doctor, version).
func init() {
	i := slices.Index(root.subs, doctorCmd)
	if i < 0 {
		i = len(root.subs)
	}
	root.subs = slices.Insert(root.subs, i, workerCmd)
}
