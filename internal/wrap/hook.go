package wrap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gofrs/flock"
	"github.com/google/uuid"

	"pam/internal/provider"
	"pam/internal/spool"
	"pam/internal/wire"
)

// hookKinds maps each `pam hook <kind>` to the signal kind it posts
// (docs/architecture.md#pam-hook).
var hookKinds = map[string]string{
	wire.SignalCompleted:    wire.SignalCompleted,
	wire.SignalProgress:     wire.SignalProgress,
	wire.SignalFailed:       wire.SignalFailed,
	provider.HookNeedsInput: wire.SignalNeedsInput,
}

// HookRetryDelays keep `pam hook` quick: a provider waits for its hooks,
// so two tries and then the spool.
var HookRetryDelays = []time.Duration{200 * time.Millisecond}

// HookTryTimeout bounds one try of a hook's post.
const HookTryTimeout = 2 * time.Second

// HookOptions are what `pam hook` takes from the environment the wrapper
// gave the provider CLI (PAM_RUN_ID, PAM_ATTEMPT, PAM_API_URL,
// PAM_SIGNAL_TOKEN, PAM_WORKER_DATA_DIR, PAM_CA_FILE).
type HookOptions struct {
	// Kind is the hook kind: completed, progress, failed or needs-input.
	Kind string
	// AgentSessionID is the CLI's own session id, as the hook read it from
	// the CLI's input ("" when none): carried in the signal's payload the
	// first time in the attempt and whenever it changes
	// (docs/architecture.md#resume-and-continue). An invalid one is
	// reported and left out.
	AgentSessionID string
	RunID          string
	Attempt        string
	APIURL         string
	Token          string
	WorkerDataDir  string
	CAFile         string
	// Report gets one line per problem (the provider shows hook output).
	Report io.Writer
	// HTTPClient posts; nil builds one trusting CAFile.
	HTTPClient *http.Client
	// RetryDelays and TryTimeout tune the post; nil/0 mean the hook
	// defaults.
	RetryDelays []time.Duration
	TryTimeout  time.Duration
	Logger      *slog.Logger
	Now         func() time.Time
}

// Hook posts one provider-hook signal for the run of its environment: a
// progress signal takes the next seq of the run's attempt from a counter
// file under the worker data dir (locked, so hooks running at once get
// distinct, increasing seqs); an undeliverable signal is spooled. It
// returns what became of the signal; the caller reports and exits 0
// whatever happened, because a failing hook must never break the agent.
func Hook(ctx context.Context, o HookOptions) (Outcome, error) {
	kind, ok := hookKinds[o.Kind]
	if !ok {
		return Outcome{}, fmt.Errorf("unknown hook kind %q: want completed, progress, failed or needs-input", o.Kind)
	}
	id, err := uuid.Parse(o.RunID)
	if err != nil || len(o.RunID) != 36 {
		return Outcome{}, fmt.Errorf("PAM_RUN_ID %q is not a run id: `pam hook` runs inside a pam session", o.RunID)
	}
	attempt, err := strconv.Atoi(o.Attempt)
	if err != nil || attempt < 1 {
		return Outcome{}, fmt.Errorf("PAM_ATTEMPT %q is not an attempt number", o.Attempt)
	}
	if o.APIURL == "" || o.Token == "" || !filepath.IsAbs(o.WorkerDataDir) {
		return Outcome{}, errors.New("PAM_API_URL, PAM_SIGNAL_TOKEN and an absolute PAM_WORKER_DATA_DIR are needed")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.RetryDelays == nil {
		o.RetryDelays = HookRetryDelays
	}
	if o.TryTimeout <= 0 {
		o.TryTimeout = HookTryTimeout
	}
	client := o.HTTPClient
	if client == nil {
		if client, err = NewClient(o.APIURL, o.CAFile); err != nil {
			client = http.DefaultClient // the spool still works
		}
	}
	now := o.Now().UTC()
	sig := wire.Signal{Kind: kind, Attempt: &attempt, Source: wire.SourceProviderHook, Timestamp: &now}
	payload := map[string]any{}
	switch kind {
	case wire.SignalProgress:
		seq, err := NextProgressSeq(o.WorkerDataDir, id.String(), attempt)
		if err != nil {
			return Outcome{}, err
		}
		sig.Seq = &seq
	case wire.SignalFailed:
		payload["reason"] = wire.FailProviderFailed
	}
	session := o.AgentSessionID
	if session != "" {
		if err := wire.ValidAgentSessionID(session); err != nil {
			if o.Report != nil {
				fmt.Fprintf(o.Report, "pam hook: the CLI's session id %.40q is left out: %v\n", session, err)
			}
			session = ""
		} else if session == lastSession(o.WorkerDataDir, id.String(), attempt) {
			session = "" // reported already in this attempt
		} else {
			payload[wire.PayloadAgentSessionID] = session
		}
	}
	if len(payload) > 0 {
		b, err := json.Marshal(payload)
		if err != nil {
			return Outcome{}, err
		}
		sig.Payload = b
	}
	s := &Sender{
		Client: client, APIURL: o.APIURL, Token: o.Token, RunID: id.String(),
		SpoolDir: spool.Dir(o.WorkerDataDir), RetryDelays: o.RetryDelays, TryTimeout: o.TryTimeout,
		Report: o.Report, Logger: o.Logger,
	}
	out := s.Send(ctx, sig)
	if session != "" && (out.Delivered() || out.Spooled != "") {
		if err := recordSession(o.WorkerDataDir, id.String(), attempt, session); err != nil && o.Report != nil {
			fmt.Fprintf(o.Report, "pam hook: %v\n", err)
		}
	}
	return out, out.Err
}

// lastSession is the session id a hook of the run's attempt reported
// last (on its way: delivered or spooled), from
// <workerDataDir>/hooks/<run_id>-<attempt>.session; "" when none.
func lastSession(workerDataDir, runID string, attempt int) string {
	b, err := os.ReadFile(sessionPath(workerDataDir, runID, attempt))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// recordSession notes the session id a hook reported, replacing the file
// whole: hooks running at once may both report the same id, which the
// server takes once.
func recordSession(workerDataDir, runID string, attempt int, session string) error {
	path := sessionPath(workerDataDir, runID, attempt)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("record the session id: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("record the session id: %w", err)
	}
	_, err = f.WriteString(session + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("record the session id: %w", err)
	}
	return nil
}

func sessionPath(workerDataDir, runID string, attempt int) string {
	return filepath.Join(workerDataDir, hookSeqDir, fmt.Sprintf("%s-%d.session", runID, attempt))
}

// hookSeqDir holds the progress counters and the session ids reported,
// one file of each per run attempt.
const hookSeqDir = "hooks"

// NextProgressSeq increments and returns the progress counter of a run's
// attempt, <workerDataDir>/hooks/<run_id>-<attempt>.seq, under its flock.
// The first seq is 1 (the orchestrator's last_progress_seq starts at 0
// for every attempt).
func NextProgressSeq(workerDataDir, runID string, attempt int) (int64, error) {
	dir := filepath.Join(workerDataDir, hookSeqDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, fmt.Errorf("progress counter: %w", err)
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-%d.seq", runID, attempt))
	fl := flock.New(path+".lock", flock.SetFlag(os.O_CREATE|os.O_RDWR), flock.SetPermissions(0o600))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ok, err := fl.TryLockContext(ctx, 2*time.Millisecond)
	if err != nil || !ok {
		fl.Close()
		return 0, fmt.Errorf("progress counter lock %s: %w", fl.Path(), err)
	}
	defer fl.Close()
	var cur int64
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if cur, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil || cur < 0 {
			// A damaged counter jumps to the clock in milliseconds, beyond
			// any count it could have reached: seqs keep increasing, and a
			// lower one would only be dropped as out_of_order.
			cur = time.Now().UnixMilli()
		}
	case errors.Is(err, fs.ErrNotExist):
	default:
		return 0, fmt.Errorf("progress counter: %w", err)
	}
	next := cur + 1
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(next, 10)+"\n"), 0o600); err != nil {
		return 0, fmt.Errorf("progress counter: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return 0, fmt.Errorf("progress counter: %w", err)
	}
	return next, nil
}
