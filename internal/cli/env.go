package cli

import (
	"context"
	"io"
	"os"
	"strings"
	"time"

	"pam/internal/serve"
	"pam/internal/worker"
)

// Env is what a command line takes from its process besides arguments
// and output: the environment variables, stdin, the clock, and the
// long-running services it starts. Main runs in the real process's; a
// test hands Env.Main its own, so that commands run side by side without
// swapping package variables or the process environment. A zero field
// means the process's own.
type Env struct {
	// Environ is the environment in os.Environ's KEY=value form: the
	// PAM_* settings, HOME and XDG_* for the default dirs, pam hook's
	// variables, and what pam exec run hands to its CLI. Nil means
	// os.Environ(); an empty slice is an empty environment.
	Environ []string
	// Stdin is standard input: pam hook drains it, pam exec run gives it
	// to the CLI, pam run attach needs a terminal there (an *os.File).
	Stdin io.Reader
	// Now is the clock of the "5m ago" columns.
	Now func() time.Time
	// Serve runs the orchestrator (serve.Run) for pam serve and pam up.
	Serve func(context.Context, serve.Options) error
	// Worker runs the worker agent (worker.Run) for pam worker and pam up.
	Worker func(context.Context, worker.Options) error
	// ReconnectMin is the first reconnect delay of pam events --follow
	// (1s), doubling up to reconnectMax.
	ReconnectMin time.Duration
}

// resolved fills the zero fields with the process's own.
func (e Env) resolved() Env {
	if e.Stdin == nil {
		e.Stdin = os.Stdin
	}
	if e.Now == nil {
		e.Now = time.Now
	}
	if e.Serve == nil {
		e.Serve = serve.Run
	}
	if e.Worker == nil {
		e.Worker = worker.Run
	}
	if e.ReconnectMin == 0 {
		e.ReconnectMin = time.Second
	}
	return e
}

// lookup reads one variable of the environment.
func (e Env) lookup(key string) (string, bool) {
	if e.Environ == nil {
		return os.LookupEnv(key)
	}
	for i := len(e.Environ) - 1; i >= 0; i-- { // the last one wins, as in exec.Cmd
		if k, v, ok := strings.Cut(e.Environ[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// getenv is lookup with unset read as empty.
func (e Env) getenv(key string) string {
	v, _ := e.lookup(key)
	return v
}
