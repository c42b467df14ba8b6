// Runs (docs/architecture.md#web-dashboard): a live list filtered by
// status, project, host, provider and attention; the filters live in the
// URL's query. It starts with the newest runs and loads older ones on
// demand, so every run is reachable.
import { useState } from 'preact/hooks';
import { navigate } from '../router.js';
import { attentionOf, hostName, hosts, isActive, loadOlderRuns, projects, providers, runs, runsNext, taskTitle } from '../store.js';
import { Ago, Empty, StatusBadge, attempt, duration, shortId } from './common.jsx';

const STATUSES = ['pending', 'spawning', 'running', 'exited', 'failed', 'stopped'];
const ATTENTION = [['any', 'Needs a person'], ['needs_input', 'Needs input'], ['rate_limited', 'Usage limit'], ['idle', 'Idle'], ['none', 'None']];

/** Runs is the filterable list of runs. */
export function Runs({ query }) {
  const f = {
    status: query.get('status') || '',
    project: query.get('project') || '',
    host: query.get('host') || '',
    provider: query.get('provider') || '',
    attention: query.get('attention') || '',
  };
  const set = (k, v) => {
    const q = new URLSearchParams(query);
    if (v) q.set(k, v);
    else q.delete(k);
    const s = q.toString();
    navigate('/runs' + (s ? '?' + s : ''), { replace: true });
  };
  const list = [...runs.value.values()].filter((r) => {
    if (f.status === 'active' ? !isActive(r) : f.status && r.status !== f.status) return false;
    if (f.project && r.project_id !== f.project) return false;
    if (f.host && r.host_id !== f.host) return false;
    if (f.provider && r.provider !== f.provider) return false;
    const att = attentionOf(r);
    if (f.attention === 'any' ? att === 'none' : f.attention && att !== f.attention) return false;
    return true;
  }).sort((a, b) => Date.parse(b.created_at) - Date.parse(a.created_at));
  const provs = new Set(providers.value.map((p) => p.name));
  for (const r of runs.value.values()) provs.add(r.provider);
  const any = Object.values(f).some(Boolean);
  return (
    <section>
      <div class="page-head">
        <div><h1>Runs</h1><p class="muted">{list.length} run{list.length === 1 ? '' : 's'}{any ? ' match' : ''}</p></div>
      </div>
      <div class="filters" role="group" aria-label="Filters">
        <select aria-label="Status" value={f.status} onChange={(e) => set('status', e.currentTarget.value)} data-testid="filter-status">
          <option value="">All statuses</option>
          <option value="active">Active</option>
          {STATUSES.map((s) => <option key={s} value={s}>{s}</option>)}
        </select>
        <select aria-label="Project" value={f.project} onChange={(e) => set('project', e.currentTarget.value)}>
          <option value="">All projects</option>
          {[...projects.value.values()].map((p) => <option key={p.id} value={p.id}>{p.name}</option>)}
        </select>
        <select aria-label="Host" value={f.host} onChange={(e) => set('host', e.currentTarget.value)}>
          <option value="">All hosts</option>
          {[...hosts.value.values()].map((h) => <option key={h.id} value={h.id}>{h.name}</option>)}
        </select>
        <select aria-label="Provider" value={f.provider} onChange={(e) => set('provider', e.currentTarget.value)}>
          <option value="">All providers</option>
          {[...provs].sort().map((p) => <option key={p} value={p}>{p}</option>)}
        </select>
        <select aria-label="Attention" value={f.attention} onChange={(e) => set('attention', e.currentTarget.value)}>
          <option value="">Any attention</option>
          {ATTENTION.map(([v, l]) => <option key={v} value={v}>{l}</option>)}
        </select>
        {any && <button class="btn ghost sm" onClick={() => navigate('/runs', { replace: true })}>Clear</button>}
      </div>
      {list.length === 0 ? (
        <Empty icon="runs" title={any ? 'No run matches' : 'No runs yet'}>{any ? (runsNext.value ? 'Change the filters, or load older runs.' : 'Change the filters.') : 'Start one from a task on a project board.'}</Empty>
      ) : (
        <div class="card table-card">
          <table class="table runs-table">
            <thead>
              <tr><th>Status</th><th>Task</th><th class="hide-sm">Project</th><th class="hide-sm">Provider</th><th class="hide-md">Host</th><th class="hide-md">Attempt</th><th class="hide-sm">Duration</th><th>Created</th></tr>
            </thead>
            <tbody>
              {list.map((r) => {
                const att = attentionOf(r);
                const p = projects.value.get(r.project_id);
                return (
                  <tr key={r.id} data-testid="run-row" data-nav tabIndex={0} onClick={() => navigate('/runs/' + r.id)}
                    onKeyDown={(e) => { if (e.key === 'Enter') navigate('/runs/' + r.id); }}>
                    <td>
                      <StatusBadge status={r.status} />
                      {isActive(r) && att !== 'none' && <span class={'badge st-' + att}><span class="dot" />{att.replace('_', ' ')}</span>}
                    </td>
                    <td class="task-cell"><a href={'/runs/' + r.id} tabIndex={-1}>{taskTitle(r)}</a><span class="muted mono sm"> {shortId(r.id)}</span></td>
                    <td class="hide-sm">{p ? p.name : ''}</td>
                    <td class="hide-sm">{r.provider}</td>
                    <td class="hide-md">{hostName(r.host_id) || <span class="muted">—</span>}</td>
                    <td class="hide-md">{r.attempt}/{r.max_attempts}</td>
                    <td class="hide-sm mono sm">{r.started_at ? duration(r.started_at, r.finished_at) : '—'}</td>
                    <td class="nowrap"><Ago iso={r.created_at} /></td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </div>
      )}
      <LoadMore />
    </section>
  );
}

/** LoadMore fetches the next page of older runs while there is one. */
function LoadMore() {
  const [busy, setBusy] = useState(false);
  if (!runsNext.value) return null;
  const more = async () => {
    setBusy(true);
    await attempt(loadOlderRuns);
    setBusy(false);
  };
  return (
    <div class="load-more">
      <button class="btn" onClick={more} disabled={busy} data-testid="runs-more" aria-busy={busy}>
        {busy ? <span class="spinner sm" /> : null}Load older runs
      </button>
    </div>
  );
}
