package wrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"pam/internal/apiclient"
	"pam/internal/spool"
	"pam/internal/wire"
)

// DefaultRetryDelays are the pauses between the tries of one signal post:
// three tries within about three seconds, then the spool.
var DefaultRetryDelays = []time.Duration{300 * time.Millisecond, 1200 * time.Millisecond}

// DefaultTryTimeout bounds one try of a signal post.
const DefaultTryTimeout = 3 * time.Second

// Sender posts the signals of one run to the orchestrator
// (POST <api_url>/api/internal/runs/<run_id>/signals with the run's signal
// token), retrying briefly, and spools what it cannot deliver (contract
// docs/architecture.md#configuration-and-files-on-disk, docs/architecture.md#pam-exec-run). Once the run's attempt has a signal in the spool, its later
// signals go to the spool too, so that their order holds. The wrapper and
// `pam hook` both use it.
type Sender struct {
	// Client makes the requests; it should trust PAM_CA_FILE when set.
	Client *http.Client
	// APIURL is the orchestrator's base URL, e.g. http://10.0.0.1:7898.
	APIURL string
	// Token is the run's signal token (PAM_SIGNAL_TOKEN).
	Token string
	// RunID is the run's canonical UUID.
	RunID string
	// SpoolDir is the worker's spool folder (spool.Dir of the worker data dir).
	SpoolDir string
	// RetryDelays are the pauses between tries; nil means
	// DefaultRetryDelays. Tries = len(RetryDelays)+1.
	RetryDelays []time.Duration
	// TryTimeout bounds one try; 0 means DefaultTryTimeout.
	TryTimeout time.Duration
	// Report gets one line per refusal and per spooled signal (the pane).
	Report io.Writer
	// Logger gets debug records of each try; nil discards them.
	Logger *slog.Logger
}

// Outcome is what became of one signal.
type Outcome struct {
	// Result is the orchestrator's answer to a delivered signal
	// ("applied", "duplicate", …).
	Result string
	// Refused is the orchestrator's refusal (a 4xx other than 429); the
	// signal is neither retried nor spooled.
	Refused *wire.Error
	// Spooled is the spool file the signal went to.
	Spooled string
	// Err is set when the signal could be neither delivered nor spooled.
	Err error
}

// Delivered reports whether the orchestrator took the signal.
func (o Outcome) Delivered() bool { return o.Result != "" }

// NewClient returns an HTTP client for the orchestrator that also trusts
// caFile (a PEM bundle) when it is not empty.
func NewClient(apiURL, caFile string) (*http.Client, error) {
	c, err := apiclient.New(apiURL, "", caFile)
	if err != nil {
		return nil, err
	}
	return c.HTTP, nil
}

func (s *Sender) logger() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger
}

func (s *Sender) report(format string, args ...any) {
	if s.Report != nil {
		fmt.Fprintf(s.Report, "pam: "+format+"\n", args...)
	}
}

// Send delivers sig or spools it. ctx bounds the whole send; a ctx that
// ends early sends the signal to the spool rather than losing it, so
// callers that must report even while stopping pass a context that
// outlives the stop (context.WithoutCancel).
func (s *Sender) Send(ctx context.Context, sig wire.Signal) Outcome {
	attempt := 0
	if sig.Attempt != nil {
		attempt = *sig.Attempt
	}
	if spool.HasPending(s.SpoolDir, s.RunID, attempt) {
		s.logger().Debug("signal queued behind spooled ones", "run_id", s.RunID, "attempt", attempt, "kind", sig.Kind)
		why := "earlier signals of this attempt are still spooled"
		path, err := s.write(sig)
		if err == nil {
			s.report("signal %s not posted (%s); spooled for the worker to replay: %s", sig.Kind, why, path)
			return Outcome{Spooled: path}
		}
		// A signal out of order beats a lost one.
		s.report("signal %s cannot join the spooled signals of its attempt (%v); posting it now", sig.Kind, err)
	}
	delays := s.RetryDelays
	if delays == nil {
		delays = DefaultRetryDelays
	}
	var last error
	for try := 0; ; try++ {
		res, err := s.post(ctx, sig)
		if err == nil {
			s.logger().Debug("signal delivered", "run_id", s.RunID, "attempt", attempt, "kind", sig.Kind, "result", res)
			return Outcome{Result: res}
		}
		var we *wire.Error
		if errors.As(err, &we) && !retryable(we.Status) {
			s.report("signal %s of run %s attempt %d refused by the orchestrator: %d %s: %s", sig.Kind, s.RunID, attempt, we.Status, we.Code, oneLine(we.Message))
			return Outcome{Refused: we}
		}
		last = err
		s.logger().Debug("signal post failed", "run_id", s.RunID, "attempt", attempt, "kind", sig.Kind, "try", try+1, "err", err)
		if try >= len(delays) {
			break
		}
		t := time.NewTimer(delays[try])
		select {
		case <-ctx.Done():
			t.Stop()
			return s.spool(sig, oneLine(last.Error()))
		case <-t.C:
		}
	}
	return s.spool(sig, oneLine(last.Error()))
}

// Post makes one try of sig, without retry or spool: the worker replays
// spooled signals with it. A non-2xx answer comes back as a *wire.Error
// with its status; anything else that fails is a transport error.
func (s *Sender) Post(ctx context.Context, sig wire.Signal) (string, error) { return s.post(ctx, sig) }

func (s *Sender) write(sig wire.Signal) (string, error) {
	return spool.Write(s.SpoolDir, spool.Entry{RunID: s.RunID, Signal: sig, Token: s.Token, APIURL: s.APIURL})
}

// spool writes an undelivered signal to the spool and reports it.
func (s *Sender) spool(sig wire.Signal, why string) Outcome {
	path, err := s.write(sig)
	if err != nil {
		s.report("signal %s of run %s is lost: not delivered (%s) and not spooled: %v", sig.Kind, s.RunID, why, err)
		return Outcome{Err: fmt.Errorf("signal %s: not delivered (%s), not spooled: %w", sig.Kind, why, err)}
	}
	s.report("signal %s not delivered (%s); spooled for the worker to replay: %s", sig.Kind, why, path)
	return Outcome{Spooled: path}
}

// retryable reports whether an HTTP status is worth another try: a server
// error or too many requests.
func retryable(status int) bool {
	return status >= 500 || status == http.StatusTooManyRequests
}

// post makes one try through the API client with the run's signal
// token. A non-2xx answer comes back as a *wire.Error with its status;
// anything else that fails is a transport error.
func (s *Sender) post(ctx context.Context, sig wire.Signal) (string, error) {
	timeout := s.TryTimeout
	if timeout <= 0 {
		timeout = DefaultTryTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := &apiclient.Client{BaseURL: strings.TrimRight(s.APIURL, "/"), Token: s.Token, HTTP: s.Client}
	return c.PostSignal(ctx, s.RunID, sig)
}

// oneLine keeps a message on one line of the pane.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
