package wrap

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pam/internal/wire"
)

// The wrapper checks the prompt against the host's own catalog: a prompt
// starting with "-" goes last, after end_of_options, behind the run's
// arguments and the hook options; for a CLI without end_of_options the
// attempt fails before exec (issue 9 item 7).
func TestPromptStartingWithDashNeverAnOptionWrapper(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "fake-agent")
	if err := os.WriteFile(bin, []byte(argvScript), 0o755); err != nil {
		t.Fatal(err)
	}

	t.Run("after end_of_options", func(t *testing.T) {
		t.Parallel()
		orch := newOrchestrator(t)
		f := newFixture(t, orch.URL, "fake", bin, "--yolo")
		// The run's args are options; the prompt, a CLI operand, goes after
		// "--" behind them and the hook options. (A template whose prompt
		// is the value of an option is refused when the run has args: see
		// the provider's table test.)
		f.d.Args = []string{"--model", "m"}
		f.writeDispatch(t)
		f.writeCatalog(t, fmt.Sprintf("[providers.fake]\nbinary = %q\nargs = [\"{prompt}\"]\nhooks = \"codex\"\nend_of_options = \"--\"\n", bin))
		o := f.options()
		o.PamBinary = "/opt/pam/bin/pam"
		if code := Run(t.Context(), o); code != 0 {
			t.Fatalf("exit %d\n%s", code, f.stderr)
		}
		want := "[--model]\n[m]\n[-c]\n[notify=[\"/opt/pam/bin/pam\",\"hook\",\"completed\"]]\n[--]\n[--yolo]\n"
		if out := f.stdout.String(); out != want {
			t.Errorf("argv:\n%s\nwant:\n%s", out, want)
		}
	})

	t.Run("refused without end_of_options", func(t *testing.T) {
		t.Parallel()
		orch := newOrchestrator(t)
		f := newFixture(t, orch.URL, "fake", bin, "--yolo")
		f.writeCatalog(t, fmt.Sprintf("[providers.fake]\nbinary = %q\n", bin))
		if code := Run(t.Context(), f.options()); code != ExitCannotRun {
			t.Errorf("exit %d, want %d\n%s", code, ExitCannotRun, f.stderr)
		}
		if strings.Contains(f.stdout.String(), "[--yolo]") {
			t.Error("the CLI ran with the prompt as an option")
		}
		got := orch.signals()
		if len(got) != 1 {
			t.Fatalf("signals: %+v", got)
		}
		checkSignal(t, got[0], f, wire.SignalFailed)
		var p struct{ Reason, Detail string }
		if err := json.Unmarshal(got[0].Signal.Payload, &p); err != nil || p.Reason != "spawn_failed" || !strings.Contains(p.Detail, "end_of_options") {
			t.Errorf("payload %s, want spawn_failed naming end_of_options", got[0].Signal.Payload)
		}
	})
}

// A dispatch that says resume starts the CLI with the provider's
// resume_args — the session id, the message (the dispatch's, else the
// provider's continue_message; one starting with "-" after "--") — then
// the run's args and the hook options; a provider without resume_args
// starts afresh with the prompt; a bad session id fails the attempt
// before exec (docs/architecture.md#resume-and-continue).
func TestResumeArgv(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "fake-agent")
	if err := os.WriteFile(bin, []byte(argvScript), 0o755); err != nil {
		t.Fatal(err)
	}
	catalog := fmt.Sprintf(`
[providers.fake]
binary = %q
args = ["--task", "{prompt}"]
resume_args = ["--resume", "{session_id}", "{prompt}"]
continue_message = "keep going"
hooks = "codex"
end_of_options = "--"

[providers.plain]
binary = %q
args = ["{prompt}"]
`, bin, bin)
	codexHook := "[-c]\n[notify=[\"/opt/pam/bin/pam\",\"hook\",\"completed\"]]\n"
	for _, tc := range []struct {
		name, provider, session, text string
		resume                        bool
		want                          string
	}{
		{"fresh", "fake", "", "", false, "[--task]\n[write the code]\n[--model]\n[m]\n" + codexHook},
		{"resume with the continuation's text", "fake", "abc", "now the docs", true, "[--resume]\n[abc]\n[now the docs]\n[--model]\n[m]\n" + codexHook},
		{"resume with the continue message", "fake", "abc", "", true, "[--resume]\n[abc]\n[keep going]\n[--model]\n[m]\n" + codexHook},
		{"a message that looks like an option", "fake", "abc", "-v please", true, "[--resume]\n[abc]\n[--model]\n[m]\n" + codexHook + "[--]\n[-v please]\n"},
		{"a provider that cannot resume starts afresh", "plain", "abc", "now the docs", true, "[write the code]\n[--model]\n[m]\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			orch := newOrchestrator(t)
			f := newFixture(t, orch.URL, tc.provider, bin, "write the code")
			f.d.Args = []string{"--model", "m"}
			f.d.Resume, f.d.AgentSessionID, f.d.ResumeText = tc.resume, tc.session, tc.text
			f.writeDispatch(t)
			f.writeCatalog(t, catalog)
			o := f.options()
			o.PamBinary = "/opt/pam/bin/pam"
			if code := Run(t.Context(), o); code != 0 {
				t.Fatalf("exit %d\n%s", code, f.stderr)
			}
			if out := f.stdout.String(); out != tc.want {
				t.Errorf("argv:\n%s\nwant:\n%s", out, tc.want)
			}
			if afresh := strings.Contains(f.stderr.String(), "starts afresh"); afresh != (tc.provider == "plain") {
				t.Errorf("stderr %q", f.stderr)
			}
		})
	}

	t.Run("a bad session id", func(t *testing.T) {
		t.Parallel()
		orch := newOrchestrator(t)
		f := newFixture(t, orch.URL, "fake", bin, "write the code")
		f.d.Resume, f.d.AgentSessionID = true, "--dangerously-skip-permissions"
		f.writeDispatch(t)
		f.writeCatalog(t, catalog)
		if code := Run(t.Context(), f.options()); code != ExitCannotRun {
			t.Errorf("exit %d, want %d\n%s", code, ExitCannotRun, f.stderr)
		}
		if strings.Contains(f.stdout.String(), "dangerously") {
			t.Error("the CLI ran with the session id as an option")
		}
		if got := orch.signals(); len(got) != 1 || got[0].Signal.Kind != wire.SignalFailed {
			t.Errorf("signals %+v", got)
		}
	})
}
