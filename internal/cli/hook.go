package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"pam/internal/provider"
	"pam/internal/wrap"
)

// hookStdinLimit and hookStdinWait bound what `pam hook` reads of the JSON
// a provider writes to its stdin: it is read (so the provider never blocks
// writing it) and ignored.
const (
	hookStdinLimit = 1 << 20
	hookStdinWait  = 2 * time.Second
)

var hookCmd = &command{
	name:     "hook",
	args:     "completed|progress|failed|needs-input [EVENT_JSON]",
	nargs:    0,
	variadic: true,
	summary: "called by provider-native hooks inside a run's session: post a completed, progress, failed or needs-input signal " +
		"for the run of the environment (PAM_RUN_ID, PAM_ATTEMPT, PAM_API_URL, PAM_SIGNAL_TOKEN, PAM_WORKER_DATA_DIR); " +
		"an EVENT_JSON (codex's notify event) that asks for approval or input posts needs-input; " +
		"spools what cannot be delivered and always exits 0",
	setup: func(fs *flag.FlagSet) func(*invocation) error {
		return func(x *invocation) error {
			// A provider's hook must never fail the provider: every problem
			// is reported on stderr and the exit status stays 0.
			runHook(x.ctx, x.env, x.args, x.stderr)
			return nil
		}
	},
}

// runHook is `pam hook`: the stdin JSON (Claude Code's hook event) is
// read and ignored; an extra argument (codex's notify event) is read only
// for its type, which may make the hook a needs-input, or nothing at all
// (provider.HookKindOfEvent).
func runHook(ctx context.Context, env Env, args []string, stderr io.Writer) {
	drained := drain(env.Stdin)
	defer func() {
		select {
		case <-drained:
		case <-time.After(hookStdinWait):
		}
	}()
	if len(args) == 0 {
		fmt.Fprintln(stderr, "pam hook: missing kind (completed, progress, failed or needs-input)")
		return
	}
	kind := args[0]
	if len(args) > 1 {
		if kind = provider.HookKindOfEvent(kind, args[1]); kind == "" {
			return // an event that says nothing of the run (codex's title thread)
		}
	}
	out, err := wrap.Hook(ctx, wrap.HookOptions{
		Kind:          kind,
		RunID:         env.getenv("PAM_RUN_ID"),
		Attempt:       env.getenv("PAM_ATTEMPT"),
		APIURL:        env.getenv("PAM_API_URL"),
		Token:         env.getenv("PAM_SIGNAL_TOKEN"),
		WorkerDataDir: env.getenv("PAM_WORKER_DATA_DIR"),
		CAFile:        env.getenv("PAM_CA_FILE"),
		Report:        stderr,
	})
	if err != nil && out.Refused == nil {
		fmt.Fprintf(stderr, "pam hook %s: %v\n", kind, err)
	}
}

// drain reads r (bounded) in the background and closes the channel when
// done. A terminal is not read: someone typed `pam hook` by hand.
func drain(r io.Reader) <-chan struct{} {
	done := make(chan struct{})
	if f, ok := r.(*os.File); ok {
		if st, err := f.Stat(); err != nil || st.Mode()&os.ModeCharDevice != 0 {
			close(done)
			return done
		}
	}
	go func() {
		defer close(done)
		_, _ = io.Copy(io.Discard, io.LimitReader(r, hookStdinLimit))
	}()
	return done
}

// The hook sits with the exec wrapper, before the diagnostics.
func init() {
	i := slices.Index(root.subs, doctorCmd)
	if i < 0 {
		i = len(root.subs)
	}
	root.subs = slices.Insert(root.subs, i, hookCmd)
}
