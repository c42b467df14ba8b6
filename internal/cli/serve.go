package cli

import (
	"context"
	"errors"
	"flag"

	"pam/internal/serve"
)

// runServe is serve.Run; tests replace it to see the Options a command
// line resolves to without starting a server.
var runServe = serve.Run

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
	summary: "all-in-one quickstart on this machine: serve on 127.0.0.1 with the embedded database",
	group:   "up",
	reg: registerOpts{
		defaults: map[string]string{"PAM_BIND": "127.0.0.1"},
		// pam up is the embedded quickstart: a PAM_DATABASE_URL exported
		// for some other server must not redirect it; only the flag does.
		flagOnly: map[string]bool{"PAM_DATABASE_URL": true},
	},
	setup: func(fs *flag.FlagSet) func(*invocation) error {
		return func(x *invocation) error { return startServe(x, true) }
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
	log, err := newLogger(c, x.stderr)
	if err != nil {
		return serve.Options{}, err
	}
	return serve.Options{
		Bind:                c.str("PAM_BIND"),
		Port:                port,
		DataDir:             c.str("PAM_DATA_DIR"),
		DatabaseURL:         c.str("PAM_DATABASE_URL"),
		TLSCert:             cert,
		TLSKey:              key,
		MetricsPublic:       c.bool("PAM_METRICS_PUBLIC"),
		EventRetention:      c.dur("PAM_EVENT_RETENTION"),
		HostOfflineAfter:    c.dur("PAM_HOST_OFFLINE_AFTER"),
		HostLostAfter:       c.dur("PAM_HOST_LOST_AFTER"),
		DispatchTimeout:     c.dur("PAM_DISPATCH_TIMEOUT"),
		DispatchAckTimeout:  c.dur("PAM_DISPATCH_ACK_TIMEOUT"),
		CLIHangTimeout:      c.dur("PAM_CLI_HANG_TIMEOUT"),
		RestartInitialDelay: c.dur("PAM_RESTART_INITIAL_DELAY"),
		RestartMaxDelay:     c.dur("PAM_RESTART_MAX_DELAY"),
		MaxAttempts:         c.int("PAM_MAX_ATTEMPTS"),
		LeaseTTL:            c.dur("PAM_LEASE_TTL"),
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
	err = runServe(x.ctx, o)
	if errors.Is(err, context.Canceled) && x.ctx.Err() != nil {
		return nil
	}
	return err
}
