// Projects (docs/architecture.md#web-dashboard): each with its items by
// status and live runs; archived projects on demand (?archived=1), each
// with a Restore button.
import { useState } from 'preact/hooks';
import { canOperate } from '../role.js';
import { post } from '../api.js';
import { navigate } from '../router.js';
import { isActive, items, projects, put, runs } from '../store.js';
import { Ago, Dialog, Empty, Field, attempt } from './common.jsx';
import { Icon } from './icons.jsx';

/** unarchive makes an archived project active again (its items load as it comes back). */
export async function unarchive(p) {
  const back = await attempt(() => post('/projects/' + p.id + '/unarchive'), `${p.name} restored`);
  if (back) put('project', back.id, back);
  return back;
}

/** Projects lists the active projects, and the archived ones when asked. */
export function Projects({ query }) {
  const [creating, setCreating] = useState(false);
  const showArchived = !!query && query.get('archived') === '1';
  const byName = (a, b) => a.name.localeCompare(b.name);
  const all = [...projects.value.values()];
  const list = all.filter((p) => p.status === 'active').sort(byName);
  const archived = all.filter((p) => p.status === 'archived').sort(byName);
  const toggle = () => navigate('/projects' + (showArchived ? '' : '?archived=1'), { replace: true });
  const counts = new Map();
  for (const w of items.value.values()) {
    const c = counts.get(w.project_id) || { todo: 0, doing: 0, done: 0, cancelled: 0 };
    c[w.status]++;
    counts.set(w.project_id, c);
  }
  const live = new Map();
  for (const r of runs.value.values()) if (isActive(r)) live.set(r.project_id, (live.get(r.project_id) || 0) + 1);
  return (
    <section>
      <div class="page-head">
        <div><h1>Projects</h1><p class="muted">Plan work as items on a board, then run agents on the tasks.</p></div>
        <div class="head-actions">
          <label class="toggle" data-testid="show-archived">
            <input type="checkbox" checked={showArchived} onChange={toggle} />
            <span>Show archived{archived.length ? ` (${archived.length})` : ''}</span>
          </label>
          {canOperate.value && <button class="btn primary" onClick={() => setCreating(true)} data-testid="new-project"><Icon name="plus" size={15} />New project</button>}
        </div>
      </div>
      {list.length === 0 ? (
        archived.length ? (
          <Empty icon="board" title="No active projects">{showArchived ? 'Restore an archived one below, or create a new one.' : 'Every project is archived: show them to restore one, or create a new one.'}</Empty>
        ) : (
          <Empty icon="board" title="No projects yet">Create one to plan work and start runs.</Empty>
        )
      ) : (
        <div class="project-grid">
          {list.map((p) => {
            const c = counts.get(p.id) || { todo: 0, doing: 0, done: 0, cancelled: 0 };
            const total = c.todo + c.doing + c.done;
            return (
              <a key={p.id} href={'/projects/' + p.slug} class="card project-card" data-nav data-testid="project-card">
                <div class="project-top">
                  <span class="project-mark" aria-hidden="true">{p.name.slice(0, 1).toUpperCase()}</span>
                  <div class="grow">
                    <h3>{p.name}</h3>
                    <span class="muted mono sm">{p.slug}</span>
                  </div>
                  {live.get(p.id) ? <span class="badge st-running"><span class="dot" />{live.get(p.id)} live</span> : null}
                </div>
                {p.description && <p class="project-desc">{p.description}</p>}
                <div class="progress" aria-hidden="true">
                  <span class="seg seg-done" style={{ width: total ? (100 * c.done) / total + '%' : '0%' }} />
                  <span class="seg seg-doing" style={{ width: total ? (100 * c.doing) / total + '%' : '0%' }} />
                </div>
                <div class="project-stats">
                  <span><b>{c.todo}</b> to do</span><span><b>{c.doing}</b> doing</span><span><b>{c.done}</b> done</span>
                  <span class="grow" /><span class="muted">updated <Ago iso={p.updated_at} /></span>
                </div>
              </a>
            );
          })}
        </div>
      )}
      {showArchived && (
        <section class="archived-section" aria-label="Archived projects">
          <h2>Archived</h2>
          {archived.length === 0 ? (
            <p class="muted">No archived projects.</p>
          ) : (
            <div class="project-grid">
              {archived.map((p) => (
                <div key={p.id} class="card project-card archived" data-testid="archived-project">
                  <div class="project-top">
                    <span class="project-mark" aria-hidden="true">{p.name.slice(0, 1).toUpperCase()}</span>
                    <div class="grow">
                      <h3>{p.name}</h3>
                      <span class="muted mono sm">{p.slug}</span>
                    </div>
                    <span class="badge st-stopped">archived</span>
                  </div>
                  {p.description && <p class="project-desc">{p.description}</p>}
                  <div class="project-stats">
                    <span class="muted">archived <Ago iso={p.updated_at} /></span>
                    <span class="grow" />
                    <button class="btn sm" onClick={() => unarchive(p)} data-testid="restore-project"><Icon name="undo" size={14} />Restore</button>
                  </div>
                </div>
              ))}
            </div>
          )}
        </section>
      )}
      {creating && <NewProject onClose={() => setCreating(false)} />}
    </section>
  );
}

function NewProject({ onClose }) {
  const [name, setName] = useState('');
  const [description, setDescription] = useState('');
  const [repo, setRepo] = useState('');
  const [base, setBase] = useState('');
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    const body = { name: name.trim(), description: description.trim() };
    if (repo.trim()) body.repo = base.trim() ? { url: repo.trim(), base: base.trim() } : { url: repo.trim() };
    const p = await attempt(() => post('/projects', body));
    setBusy(false);
    if (p) {
      put('project', p.id, p);
      onClose();
      navigate('/projects/' + p.slug);
    }
  };
  return (
    <Dialog title="New project" onClose={onClose}>
      <form class="form" onSubmit={submit} id="new-project-form">
        <Field label="Name"><input name="name" value={name} onInput={(e) => setName(e.currentTarget.value)} required maxLength={200} autofocus /></Field>
        <Field label="Description"><textarea rows={3} value={description} onInput={(e) => setDescription(e.currentTarget.value)} /></Field>
        <div class="row2">
          <Field label="Repository" hint="Optional: runs get a git worktree of it"><input placeholder="git URL or path" value={repo} onInput={(e) => setRepo(e.currentTarget.value)} /></Field>
          <Field label="Base ref"><input placeholder="default branch" value={base} onInput={(e) => setBase(e.currentTarget.value)} disabled={!repo.trim()} /></Field>
        </div>
        <div class="form-actions">
          <button type="button" class="btn ghost" onClick={onClose}>Cancel</button>
          <button type="submit" class="btn primary" disabled={busy || !name.trim()}>Create project</button>
        </div>
      </form>
    </Dialog>
  );
}
