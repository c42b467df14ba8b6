// Package serve assembles `pam serve`: data dir, serve.lock, the embedded
// or external database, the listener (a standby's answers until this
// serve is active), the active-server advisory lock, the database's
// operator token and its local copy, the journal's tailer and the HTTP
// server, and tears them down in order.
package serve

import (
	"io"
	"log/slog"
	"time"
)

// Options is everything `pam serve` is configured with; the CLI fills it
// from flags, PAM_* variables and defaults (docs/architecture.md#configuration-and-files-on-disk).
type Options struct {
	Bind          string // PAM_BIND
	Port          int    // PAM_PORT; 0 picks a free port
	DataDir       string // PAM_DATA_DIR
	DatabaseURL   string // PAM_DATABASE_URL; empty = embedded database
	TLSCert       string // PAM_TLS_CERT
	TLSKey        string // PAM_TLS_KEY
	MetricsPublic bool   // PAM_METRICS_PUBLIC
	// PublicURL is PAM_PUBLIC_URL: where people reach the dashboard, for
	// the links and answer URLs of notifications.
	PublicURL string
	// AllowInsecure is PAM_ALLOW_INSECURE: serve plain HTTP on a
	// non-loopback address (with a warning) instead of refusing to start.
	AllowInsecure bool

	EventRetention      time.Duration // PAM_EVENT_RETENTION
	HostOfflineAfter    time.Duration // PAM_HOST_OFFLINE_AFTER
	HostLostAfter       time.Duration // PAM_HOST_LOST_AFTER
	DispatchTimeout     time.Duration // PAM_DISPATCH_TIMEOUT
	DispatchAckTimeout  time.Duration // PAM_DISPATCH_ACK_TIMEOUT
	CLIHangTimeout      time.Duration // PAM_CLI_HANG_TIMEOUT
	CompletedStopAfter  time.Duration // PAM_COMPLETED_STOP_AFTER; defaults.Never (its 0) never stops
	RestartInitialDelay time.Duration // PAM_RESTART_INITIAL_DELAY
	RestartMaxDelay     time.Duration // PAM_RESTART_MAX_DELAY
	MaxAttempts         int           // PAM_MAX_ATTEMPTS
	LeaseTTL            time.Duration // PAM_LEASE_TTL
	SpawnTimeout        time.Duration // PAM_SPAWN_TIMEOUT
	// CaptureInterval is the workers' PAM_CAPTURE_INTERVAL: a keys
	// request is observed when the pane changes within two of them.
	CaptureInterval time.Duration

	// DashboardURL makes serve print the dashboard URL with the token in
	// the fragment once it is active (pam up).
	DashboardURL bool
	// Ready, if set, is called once serve is active and answers the API,
	// with its base URL and the operator token (pam up starts its local
	// worker from it).
	Ready func(baseURL, token string)

	Logger *slog.Logger
	// Stdout receives the line that says where serve listens once it is
	// active, preceded by "pam serve standing by on URL" when it first
	// waits as a standby.
	Stdout io.Writer
	// Version is reported by /healthz-adjacent surfaces and logs.
	Version string

	// Clock is the time of the duty that continues runs when their usage
	// limit resets (docs/architecture.md#continue-when-a-limit-resets);
	// nil is time.Now. A test that runs serve in its own process moves it
	// instead of waiting for a real reset.
	Clock func() time.Time
	// ContinueTick is how often that duty looks; 0 is 5s.
	ContinueTick time.Duration

	// checkLeaderEvery is how often the active-server lock's connection
	// is checked; 0 is 3s. Tests shorten it.
	checkLeaderEvery time.Duration
}
