package webui_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pam/internal/eventually"
	"pam/internal/pamtest"
	"pam/internal/wire"
)

// changesRun starts, in a project whose repository is a fresh remote
// (tracked.txt), a shell run that commits secret.txt and then deletes
// it from its working tree, edits tracked.txt, stages a new added.txt
// and waits; it returns the remote and the run, running in its worktree.
func (d *dash) changesRun() (remote string, r wire.Run) {
	d.t.Helper()
	remote = pamtest.GitRemote(d.t, map[string]string{"tracked.txt": "one\ntwo\n"})
	var p wire.Project
	d.api(201, "POST", "/projects", map[string]any{"name": "Changes", "repo": map[string]any{"url": remote}}, &p)
	var task wire.WorkItem
	d.api(201, "POST", "/projects/"+p.Slug+"/work-items", map[string]any{"kind": "task", "title": "Edit files"}, &task)
	d.api(202, "POST", "/runs", map[string]any{"task_id": task.ID, "provider": "shell",
		"prompt": `echo shipped > secret.txt; git add secret.txt; git -c user.name=agent -c user.email=agent@example.com commit -qm secret; rm secret.txt; ` +
			`printf 'one\nTWO\n' > tracked.txt; echo new > added.txt; git add added.txt; echo edited; exec cat`}, &r)
	eventually.Wait(d.t, eventually.Long, "the run running in its worktree", func() bool {
		d.api(200, "GET", "/runs/"+r.ID, nil, &r)
		return r.Status == "running" && r.Workspace != nil
	})
	return remote, r
}

// forget drops the browser errors logged since mark that drop says are
// expected.
func (d *dash) forget(mark int, drop func(line string) bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	kept := d.logs[:mark:mark]
	for _, l := range d.logs[mark:] {
		if !drop(l) {
			kept = append(kept, l)
		}
	}
	d.logs = kept
}

// TestDashboardChangesTab: the Changes tab shows a run's changes in two parts — what
// its branch's commits hold (what Push sends), among them a file the
// agent committed and then deleted in its working tree, and what only
// the working tree holds — with their counts and diffs, live; Push sends
// the head it showed: once the branch has moved on behind the page's
// back, the push is refused and nothing reaches the repository; after
// the tab reads the new head, it pushes that.
func TestDashboardChangesTab(t *testing.T) {
	t.Parallel()
	d := newDash(t)
	remote, r := d.changesRun()
	tab, closeTab := d.tab(d.ctx)
	defer closeTab()
	d.open(tab, "/runs/"+r.ID)
	d.click(tab, d.sel("tab-changes"))
	files := `[...document.querySelectorAll('[data-testid=changes-file]')].map((e) => e.closest('[data-part]').dataset.part + ' ' + e.dataset.committed + ' ' + e.dataset.path + ' ' + e.textContent)`
	d.waitJS(tab, 20*time.Second, "the committed part and the uncommitted part with their files and counts",
		`(() => { const f = `+files+`; const has = (s) => f.some((x) => x.startsWith(s));
			return f.length === 4 && has('committed true secret.txt A') && has('uncommitted false secret.txt D') &&
				f.some((x) => x.startsWith('uncommitted false tracked.txt') && x.includes('+1') && x.includes('−1')) && has('uncommitted false added.txt A'); })()`)
	head := pamtest.Git(t, r.Workspace.Path, "rev-parse", r.Workspace.Branch)
	if got := eval[string](d, tab, `document.querySelector('[data-testid=push]').dataset.commit`); got != head {
		t.Errorf("the tab shows head %q, the branch is at %s", got, head)
	}
	d.waitJS(tab, eventually.Short, "each part's diff", `[...document.querySelectorAll('[data-part=committed] [data-testid=diff-line] .code.add')].some((e) => e.textContent === '+shipped') &&
		[...document.querySelectorAll('[data-part=uncommitted] [data-testid=diff-line] .code.del')].some((e) => e.textContent === '-shipped') &&
		[...document.querySelectorAll('[data-part=uncommitted] [data-testid=diff-line] .code.add')].some((e) => e.textContent === '+TWO')`)
	d.shot(tab, "desktop-run-changes")
	d.click(tab, d.sel("diff-mode"))
	d.waitJS(tab, eventually.Short, "the side-by-side diff: the old line beside the new",
		`[...document.querySelectorAll('[data-testid=diff-row]')].some((row) => { const c = row.querySelectorAll('.code'); return c[0].classList.contains('del') && c[0].textContent === 'two' && c[1].classList.contains('add') && c[1].textContent === 'TWO'; })`)
	d.shot(tab, "desktop-run-changes-split")
	d.click(tab, d.sel("diff-mode"))
	// Live: a file the agent writes now shows without a reload.
	if err := os.WriteFile(filepath.Join(r.Workspace.Path, "later.txt"), []byte("a\nb\nc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.waitJS(tab, 15*time.Second, "the new file, live", `[...document.querySelectorAll('[data-part=uncommitted] [data-testid=changes-file]')].some((e) => e.dataset.path === 'later.txt' && e.textContent.includes('+3'))`)

	// The run ends (the tab stops reading on a timer); then the branch
	// moves on behind the page's back.
	d.api(202, "POST", "/runs/"+r.ID+"/stop", map[string]any{"force": true}, nil)
	d.waitJS(tab, 15*time.Second, "the tab no longer live", `!document.querySelector('[data-testid=changes] .changes-bar').textContent.includes('live')`)
	shown := eval[string](d, tab, `document.querySelector('[data-testid=push]').dataset.commit`)
	if shown != head {
		t.Fatalf("the tab shows head %q, want %s", shown, head)
	}
	write := func(name string) {
		if err := os.WriteFile(filepath.Join(r.Workspace.Path, name), []byte(name+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("sneaked-in.txt")
	pamtest.Git(t, r.Workspace.Path, "add", "sneaked-in.txt")
	pamtest.Git(t, r.Workspace.Path, "commit", "--quiet", "-m", "not reviewed")
	moved := pamtest.Git(t, r.Workspace.Path, "rev-parse", "HEAD")
	mark := d.logMark()
	d.click(tab, d.sel("push"))
	d.waitJS(tab, eventually.Long, "the push refused: the branch moved on", `(() => { const e = document.querySelector('[data-testid=push-result]'); return e && e.dataset.ok === 'false' && e.textContent.includes('moved on'); })()`)
	d.forget(mark, func(l string) bool { return strings.Contains(l, "status of 409") && strings.Contains(l, "/push") }) // the refusal is the browser's one expected error
	if out, err := exec.Command("git", "-C", remote, "rev-parse", "--verify", "--quiet", "refs/heads/"+r.Workspace.Branch).CombinedOutput(); err == nil {
		t.Fatalf("a push of a head the page did not show reached the repository: %s", out)
	}
	d.waitJS(tab, 15*time.Second, "the tab reads the new head", `document.querySelector('[data-testid=push]').dataset.commit === '`+moved+`' &&
		[...document.querySelectorAll('[data-part=committed] [data-testid=changes-file]')].some((e) => e.dataset.path === 'sneaked-in.txt')`)
	d.click(tab, d.sel("push"))
	d.waitJS(tab, eventually.Long, "the push done", `(() => { const e = document.querySelector('[data-testid=push-result]'); return e && e.dataset.ok === 'true'; })()`)
	if got := pamtest.Git(t, remote, "rev-parse", "refs/heads/"+r.Workspace.Branch); got != moved {
		t.Errorf("the repository's branch is at %s, want the head shown %s", got, moved)
	}
	d.shot(tab, "desktop-run-changes-pushed")

	d.changesOnPhone(r.ID)
}

// changesOnPhone: on a phone, run id's Changes tab shows both parts —
// the commit made behind the page's back took the file the agent had
// staged with it — and nothing wider than the screen.
func (d *dash) changesOnPhone(id string) {
	d.t.Helper()
	phone := d.phoneTab()
	d.open(phone, "/runs/"+id)
	d.click(phone, d.sel("tab-changes"))
	d.waitJS(phone, 20*time.Second, "both parts on the phone", `document.querySelectorAll('[data-part=committed] [data-testid=changes-file]').length === 3 &&
		document.querySelectorAll('[data-part=uncommitted] [data-testid=changes-file]').length === 3`)
	d.noOverflow(phone, "/runs/"+id+" changes")
	_ = eval[bool](d, phone, `(() => { document.querySelector('[data-testid=changes]').scrollIntoView({ block: 'start' }); scrollBy(0, -64); return true; })()`)
	d.shot(phone, "phone-run-changes")
	d.goTo(phone, "/")
}
