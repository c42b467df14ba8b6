package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sync/errgroup"

	"pam/internal/apiclient"
	"pam/internal/datadir"
	"pam/internal/defaults"
	"pam/internal/serve"
	"pam/internal/wire"
	"pam/internal/worker"
)

var serveCmd = &command{
	name:    "serve",
	summary: "run the central orchestrator (REST API, SSE, WebSockets, dashboard)",
	group:   "serve",
	setup: func(fs *flag.FlagSet) func(*invocation) error {
		return func(x *invocation) error { return startServe(x, false) }
	},
}

var upCmd = &command{
	name:    "up",
	summary: "all-in-one quickstart on this machine: serve on 127.0.0.1 with the embedded database, and a worker for this machine",
	group:   "up",
	reg: registerOpts{
		defaults: map[string]string{"PAM_BIND": "127.0.0.1"},
		// pam up is the embedded quickstart: a PAM_DATABASE_URL exported
		// for some other server must not redirect it; only --database-url-file does.
		flagOnly: map[string]bool{"PAM_DATABASE_URL": true},
	},
	setup: func(fs *flag.FlagSet) func(*invocation) error {
		return func(x *invocation) error { return startUp(x) }
	},
}

// serveOptions resolves the settings of serve or up into serve.Options.
func serveOptions(x *invocation, up bool) (serve.Options, error) {
	c := x.cfg
	port := c.int("PAM_PORT")
	if port < 0 || port > 65535 {
		return serve.Options{}, usagef("PAM_PORT %d: want 0-65535 (0 picks a free port)", port)
	}
	cert, key := c.str("PAM_TLS_CERT"), c.str("PAM_TLS_KEY")
	if (cert == "") != (key == "") {
		return serve.Options{}, usagef("PAM_TLS_CERT and PAM_TLS_KEY go together: give both or neither")
	}
	if c.dur("PAM_RESTART_MAX_DELAY") < c.dur("PAM_RESTART_INITIAL_DELAY") {
		return serve.Options{}, usagef("PAM_RESTART_MAX_DELAY (%s) is below PAM_RESTART_INITIAL_DELAY (%s)", c.dur("PAM_RESTART_MAX_DELAY"), c.dur("PAM_RESTART_INITIAL_DELAY"))
	}
	if pub := c.str("PAM_PUBLIC_URL"); pub != "" {
		if u, err := url.Parse(pub); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return serve.Options{}, usagef("PAM_PUBLIC_URL %q: want the dashboard's http:// or https:// address, e.g. https://pam.example.com", pub)
		}
	}
	log, err := newLogger(c, x.stderr)
	if err != nil {
		return serve.Options{}, err
	}
	completedStop := c.dur("PAM_COMPLETED_STOP_AFTER")
	if completedStop == 0 {
		completedStop = defaults.Never
	}
	return serve.Options{
		Bind:                c.str("PAM_BIND"),
		Port:                port,
		DataDir:             c.str("PAM_DATA_DIR"),
		DatabaseURL:         c.str("PAM_DATABASE_URL"),
		TLSCert:             cert,
		TLSKey:              key,
		MetricsPublic:       c.bool("PAM_METRICS_PUBLIC"),
		PublicURL:           c.str("PAM_PUBLIC_URL"),
		AllowInsecure:       c.bool("PAM_ALLOW_INSECURE"),
		EventRetention:      c.dur("PAM_EVENT_RETENTION"),
		HostOfflineAfter:    c.dur("PAM_HOST_OFFLINE_AFTER"),
		HostLostAfter:       c.dur("PAM_HOST_LOST_AFTER"),
		DispatchTimeout:     c.dur("PAM_DISPATCH_TIMEOUT"),
		DispatchAckTimeout:  c.dur("PAM_DISPATCH_ACK_TIMEOUT"),
		CLIHangTimeout:      c.dur("PAM_CLI_HANG_TIMEOUT"),
		CompletedStopAfter:  completedStop,
		RestartInitialDelay: c.dur("PAM_RESTART_INITIAL_DELAY"),
		RestartMaxDelay:     c.dur("PAM_RESTART_MAX_DELAY"),
		MaxAttempts:         c.int("PAM_MAX_ATTEMPTS"),
		LeaseTTL:            c.dur("PAM_LEASE_TTL"),
		CaptureInterval:     c.dur("PAM_CAPTURE_INTERVAL"),
		SpawnTimeout:        c.dur("PAM_SPAWN_TIMEOUT"),
		DashboardURL:        up,
		Logger:              log,
		Stdout:              x.stdout,
		Version:             versionString(),
	}, nil
}

func startServe(x *invocation, up bool) error {
	o, err := serveOptions(x, up)
	if err != nil {
		return err
	}
	err = x.env.Serve(x.ctx, o)
	if errors.Is(err, context.Canceled) && x.ctx.Err() != nil {
		return nil
	}
	return err
}

// startUp is pam up: serve with the embedded database and, once it
// listens, a worker for this machine in the same process, registered as a
// host named after the machine (provisioned on first start; its token kept
// in <data>/worker/token). Ctrl-C stops both; sessions stay with tmux.
//
// Both run in one errgroup: whichever ends first, or fails, ends the
// other, and startUp returns once both have, with the first error.
func startUp(x *invocation) error {
	o, err := serveOptions(x, true)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(x.ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	type ready struct{ base, token string }
	readyc := make(chan ready, 1)
	o.Ready = func(base, token string) { readyc <- ready{base, token} }
	g.Go(func() error {
		defer cancel() // serve gone: the worker has no one to talk to
		if err := x.env.Serve(gctx, o); err != nil {
			return fmt.Errorf("serve: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		defer cancel()
		var r ready
		select {
		case <-gctx.Done():
			return nil
		case r = <-readyc:
		}
		wo, err := upWorkerOptions(gctx, x, o, r.base, r.token)
		if err != nil {
			return err
		}
		fmt.Fprintf(x.stdout, "worker: this machine runs agents as host %s\n", wo.HostName)
		if err := x.env.Worker(gctx, wo); err != nil {
			return fmt.Errorf("worker: %w", err)
		}
		return nil
	})
	err = g.Wait()
	if errors.Is(err, context.Canceled) && x.ctx.Err() != nil {
		return nil
	}
	return err
}

// upWorkerOptions provisions the local host on the serve at base, gives it
// the max_runs of PAM_MAX_RUNS, and returns the options of pam up's worker.
func upWorkerOptions(ctx context.Context, x *invocation, o serve.Options, base, operatorToken string) (worker.Options, error) {
	hostName := x.cfg.str("PAM_HOST_NAME")
	if hostName == "" {
		var err error
		if hostName, err = os.Hostname(); err != nil {
			return worker.Options{}, fmt.Errorf("host name: %w", err)
		}
	}
	dataDir := o.DataDir
	if dataDir == "" {
		dataDir = datadir.DefaultDataDirIn(x.env.getenv)
	}
	client, err := apiclient.New(base, operatorToken, "")
	if err != nil {
		return worker.Options{}, err
	}
	defer client.HTTP.CloseIdleConnections() // its goroutines end here, not when serve does
	maxRuns := x.cfg.int("PAM_MAX_RUNS")
	token, err := localHostToken(ctx, client, hostName, dataDir, maxRuns)
	if err != nil {
		return worker.Options{}, fmt.Errorf("provision the local host %s: %w", hostName, err)
	}
	if err := setLocalMaxRuns(ctx, client, hostName, maxRuns); err != nil {
		return worker.Options{}, fmt.Errorf("set max_runs of the local host %s to PAM_MAX_RUNS=%d: %w", hostName, maxRuns, err)
	}
	wo, err := localWorkerOptions(x, base, token)
	if err != nil {
		return worker.Options{}, err
	}
	wo.HostName, wo.DataDir = hostName, dataDir
	return wo, nil
}

// setLocalMaxRuns gives pam up's own host the max_runs of PAM_MAX_RUNS at
// every start: the host row keeps the value it was created with otherwise,
// and dispatch caps the host by it whatever its worker reports.
func setLocalMaxRuns(ctx context.Context, client *apiclient.Client, hostName string, maxRuns int) error {
	h, err := client.GetHost(ctx, hostName)
	if err != nil {
		return err
	}
	if h.MaxRuns == maxRuns {
		return nil
	}
	_, err = client.SetHostMaxRuns(ctx, h.ID, maxRuns)
	return err
}

// localHostToken returns the worker token of the host named hostName,
// creating the host (with maxRuns) on first start. The token is kept in
// <data>/worker/token (0600); if the host exists but the file is gone,
// the token is rotated (the operator may, and only the new one is kept).
func localHostToken(ctx context.Context, client *apiclient.Client, hostName, dataDir string, maxRuns int) (string, error) {
	path := workerTokenPath(dataDir)
	if b, err := os.ReadFile(path); err == nil {
		if tok := strings.TrimSpace(string(b)); len(tok) == 64 {
			return tok, nil
		}
	}
	var tok string
	created, err := client.CreateHost(ctx, wire.CreateHost{Name: hostName, MaxRuns: &maxRuns})
	switch {
	case err == nil:
		tok = created.WorkerToken
	case wire.HasCode(err, wire.CodeConflict):
		if tok, err = client.RotateToken(ctx, hostName); err != nil {
			return "", err
		}
	default:
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", err
	}
	return tok, nil
}
