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
