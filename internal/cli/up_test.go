package cli

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pam/internal/apiclient"
	"pam/internal/defaults"
	"pam/internal/pamtest"
	"pam/internal/serve"
	"pam/internal/store/storetest"
	"pam/internal/wire"
	"pam/internal/worker"
)

// fakeUp is an environment whose serve.Run and worker.Run are fakes, for
// one test of pam up. The
// worker token file is in place, so pam up starts its worker without
// asking the (fake) serve for one.
func fakeUp(t *testing.T, serveFn func(context.Context, serve.Options) error, workerFn func(context.Context, worker.Options) error) *testEnv {
	t.Helper()
	e := isolate(t)
	if err := os.MkdirAll(filepath.Join(e.dir, "worker"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.dir, "worker", "token"), []byte(strings.Repeat("a", 64)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.serve, e.worker = serveFn, workerFn
	return e
}

// fakeHostAPI answers what pam up asks of its serve once the worker token
// file is in place: its own host, which already has the default max_runs.
func fakeHostAPI(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || !strings.HasPrefix(r.URL.Path, "/api/v1/hosts/") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(wire.Host{ID: "00000000-0000-4000-8000-000000000001", Name: strings.TrimPrefix(r.URL.Path, "/api/v1/hosts/"),
			MaxRuns: defaults.MaxRuns, Providers: []string{}})
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// A worker that fails ends serve; pam up returns only after serve has, with
// the worker's error.
func TestUpWorkerFailureStopsServe(t *testing.T) {
	t.Parallel()
	serveDone := make(chan struct{})
	api := fakeHostAPI(t)
	e := fakeUp(t, func(ctx context.Context, o serve.Options) error {
		defer close(serveDone)
		o.Ready(api, testToken)
		<-ctx.Done()
		return nil
	}, func(ctx context.Context, o worker.Options) error {
		return errors.New("tmux is missing")
	})
	r := e.pam("up", "--port", "0")
	select {
	case <-serveDone:
	default:
		t.Error("pam up returned while serve still ran")
	}
	if r.code != 1 || !strings.Contains(r.stderr, "worker: tmux is missing") {
		t.Errorf("want exit 1 naming the worker's failure: %v", r)
	}
}

// A serve that fails ends the worker; pam up returns only after the worker
// has, with serve's error.
func TestUpServeFailureStopsWorker(t *testing.T) {
	t.Parallel()
	workerRunning, workerDone := make(chan struct{}), make(chan struct{})
	api := fakeHostAPI(t)
	e := fakeUp(t, func(ctx context.Context, o serve.Options) error {
		o.Ready(api, testToken)
		select {
		case <-workerRunning:
		case <-ctx.Done():
			return ctx.Err()
		}
		return errors.New("lost the database")
	}, func(ctx context.Context, o worker.Options) error {
		defer close(workerDone)
		close(workerRunning)
		<-ctx.Done()
		return nil
	})
	r := e.pam("up", "--port", "0")
	select {
	case <-workerDone:
	default:
		t.Error("pam up returned while its worker still ran")
	}
	if r.code != 1 || !strings.Contains(r.stderr, "serve: lost the database") {
		t.Errorf("want exit 1 naming serve's failure: %v", r)
	}
}

// pam up gives its own host the max_runs of PAM_MAX_RUNS at every start,
// also when the host exists with another value (issue 9 item 15: the row
// kept the max_runs it was created with, so PAM_MAX_RUNS=110 pam up still
// ran 8 at a time). pam up's serve here hands over a real serve.
func TestUpSetsMaxRuns(t *testing.T) {
	t.Parallel()
	sv := pamtest.StartServe(t, pamtest.ServeOptions{DatabaseURL: storetest.URL(t)})
	client, err := apiclient.New(sv.URL, sv.Token, "")
	if err != nil {
		t.Fatal(err)
	}
	defer client.HTTP.CloseIdleConnections()
	if _, err := client.CreateHost(t.Context(), wire.CreateHost{Name: "laptop"}); err != nil {
		t.Fatal(err)
	}

	up := func(maxRuns, host string) worker.Options {
		t.Helper()
		e := isolate(t)
		var got worker.Options
		e.serve = func(ctx context.Context, o serve.Options) error {
			o.Ready(sv.URL, sv.Token)
			<-ctx.Done()
			return nil
		}
		e.worker = func(ctx context.Context, o worker.Options) error {
			got = o
			return errors.New("worker stops here")
		}
		if maxRuns != "" {
			e.setenv("PAM_MAX_RUNS", maxRuns)
		}
		e.setenv("PAM_HOST_NAME", host)
		if r := e.pam("up", "--port", "0"); r.code != 1 || !strings.Contains(r.stderr, "worker stops here") {
			t.Fatalf("pam up PAM_MAX_RUNS=%s: want the worker to have started: %v", maxRuns, r)
		}
		return got
	}
	hostMaxRuns := func(name string) int {
		t.Helper()
		h, err := client.GetHost(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		return h.MaxRuns
	}

	if wo := up("110", "laptop"); wo.MaxRuns != 110 || wo.HostName != "laptop" {
		t.Fatalf("worker options %+v", wo)
	}
	if n := hostMaxRuns("laptop"); n != 110 {
		t.Fatalf("PAM_MAX_RUNS=110 pam up left the existing host at max_runs %d", n)
	}
	up("", "laptop") // PAM_MAX_RUNS unset: its default, at every start
	if n := hostMaxRuns("laptop"); n != defaults.MaxRuns {
		t.Fatalf("pam up without PAM_MAX_RUNS left max_runs %d, want the default %d", n, defaults.MaxRuns)
	}
	up("5", "fresh") // a host created by pam up starts with it
	if n := hostMaxRuns("fresh"); n != 5 {
		t.Fatalf("PAM_MAX_RUNS=5 pam up created a host with max_runs %d", n)
	}
	evs, err := client.ListEvents(t.Context(), 0, "host.updated", 0)
	if err != nil {
		t.Fatal(err)
	}
	var set []any
	for _, ev := range evs {
		var p struct {
			Changed map[string]any `json:"changed"`
		}
		json.Unmarshal(ev.Payload, &p)
		if n, ok := p.Changed["max_runs"]; ok {
			set = append(set, n)
		}
	}
	if len(set) != 2 || set[0] != float64(110) || set[1] != float64(defaults.MaxRuns) {
		t.Errorf("host.updated events set max_runs to %v, want [110 %d]", set, defaults.MaxRuns)
	}
}
