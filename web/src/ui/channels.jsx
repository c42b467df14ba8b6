// Notification channels, a section of Settings (docs/notifications.md):
// add a webhook, ntfy or Slack channel (a webhook's signing secret is
// shown once), send it a test, read its last deliveries, remove it.
import { useEffect, useState } from 'preact/hooks';
import { del, get, post } from '../api.js';
import { projects } from '../store.js';
import { Ago, Copy, Dialog, Empty, Field, attempt } from './common.jsx';
import { Icon } from './icons.jsx';
import './channels.css';

const kinds = {
  webhook: { label: 'Webhook', hint: 'A JSON POST of {event, run, link, text}, signed with Pam-Signature; questions carry answer URLs.', placeholder: 'https://example.com/hooks/pam' },
  ntfy: { label: 'ntfy', hint: 'The text as the body, with Title and Click; a question gets one button per choice.', placeholder: 'https://ntfy.sh/your-topic' },
  slack: { label: 'Slack', hint: 'A Slack incoming webhook.', placeholder: 'https://hooks.slack.com/services/…' },
};

/** Channels is the Settings section of notification channels. */
export function Channels() {
  const [list, setList] = useState(/** @type {any[]|null} */ (null));
  const [error, setError] = useState('');
  const [adding, setAdding] = useState(false);
  const [shown, setShown] = useState(/** @type {{channel: any, secret: string}|null} */ (null));
  const load = async () => {
    try {
      const out = await get('/notifications');
      setList(out.channels);
      setError('');
    } catch (e) {
      setError(e.message || String(e));
    }
  };
  useEffect(() => { load(); }, []);
  return (
    <section class="card settings-section" data-testid="channels">
      <div class="section-head">
        <div>
          <h2>Notification channels</h2>
          <p class="muted">Where pam tells people that a run needs them, even with no browser open.</p>
        </div>
        <button class="btn primary" onClick={() => setAdding(true)} data-testid="add-channel"><Icon name="plus" size={15} />Add channel</button>
      </div>
      {error && <p class="form-error" role="alert">{error}</p>}
      {list === null && !error && <div class="loading"><span class="spinner" />Loading…</div>}
      {list && list.length === 0 && (
        <Empty icon="bell" title="No channels yet">Add a webhook, an ntfy topic or a Slack incoming webhook to hear about runs that need input or fail.</Empty>
      )}
      {list && list.length > 0 && (
        <div class="channel-list">
          {list.map((c) => <ChannelCard key={c.id} c={c} onRemoved={() => setList(list.filter((x) => x.id !== c.id))} />)}
        </div>
      )}
      {adding && <AddChannel onClose={() => setAdding(false)} onAdded={(out) => {
        setAdding(false);
        setList([...(list || []), out.channel].sort((a, b) => a.name.localeCompare(b.name)));
        if (out.channel.kind === 'webhook') setShown(out);
      }} />}
      {shown && <SecretShown {...shown} onClose={() => setShown(null)} />}
    </section>
  );
}

function projectName(id) {
  if (!id) return 'all projects';
  const p = projects.value.get ? projects.value.get(id) : null;
  return p ? p.name : id.slice(0, 8);
}

function ChannelCard({ c, onRemoved }) {
  const [open, setOpen] = useState(false);
  const [deliveries, setDeliveries] = useState(/** @type {any[]|null} */ (null));
  const [testing, setTesting] = useState(false);
  const refresh = async () => {
    try {
      const out = await get(`/notifications/${c.id}/deliveries`);
      setDeliveries(out.deliveries);
      return out.deliveries;
    } catch {
      return null;
    }
  };
  useEffect(() => { refresh(); }, []); // the last attempt's badge
  useEffect(() => {
    if (!open) return undefined;
    refresh();
    const t = setInterval(refresh, 3000);
    return () => clearInterval(t);
  }, [open]);
  const test = async () => {
    setTesting(true);
    const before = deliveries && deliveries.length ? deliveries[0].id : 0;
    const ok = await attempt(async () => { await post(`/notifications/${c.id}/test`); return true; }, 'Test message queued');
    if (ok) {
      setOpen(true);
      // Follow the attempt for a few seconds: the answer is what matters.
      for (let i = 0; i < 30; i++) {
        const ds = await refresh();
        if (ds && ds.some((d) => d.id > before && d.event_seq === null && d.status !== 'pending' && d.status !== 'sending')) break;
        await new Promise((r) => setTimeout(r, 500));
      }
    }
    setTesting(false);
  };
  const last = deliveries && deliveries[0];
  return (
    <article class="card channel-card" data-testid="channel" data-name={c.name}>
      <header class="channel-head">
        <div class="channel-title">
          <h3>{c.name}</h3>
          <span class="chip">{kinds[c.kind] ? kinds[c.kind].label : c.kind}</span>
          {last && <DeliveryBadge d={last} />}
        </div>
        <div class="channel-actions">
          <button class="btn sm" onClick={test} disabled={testing} data-testid="test-channel"><Icon name="bell" size={14} />{testing ? 'Testing…' : 'Test'}</button>
          <button class="btn sm" onClick={() => setOpen(!open)} aria-expanded={open} data-testid="channel-deliveries-toggle">
            <Icon name="chevron" size={14} class={open ? 'rot90' : ''} />Deliveries
          </button>
          <button class="btn sm icon-btn ghost danger" aria-label={'Remove ' + c.name} onClick={async () => {
            if (!confirm(`Remove the channel ${c.name}? Its queued deliveries are dropped.`)) return;
            const ok = await attempt(async () => { await del(`/notifications/${c.id}`); return true; }, 'Channel removed');
            if (ok) onRemoved();
          }}><Icon name="trash" size={14} /></button>
        </div>
      </header>
      <div class="channel-url" title={c.url}>{c.url}</div>
      <div class="channel-meta">
        <div class="chips">{c.events.map((e) => <span key={e} class="chip">{e}</span>)}</div>
        <span class="muted sm">{projectName(c.project_id)} · added <Ago iso={c.created_at} /></span>
      </div>
      {open && <Deliveries list={deliveries} />}
    </article>
  );
}

const deliveryStyle = { delivered: 'running', failed: 'failed', gave_up: 'failed', pending: 'pending', sending: 'spawning' };

function DeliveryBadge({ d }) {
  return <span class={'badge st-' + (deliveryStyle[d.status] || 'stopped')} data-testid="delivery-status" data-status={d.status}><span class="dot" />{d.status.replace('_', ' ')}</span>;
}

function Deliveries({ list }) {
  if (list === null) return <div class="deliveries muted sm">Loading…</div>;
  if (list.length === 0) return <div class="deliveries muted sm">Nothing sent yet.</div>;
  return (
    <div class="deliveries" data-testid="deliveries">
      <table class="table delivery-table">
        <thead><tr><th>When</th><th>Event</th><th>Try</th><th>Status</th><th class="col-answer">Response</th></tr></thead>
        <tbody>
          {list.slice(0, 20).map((d) => (
            <tr key={d.id} data-testid="delivery">
              <td class="nowrap"><Ago iso={d.created_at} /></td>
              <td><code>{d.topic}</code>{d.event_seq !== null && <span class="muted sm"> #{d.event_seq}</span>}</td>
              <td>{d.attempt}</td>
              <td title={[d.response_code !== null ? 'HTTP ' + d.response_code : '', d.error || ''].filter(Boolean).join(': ')}><DeliveryBadge d={d} /></td>
              <td class="col-answer sm">
                {d.response_code !== null && <span>HTTP {d.response_code}</span>}
                {d.error && <span class="fail-text"> {d.error}</span>}
                {d.next_try_at && d.status === 'pending' && <span class="muted"> next <Ago iso={d.next_try_at} /></span>}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

function AddChannel({ onClose, onAdded }) {
  const [name, setName] = useState('');
  const [kind, setKind] = useState('webhook');
  const [url, setUrl] = useState('');
  const [events, setEvents] = useState('run.attention, run.failed');
  const [project, setProject] = useState('');
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState('');
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setError('');
    const body = { name: name.trim(), kind, url: url.trim(), events: events.split(/[\s,]+/).filter(Boolean) };
    if (project) body.project_id = project;
    try {
      onAdded(await post('/notifications', body));
    } catch (err) {
      setError(err.message || String(err));
    } finally {
      setBusy(false);
    }
  };
  const ps = projects.value.values ? [...projects.value.values()].filter((p) => p.status === 'active') : [];
  return (
    <Dialog title="Add a notification channel" onClose={onClose}>
      <form class="form" onSubmit={submit} id="add-channel-form">
        <Field label="Name"><input name="name" value={name} onInput={(e) => setName(e.currentTarget.value)} required autofocus placeholder="phone" /></Field>
        <Field label="Kind" hint={kinds[kind].hint}>
          <select name="kind" value={kind} onChange={(e) => setKind(e.currentTarget.value)}>
            {Object.entries(kinds).map(([k, v]) => <option key={k} value={k}>{v.label}</option>)}
          </select>
        </Field>
        <Field label="URL" hint="http:// or https://; pam waits 10 s for an answer and follows no redirects.">
          <input name="url" type="url" value={url} onInput={(e) => setUrl(e.currentTarget.value)} required placeholder={kinds[kind].placeholder} />
        </Field>
        <Field label="Events" hint="Topics, comma-separated; * matches within one part, e.g. run.*">
          <input name="events" value={events} onInput={(e) => setEvents(e.currentTarget.value)} required spellcheck={false} />
        </Field>
        <Field label="Project">
          <select name="project" value={project} onChange={(e) => setProject(e.currentTarget.value)}>
            <option value="">All projects</option>
            {ps.map((p) => <option key={p.id} value={p.id}>{p.name}</option>)}
          </select>
        </Field>
        {error && <p class="form-error" role="alert">{error}</p>}
        <div class="form-actions">
          <button type="button" class="btn ghost" onClick={onClose}>Cancel</button>
          <button type="submit" class="btn primary" disabled={busy || !name.trim() || !url.trim()}>Add channel</button>
        </div>
      </form>
    </Dialog>
  );
}

/** SecretShown shows a webhook's signing secret once. */
function SecretShown({ channel, secret, onClose }) {
  return (
    <Dialog title={`${channel.name} is added`} onClose={onClose} wide>
      <div class="token-flow">
        <p class="notice">This signing secret is shown only this once.</p>
        <div class="token-box"><code data-testid="channel-secret">{secret}</code><Copy text={secret} /></div>
        <p class="muted">Every POST carries <code>Pam-Signature: sha256=&lt;hex HMAC-SHA256 of the body keyed with this secret&gt;</code>: compute it over the raw body and compare before trusting the payload.</p>
        <div class="form-actions"><button class="btn primary" onClick={onClose}>Done</button></div>
      </div>
    </Dialog>
  );
}
