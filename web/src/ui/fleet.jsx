// Fleet (docs/architecture.md#web-dashboard): hosts with status, capacity,
// providers, last seen and a wall of live pane thumbnails; disable/enable,
// remove, rotate the token, clear a suspect instance; add a host, showing
// its worker token once with what to run on that host.
import { useState } from 'preact/hooks';
import { isAdmin } from '../role.js';
import { del, patch, post } from '../api.js';
import { hosts, put, runs, taskTitle } from '../store.js';
import { Ago, Copy, Dialog, Empty, Field, StatusBadge, attempt } from './common.jsx';
import { Icon } from './icons.jsx';
import { Thumb } from './thumb.jsx';

/** Fleet lists the hosts. */
export function Fleet() {
  const [adding, setAdding] = useState(false);
  const [shown, setShown] = useState(null); // {host, token, rotated}
  const list = [...hosts.value.values()].sort((a, b) => a.name.localeCompare(b.name));
  const online = list.filter((h) => h.status === 'online').length;
  const cap = list.reduce((s, h) => s + (h.disabled ? 0 : h.max_runs), 0);
  const used = list.reduce((s, h) => s + h.active_runs, 0);
  return (
    <section>
      <div class="page-head">
        <div><h1>Fleet</h1><p class="muted">{online} of {list.length} host{list.length === 1 ? '' : 's'} online · {used} of {cap} run slots in use</p></div>
        {isAdmin.value && <button class="btn primary" onClick={() => setAdding(true)} data-testid="add-host"><Icon name="plus" size={15} />Add host</button>}
      </div>
      {list.length === 0 ? (
        <Empty icon="fleet" title="No hosts yet">Add a host, then start <code>pam worker</code> on it.</Empty>
      ) : (
        <div class="host-list">
          {list.map((h) => <HostCard key={h.id} h={h} onToken={(t) => setShown({ host: h, token: t, rotated: true })} />)}
        </div>
      )}
      {adding && <AddHost onClose={() => setAdding(false)} onAdded={(host, token) => { setAdding(false); setShown({ host, token }); }} />}
      {shown && <TokenShown {...shown} onClose={() => setShown(null)} />}
    </section>
  );
}

function HostCard({ h, onToken }) {
  const [menu, setMenu] = useState(false);
  const live = [...runs.value.values()].filter((r) => r.host_id === h.id && r.status === 'running');
  const pct = h.max_runs ? Math.min(100, (100 * h.active_runs) / h.max_runs) : 0;
  const act = async (path, ok) => {
    setMenu(false);
    const out = await attempt(() => post(`/hosts/${h.id}/${path}`), ok);
    if (out && out.id) put('host', out.id, out);
    return out;
  };
  return (
    <article class="card host-card" data-testid="host-card" data-host={h.name} data-status={h.status}>
      <header class="host-head">
        <div class="host-name">
          <h3>{h.name}</h3>
          <StatusBadge status={h.status} />
          {h.instance_suspect && <span class="badge st-failed" title="Another instance reported this host's name"><span class="dot" />suspect</span>}
        </div>
        {isAdmin.value && <div class="menu-wrap">
          <button class="btn icon-btn ghost" aria-label={'Actions for ' + h.name} onClick={() => setMenu(!menu)}><Icon name="more" size={18} /></button>
          {menu && (
            <div class="menu" role="menu">
              {h.disabled
                ? <button role="menuitem" onClick={() => act('enable', 'Host enabled')}><Icon name="power" size={15} />Enable</button>
                : <button role="menuitem" onClick={() => act('disable', 'Host disabled: running work continues')}><Icon name="power" size={15} />Disable (drain)</button>}
              <button role="menuitem" onClick={async () => {
                setMenu(false);
                const v = prompt(`Concurrent runs for ${h.name}:`, String(h.max_runs));
                if (v === null) return;
                const out = await attempt(() => patch(`/hosts/${h.id}`, { max_runs: Number(v) }), 'Capacity changed');
                if (out) put('host', out.id, out);
              }}><Icon name="edit" size={15} />Change capacity</button>
              <button role="menuitem" onClick={async () => {
                setMenu(false);
                if (!confirm(`Give ${h.name} a new worker token? The old one stops working at once and its worker disconnects.`)) return;
                const out = await attempt(() => post(`/hosts/${h.id}/rotate-token`));
                if (out) onToken(out.worker_token);
              }}><Icon name="key" size={15} />Rotate token</button>
              {h.instance_suspect && <button role="menuitem" onClick={() => act('clear-suspect', 'Suspect cleared')}><Icon name="check" size={15} />Accept the new instance</button>}
              <hr />
              <button role="menuitem" class="danger" onClick={async () => {
                setMenu(false);
                if (!confirm(`Remove ${h.name}? Its worker is disconnected at once.`)) return;
                const ok = await attempt(async () => { await del(`/hosts/${h.id}`); return true; }, 'Host removed');
                if (ok) put('host', h.id, null);
              }}><Icon name="trash" size={15} />Remove</button>
            </div>
          )}
        </div>}
      </header>
      <div class="host-stats">
        <div class="stat">
          <span class="stat-label">Capacity</span>
          <span class="stat-value">{h.active_runs}<span class="muted"> / {h.max_runs}</span></span>
          <span class="meter"><span style={{ width: pct + '%' }} class={pct >= 100 ? 'full' : ''} /></span>
        </div>
        <div class="stat"><span class="stat-label">Last seen</span><span class="stat-value sm"><Ago iso={h.last_seen_at} /></span></div>
        <div class="stat"><span class="stat-label">Platform</span><span class="stat-value sm">{h.platform || '—'}</span></div>
        <div class="stat"><span class="stat-label">Executor</span><span class="stat-value sm">{h.executor || '—'}</span></div>
      </div>
      <div class="chips">{(h.providers || []).map((p) => <span key={p} class="chip">{p}</span>)}</div>
      {live.length > 0 && (
        <div class="wall">
          {live.slice(0, 12).map((r) => (
            <a key={r.id} href={'/runs/' + r.id} class="wall-item" data-nav>
              <span class="wall-title">{taskTitle(r)}</span>
              <Thumb runId={r.id} live lines={6} />
            </a>
          ))}
        </div>
      )}
    </article>
  );
}

function AddHost({ onClose, onAdded }) {
  const [name, setName] = useState('');
  const [max, setMax] = useState('8');
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    const out = await attempt(() => post('/hosts', { name: name.trim(), max_runs: Number(max) || 8 }));
    setBusy(false);
    if (out) {
      put('host', out.host.id, out.host);
      onAdded(out.host, out.worker_token);
    }
  };
  return (
    <Dialog title="Add a host" onClose={onClose}>
      <form class="form" onSubmit={submit}>
        <Field label="Name" hint="What the worker registers as (PAM_HOST_NAME)"><input name="name" value={name} onInput={(e) => setName(e.currentTarget.value)} required autofocus /></Field>
        <Field label="Concurrent runs"><input type="number" min="1" max="1000" value={max} onInput={(e) => setMax(e.currentTarget.value)} /></Field>
        <div class="form-actions">
          <button type="button" class="btn ghost" onClick={onClose}>Cancel</button>
          <button type="submit" class="btn primary" disabled={busy || !name.trim()}>Add host</button>
        </div>
      </form>
    </Dialog>
  );
}

function shq(s) {
  return /^[A-Za-z0-9_./:@%+=,-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

/** TokenShown shows a worker token once and what to run on the host (the token never inside a command line). */
function TokenShown({ host, token, rotated, onClose }) {
  const origin = location.origin;
  const store = 'install -d -m 700 <data>/worker && install -m 600 /dev/stdin <data>/worker/token';
  const run = `PAM_URL=${shq(origin)} PAM_HOST_NAME=${shq(host.name)} pam worker`;
  const loop = /^(localhost|127\.|\[::1\])/.test(location.hostname) || location.hostname === '::1';
  return (
    <Dialog title={rotated ? `New token for ${host.name}` : `${host.name} is added`} onClose={onClose} wide>
      <div class="token-flow">
        <p class="notice">This worker token is shown only this once: pam keeps only its hash.</p>
        <div class="token-box"><code data-testid="worker-token">{token}</code><Copy text={token} /></div>
        <ol class="steps">
          <li>
            <p>On <b>{host.name}</b>, store it in the worker's token file (<code>&lt;data&gt;</code> is <code>/var/lib/pam</code> as root, <code>~/.local/share/pam</code> otherwise): run this, paste the token, press Enter then Ctrl-D.</p>
            <div class="cmd"><code>{store}</code><Copy text={store} /></div>
          </li>
          <li>
            <p>Start the worker{rotated ? ' again' : ''}:</p>
            <div class="cmd"><code data-testid="worker-cmd">{run}</code><Copy text={run} /></div>
          </li>
        </ol>
        {loop && <p class="muted sm">{origin} is this machine's loopback address: a worker on another host needs an address it can reach.</p>}
        <div class="form-actions"><button class="btn primary" onClick={onClose}>Done</button></div>
      </div>
    </Dialog>
  );
}
