package webui_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/wire"
)

// TestDashboardContinueFromRunPage (docs/architecture.md#resume-and-continue): on a
// host of its own whose catalog has an agent that resumes, a run whose
// hook reported a session ends; its page offers Continue; the dialog's
// message starts the continuation, which opens, shows the chain of runs
// and resumes the session with the message; the old run's page shows the
// chain too. A live run offers no Continue.
func TestDashboardContinueFromRunPage(t *testing.T) {
	t.Parallel()
	d := newDash(t)
	conf := pamtest.ShortDir(t, "pamc-")
	agent := filepath.Join(pamtest.ShortDir(t, "pamb-"), "agent")
	script := fmt.Sprintf("#!/bin/sh\nprintf '%%s\\n' \"$@\" > \"$PWD/argv.$PAM_RUN_ID\"\n"+
		"echo '{\"session_id\":\"s-web\"}' | %s hook completed\n", pamtest.Pam(t))
	if err := os.WriteFile(agent, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	catalog := fmt.Sprintf("[providers.agent]\nbinary = %q\nresume_args = [\"--resume\", \"{session_id}\", \"{prompt}\"]\n", agent)
	if err := os.WriteFile(filepath.Join(conf, "providers.toml"), []byte(catalog), 0o600); err != nil {
		t.Fatal(err)
	}
	var created wire.HostCreated
	d.api(201, "POST", "/hosts", map[string]any{"name": "conv-host", "max_runs": 4}, &created)
	pamtest.StartWorker(t, pamtest.WorkerOptions{URL: d.url, Token: created.WorkerToken, Name: "conv-host",
		Env: append([]string{"PAM_CONFIG_DIR=" + conf}, workerEnv...)})
	var p wire.Project
	d.api(201, "POST", "/projects", map[string]any{"name": "Conversations"}, &p)
	var task wire.WorkItem
	d.api(201, "POST", "/projects/"+p.Slug+"/work-items", map[string]any{"kind": "task", "title": "Talk it through"}, &task)
	cwd := pamtest.ShortDir(t, "pamd-")
	var r wire.Run
	d.api(202, "POST", "/runs", map[string]any{"task_id": task.ID, "provider": "agent", "host_id": created.Host.ID, "cwd": cwd, "prompt": "start"}, &r)

	tab, closeTab := d.tab(d.ctx)
	defer closeTab()
	d.open(tab, "/runs/"+r.ID)
	eventually.Wait(t, 60*time.Second, "the run exited with its agent session", func() bool {
		d.api(200, "GET", "/runs/"+r.ID, nil, &r)
		return r.Status == wire.RunExited && r.AgentSessionID != nil
	})
	d.waitJS(tab, 15*time.Second, "Continue on the ended run, live", `!!document.querySelector('[data-testid=continue]')`)
	d.click(tab, d.sel("continue"))
	d.setField(tab, `[data-testid=continue-form] textarea[name=text]`, "now the docs")
	d.shot(tab, "desktop-run-continue")
	d.click(tab, `[data-testid=continue-form] button[type=submit]`)
	d.waitJS(tab, 15*time.Second, "the continuation's page with the chain of two",
		fmt.Sprintf(`location.pathname !== '/runs/%s' && document.querySelectorAll('[data-testid=chain] li').length === 2 &&
			document.querySelector('[data-testid=chain]').textContent.includes('%s')`, r.ID, r.ID[:8]))
	next := eval[string](d, tab, `location.pathname.split('/').pop()`)
	var c wire.Run
	eventually.Wait(t, 60*time.Second, "the continuation exited", func() bool {
		d.api(200, "GET", "/runs/"+next, nil, &c)
		return c.Status == wire.RunExited
	})
	if c.ContinuesRunID == nil || *c.ContinuesRunID != r.ID || c.Prompt != "now the docs" {
		t.Errorf("the continuation %+v", c)
	}
	if b, err := os.ReadFile(filepath.Join(cwd, "argv."+next)); err != nil || string(b) != "--resume\ns-web\nnow the docs\n" {
		t.Errorf("the continuation's argv %q, %v", b, err)
	}
	d.shot(tab, "desktop-run-continued")
	d.goTo(tab, "/runs/"+r.ID)
	d.waitJS(tab, eventually.Medium, "the chain on the old run's page, and no second Continue",
		fmt.Sprintf(`document.querySelectorAll('[data-testid=chain] li').length === 2 && document.querySelector('[data-testid=chain] a[href="/runs/%s"]') &&
			document.querySelector('[data-testid=events]').textContent.includes('run.continued') && !document.querySelector('[data-testid=continue]')`, next))

	// A live run has no Continue.
	var live wire.Run
	d.api(202, "POST", "/runs", map[string]any{"task_id": task.ID, "provider": "shell", "host_id": created.Host.ID, "cwd": cwd, "prompt": "exec cat"}, &live)
	d.goTo(tab, "/runs/"+live.ID)
	d.waitJS(tab, eventually.Long, "the live run's page", `!!document.querySelector('.run-meta .badge.st-running')`)
	if eval[bool](d, tab, `!!document.querySelector('[data-testid=continue]')`) {
		t.Error("a live run offers Continue")
	}
	d.api(202, "POST", "/runs/"+live.ID+"/stop", map[string]any{"force": true}, nil)
}
