package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"

	"pam/internal/wire"
)

func TestExecRun(t *testing.T) {
	t.Parallel()
	e := isolate(t)
	data := e.dir
	var mu sync.Mutex
	var kinds []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var sig wire.Signal
		json.NewDecoder(r.Body).Decode(&sig)
		mu.Lock()
		kinds = append(kinds, sig.Kind)
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, `{"result":"applied"}`)
	}))
	defer srv.Close()

	id := uuid.NewString()
	dir := filepath.Join(data, "worker", "dispatch")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(wire.Dispatch{
		RunID: id, Attempt: 1, APIURL: srv.URL, SignalToken: "tok", Provider: "shell",
		Binary: "/bin/sh", Prompt: "echo from-the-cli; exit 3", Cwd: t.TempDir(),
	})
	if err := os.WriteFile(filepath.Join(dir, id+".json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	e.setenv("PAM_CONFIG_DIR", t.TempDir())
	e.setenv("PAM_HOLD_OPEN", "10ms")

	r := e.pam("exec", "run", id)
	if r.code != 3 {
		t.Fatalf("want the CLI's exit code 3: %v", r)
	}
	if r.stdout != "from-the-cli\n" || !strings.Contains(r.stderr, "finished with exit code 3 (failed)") || !strings.Contains(r.stderr, "PAM_HOLD_OPEN=10ms") {
		t.Errorf("%v", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(kinds, ",") != "started,finished" {
		t.Errorf("signals %v", kinds)
	}

	r = e.pam("exec", "run", "not-a-uuid")
	if r.code != 2 || !strings.Contains(r.stderr, "not a run id") {
		t.Errorf("bad run id: %v", r)
	}
	r = e.pam("exec", "run", "--hold-open", "1ms", uuid.NewString())
	if r.code != 1 || !strings.Contains(r.stderr, "dispatch file") {
		t.Errorf("no dispatch: %v", r)
	}
	if r = e.pam("exec", "run"); r.code != 2 {
		t.Errorf("no run id: %v", r)
	}
}
