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
// writing it) for the CLI's session id only.
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
		"the CLI's session id (session_id of the stdin JSON, codex's thread-id) goes with the signal once per attempt; " +
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

// runHook is `pam hook`: the stdin JSON (Claude Code's or gemini's hook
// event) is read for the CLI's session id only; an extra argument
// (codex's notify event) for its type, which may make the hook a
// needs-input (provider.HookKindOfEvent), and its session id
// (docs/architecture.md#resume-and-continue).
func runHook(ctx context.Context, env Env, args []string, stderr io.Writer) {
	input := readHookInput(env.Stdin, hookStdinWait)
	if len(args) == 0 {
		fmt.Fprintln(stderr, "pam hook: missing kind (completed, progress, failed or needs-input)")
		return
	}
	kind := args[0]
	session := provider.SessionOfHookInput(input)
	if len(args) > 1 {
		if kind = provider.HookKindOfEvent(kind, args[1]); kind == "" {
			return // an event that says nothing of the run (codex's title thread)
		}
		if s := provider.SessionOfEvent(args[1]); s != "" {
			session = s
		}
	}
	out, err := wrap.Hook(ctx, wrap.HookOptions{
		Kind:           kind,
		AgentSessionID: session,
		RunID:          env.getenv("PAM_RUN_ID"),
		Attempt:        env.getenv("PAM_ATTEMPT"),
		APIURL:         env.getenv("PAM_API_URL"),
		Token:          env.getenv("PAM_SIGNAL_TOKEN"),
		WorkerDataDir:  env.getenv("PAM_WORKER_DATA_DIR"),
		CAFile:         env.getenv("PAM_CA_FILE"),
		Report:         stderr,
	})
	if err != nil && out.Refused == nil {
		fmt.Fprintf(stderr, "pam hook %s: %v\n", kind, err)
	}
}

// readHookInput reads r to its end, at most hookStdinLimit bytes of it
// and for at most wait: what a provider writes to its hook's stdin, read
// whole so that the provider never blocks writing it. A terminal is not
// read (someone typed `pam hook` by hand), and input that does not end in
// time is left to the reader in the background and not used.
func readHookInput(r io.Reader, wait time.Duration) []byte {
	if r == nil {
		return nil
	}
	if f, ok := r.(*os.File); ok {
		if st, err := f.Stat(); err != nil || st.Mode()&os.ModeCharDevice != 0 {
			return nil
		}
	}
	done := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(r, hookStdinLimit))
		_, _ = io.Copy(io.Discard, r) // the rest, so the writer never blocks
		done <- b
	}()
	select {
	case b := <-done:
		return b
	case <-time.After(wait):
		return nil
	}
}

// The hook sits with the exec wrapper, before the diagnostics.
func init() {
	i := slices.Index(root.subs, doctorCmd)
	if i < 0 {
		i = len(root.subs)
	}
	root.subs = slices.Insert(root.subs, i, hookCmd)
}
