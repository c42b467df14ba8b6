// Start a run on a task (docs/architecture.md#web-dashboard; POST /runs,
// docs/api.md#runs): provider, host, prompt, workspace.
import { useState } from 'preact/hooks';
import { post } from '../api.js';
import { navigate } from '../router.js';
import { hosts, projects, providers, put } from '../store.js';
import { Dialog, Field, attempt } from './common.jsx';

/** StartRun is the dialog that posts a run for task and opens it. */
export function StartRun({ task, onClose }) {
  const provs = providers.value.map((p) => p.name);
  const names = provs.length ? provs : ['shell'];
  const project = projects.value.get(task.project_id);
  const [provider, setProvider] = useState(names.includes('claude') ? 'claude' : names[0]);
  const [host, setHost] = useState('');
  const [prompt, setPrompt] = useState('');
  const [workspace, setWorkspace] = useState('');
  const [busy, setBusy] = useState(false);
  const eligible = [...hosts.value.values()].filter((h) => !h.disabled);
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    const body = { task_id: task.id, provider };
    if (host) body.host_id = host;
    if (prompt.trim()) body.prompt = prompt;
    if (workspace) body.workspace = workspace;
    const r = await attempt(() => post('/runs', body));
    setBusy(false);
    if (r) {
      put('run', r.id, r);
      onClose();
      navigate('/runs/' + r.id);
    }
  };
  return (
    <Dialog title={'Run “' + task.title + '”'} onClose={onClose}>
      <form class="form" onSubmit={submit} id="start-run-form">
        <div class="row2">
          <Field label="Provider">
            <select name="provider" value={provider} onChange={(e) => setProvider(e.currentTarget.value)}>
              {names.map((n) => <option key={n} value={n}>{n}</option>)}
            </select>
          </Field>
          <Field label="Host">
            <select name="host" value={host} onChange={(e) => setHost(e.currentTarget.value)}>
              <option value="">Any eligible host</option>
              {eligible.map((h) => <option key={h.id} value={h.id}>{h.name} ({h.status})</option>)}
            </select>
          </Field>
        </div>
        <Field label="Prompt" hint={provider === 'shell' ? 'The shell command to run' : 'What the agent should do'}>
          <textarea name="prompt" rows={5} value={prompt} onInput={(e) => setPrompt(e.currentTarget.value)} class="mono" />
        </Field>
        {project && project.repo && (
          <Field label="Workspace">
            <select value={workspace} onChange={(e) => setWorkspace(e.currentTarget.value)}>
              <option value="">A git worktree of {project.repo.url} (default)</option>
              <option value="none">No worktree</option>
            </select>
          </Field>
        )}
        <div class="form-actions">
          <button type="button" class="btn ghost" onClick={onClose}>Cancel</button>
          <button type="submit" class="btn primary" disabled={busy}>Start run</button>
        </div>
      </form>
    </Dialog>
  );
}
