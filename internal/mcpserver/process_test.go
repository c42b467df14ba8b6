package mcpserver_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"pam/internal/apiclient"
	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/store/storetest"
	"pam/internal/wire"
)

// TestPamMCPProcess runs `pam mcp` as the agent CLI of a real run would:
// a real serve and worker, a shell run whose environment is what pam exec
// run gives a CLI, and pam mcp started with that environment, spoken to
// over stdio by the SDK's client. It lists pam's five tools; an item it
// creates is in the run's project with the run as the actor of its event;
// another project's item, bad arguments and a stopped serve are tool
// errors it survives; closing its stdin ends it with status 0.
func TestPamMCPProcess(t *testing.T) {
	t.Parallel()
	pamtest.Require(t, "tmux")
	serve := pamtest.StartServe(t, pamtest.ServeOptions{DatabaseURL: storetest.URL(t)})
	api, err := apiclient.New(serve.URL, serve.Token, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	p, err := api.CreateProject(ctx, wire.CreateProject{Name: "Agent tools"})
	if err != nil {
		t.Fatal(err)
	}
	task, err := api.CreateWorkItem(ctx, p.ID, wire.CreateWorkItem{Kind: "task", Title: "Fix the parser"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := api.CreateProject(ctx, wire.CreateProject{Name: "Someone else's"})
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := api.CreateWorkItem(ctx, other.ID, wire.CreateWorkItem{Kind: "task", Title: "Not yours"})
	if err != nil {
		t.Fatal(err)
	}
	host, err := api.CreateHost(ctx, wire.CreateHost{Name: "mcp-host"})
	if err != nil {
		t.Fatal(err)
	}
	pamtest.StartWorker(t, pamtest.WorkerOptions{URL: serve.URL, Token: host.WorkerToken, Name: "mcp-host",
		Env: []string{"PAM_HEARTBEAT_INTERVAL=500ms"}})

	// The run's CLI writes down the environment pam exec run gave it,
	// then waits: what pam mcp inherits from a real CLI.
	envFile := filepath.Join(pamtest.ShortDir(t, "pamenv-"), "env")
	prompt := "env > " + envFile + ".part && mv " + envFile + ".part " + envFile + " && exec sleep 600"
	run, err := api.CreateRun(ctx, wire.CreateRun{TaskID: task.ID, Provider: "shell", HostID: &host.Host.ID, Prompt: &prompt})
	if err != nil {
		t.Fatal(err)
	}
	eventually.Wait(t, 60*time.Second, "the run's environment", func() bool { _, err := os.Stat(envFile); return err == nil })
	runEnv := pamVars(t, envFile)
	if runEnv["PAM_RUN_ID"] != run.ID || runEnv["PAM_SIGNAL_TOKEN"] == "" {
		t.Fatalf("the run's environment: %v", runEnv)
	}

	cmd := pamtest.Command(t, "mcp")
	for k, v := range runEnv {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "pam-test", Version: "0"}, nil).
		Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("pam mcp stderr:\n%s", stderr.String())
		}
	}()
	if got := cs.InitializeResult().ServerInfo.Name; got != "pam" {
		t.Errorf("server name %q, want pam", got)
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	if slices.Sort(names); !slices.Equal(names, slices.Sorted(slices.Values(wire.MCPTools))) {
		t.Errorf("tools %v, want %v", names, wire.MCPTools)
	}

	res, text := call(t, cs, wire.ToolCreateWorkItem, map[string]any{"title": "Flaky test in the lexer", "body": "seen while fixing the parser"})
	var made wire.WorkItem
	if err := json.Unmarshal([]byte(text), &made); res.IsError || err != nil {
		t.Fatalf("create: isError %v: %s", res.IsError, text)
	}
	got, err := api.GetWorkItem(ctx, made.ID)
	if err != nil || got.ProjectID != p.ID || got.Title != "Flaky test in the lexer" || got.Kind != "task" {
		t.Errorf("the created item: %+v, %v; want a task in %s", got, err, p.ID)
	}
	evs, err := api.ListEvents(ctx, 0, "work_item.created", 1000)
	if err != nil {
		t.Fatal(err)
	}
	var actor string
	for _, ev := range evs {
		if strings.Contains(string(ev.Payload), made.ID) && ev.Actor != nil {
			actor = *ev.Actor
		}
	}
	if actor != "agent:"+run.ID[:8] {
		t.Errorf("work_item.created actor %q, want agent:%s", actor, run.ID[:8])
	}

	if res, text := call(t, cs, wire.ToolGetWorkItem, map[string]any{"id": foreign.ID}); !res.IsError || !strings.Contains(text, "no work item") {
		t.Errorf("another project's item: isError %v, %q", res.IsError, text)
	}
	if res, text := call(t, cs, wire.ToolCreateWorkItem, map[string]any{"title": "T", "kind": "story"}); !res.IsError || !strings.Contains(text, "kind") {
		t.Errorf("a bad kind: isError %v, %q", res.IsError, text)
	}
	if res, text := call(t, cs, wire.ToolReportProgress, map[string]any{"text": "the lexer bug is filed"}); res.IsError {
		t.Errorf("progress: %s", text)
	}
	res, text = call(t, cs, wire.ToolListWorkItems, nil)
	var list wire.WorkItemList
	if err := json.Unmarshal([]byte(text), &list); res.IsError || err != nil || len(list.WorkItems) != 2 {
		t.Errorf("list after the errors: isError %v: %s", res.IsError, text)
	}

	serve.Stop(syscall.SIGTERM, 20*time.Second)
	if res, text := call(t, cs, wire.ToolListWorkItems, nil); !res.IsError || !strings.Contains(text, "could not be reached") {
		t.Errorf("serve stopped: isError %v, %q", res.IsError, text)
	}
	if err := cs.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("pam mcp exited %d after its stdin closed", code)
	}
}

// pamVars reads the PAM_* variables of an `env` listing.
func pamVars(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok && strings.HasPrefix(k, "PAM_") {
			out[k] = v
		}
	}
	return out
}
