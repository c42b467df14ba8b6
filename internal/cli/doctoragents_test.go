package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"pam/internal/pamtest"
)

// doctorChecks runs doctor --json and returns its checks by name.
func doctorChecks(t *testing.T, e *testEnv) (map[string]check, string) {
	t.Helper()
	r := e.pam("doctor", "--json")
	var got struct {
		Checks []check `json:"checks"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("%v\n%v", err, r)
	}
	m := map[string]check{}
	for _, c := range got.Checks {
		m[c.Name] = c
	}
	return m, r.stdout + e.pam("doctor").stdout
}

// TestDoctorAgentSetup: for each agent CLI found, doctor checks its
// one-time set-up (claude: onboarding and an approved key; codex: a
// login or a model provider with its key; gemini: an auth type) and
// prints the command that does it; run as printed (with the key in the
// environment), that command makes the check pass. No key is printed.
func TestDoctorAgentSetup(t *testing.T) {
	t.Parallel()
	pamtest.Require(t, "jq") // the fixes doctor prints use it
	e := isolate(t)
	home := e.vars["HOME"]
	bin := t.TempDir()
	for _, name := range []string{"claude", "codex", "gemini"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	const anthropicKey, openaiKey, geminiKey = "sk-ant-doctor-0123456789-SECRET-TAIL-abcdefghij", "sk-openai-SECRET-doctor", "gemini-SECRET-doctor"
	e.setenv("PATH", bin+":"+os.Getenv("PATH"))
	e.setenv("PAM_URL", "http://127.0.0.1:1")
	e.setenv("ANTHROPIC_API_KEY", anthropicKey)
	e.setenv("GEMINI_API_KEY", geminiKey)

	checks, out := doctorChecks(t, e)
	for _, secret := range []string{anthropicKey, anthropicKey[len(anthropicKey)-20:], openaiKey, geminiKey} {
		if strings.Contains(out, secret) {
			t.Errorf("doctor shows a secret (%q):\n%s", secret, out)
		}
	}
	cl, cx, gm := checks["claude set-up"], checks["codex set-up"], checks["gemini set-up"]
	if cl.OK || !strings.Contains(cl.Detail, "onboarding not done") || !strings.Contains(cl.Detail, "not yet approved") || !strings.Contains(cl.Fix, "jq") {
		t.Errorf("claude: %+v", cl)
	}
	if cx.OK || !strings.Contains(cx.Fix, "codex login --with-api-key") {
		t.Errorf("codex: %+v", cx)
	}
	if gm.OK || !strings.Contains(gm.Detail, "no auth type") || !strings.Contains(gm.Fix, "selectedType") {
		t.Errorf("gemini: %+v", gm)
	}

	// The fixes as printed, in a shell with the keys in its environment.
	for _, c := range []check{cl, gm} {
		cmd, _, _ := strings.Cut(c.Fix, "; or ")
		cmd = cmd[strings.Index(cmd, "(umask"):]
		sh := exec.Command("/bin/sh", "-c", cmd)
		sh.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "ANTHROPIC_API_KEY=" + anthropicKey}
		if b, err := sh.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, b)
		}
	}
	// codex: a login file as codex login --with-api-key writes it.
	os.MkdirAll(filepath.Join(home, ".codex"), 0o700)
	os.WriteFile(filepath.Join(home, ".codex", "auth.json"), []byte(`{"auth_mode":"apikey","OPENAI_API_KEY":"`+openaiKey+`"}`), 0o600)

	checks, out = doctorChecks(t, e)
	for _, name := range []string{"claude set-up", "codex set-up", "gemini set-up"} {
		if !checks[name].OK {
			t.Errorf("after the fixes, %s: %+v", name, checks[name])
		}
	}
	if strings.Contains(out, openaiKey) {
		t.Errorf("doctor shows codex's key:\n%s", out)
	}
	var cfg map[string]any
	b, _ := os.ReadFile(filepath.Join(home, ".claude.json"))
	if json.Unmarshal(b, &cfg) != nil || cfg["hasCompletedOnboarding"] != true {
		t.Errorf("claude config after the fix: %s", b)
	}

	// codex with a model provider of its own needs no login, only its key.
	os.Remove(filepath.Join(home, ".codex", "auth.json"))
	os.WriteFile(filepath.Join(home, ".codex", "config.toml"), []byte("model_provider = \"local\"\n[model_providers.local]\nbase_url = \"http://127.0.0.1:9/v1\"\nenv_key = \"LOCAL_KEY\"\nwire_api = \"responses\"\n"), 0o600)
	checks, _ = doctorChecks(t, e)
	if c := checks["codex set-up"]; c.OK || !strings.Contains(c.Detail, "LOCAL_KEY") {
		t.Errorf("codex provider without its key: %+v", c)
	}
	e.setenv("LOCAL_KEY", "x")
	if checks, _ = doctorChecks(t, e); !checks["codex set-up"].OK {
		t.Errorf("codex provider with its key: %+v", checks["codex set-up"])
	}

	// A CLI that is not installed is not checked.
	os.Remove(filepath.Join(bin, "gemini"))
	if checks, _ = doctorChecks(t, e); checks["gemini set-up"].Name != "" {
		t.Errorf("gemini checked without its binary: %+v", checks["gemini set-up"])
	}
}
