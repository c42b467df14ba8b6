// Settings › API tokens: the named tokens with their roles; create one
// (its secret shown once), rotate one (a new secret shown once, the old
// refused at once), revoke one. Only an admin sees this section.
import { useEffect, useState } from 'preact/hooks';
import { del, get, post } from '../../api.js';
import { me } from '../../role.js';
import { Ago, Copy, Dialog, Field, attempt } from '../common.jsx';
import { Icon } from '../icons.jsx';

const roles = [
  ['viewer', 'Reads, live streams and watching panes'],
  ['operator', 'Also projects, items, runs, keys, messages and attach'],
  ['admin', 'Also hosts, tokens and notifications'],
];

export function TokensSection() {
  const [list, setList] = useState(null);
  const [creating, setCreating] = useState(false);
  const [shown, setShown] = useState(null); // {token, secret, rotated}
  const load = async () => {
    const out = await attempt(() => get('/tokens'));
    if (out) setList(out.tokens);
  };
  useEffect(() => { load(); }, []);
  const rotate = async (t) => {
    if (!confirm(`Give ${t.name} a new secret? The old one stops working at once, on every server.`)) return;
    const out = await attempt(() => post(`/tokens/${t.id}/rotate`));
    if (out) { setShown({ ...out, rotated: true }); load(); }
  };
  const revoke = async (t) => {
    if (!confirm(`Revoke ${t.name}? It stops working at once and its live views are closed.`)) return;
    if (await attempt(async () => { await del(`/tokens/${t.id}`); return true; }, `Revoked ${t.name}`)) load();
  };
  return (
    <section class="card settings-section" data-testid="tokens-section" aria-labelledby="tokens-h">
      <header class="settings-head">
        <div>
          <h2 id="tokens-h">API tokens</h2>
          <p class="muted sm">Each person or tool gets its own token: the journal names it for what it does, and it can be revoked alone.</p>
        </div>
        <button class="btn primary" onClick={() => setCreating(true)} data-testid="new-token"><Icon name="plus" size={15} />New token</button>
      </header>
      {list === null ? <p class="muted pad">Loading…</p> : (
        <ul class="token-list">
          {list.map((t) => (
            <li key={t.id} class="token-row" data-testid="token-row" data-name={t.name} data-role={t.role}>
              <div class="token-main">
                <span class="token-name">{t.name}</span>
                <span class={'badge role-' + t.role}>{t.role}</span>
                {me.value && me.value.id === t.id && <span class="muted xs">this browser</span>}
              </div>
              <div class="token-meta muted sm">
                created <Ago iso={t.created_at} /> · {t.last_used_at ? <>used <Ago iso={t.last_used_at} /></> : 'never used'}
              </div>
              <div class="token-actions">
                <button class="btn sm" onClick={() => rotate(t)} data-testid="rotate-token"><Icon name="retry" size={13} />Rotate</button>
                <button class="btn sm danger" onClick={() => revoke(t)} data-testid="revoke-token"><Icon name="trash" size={13} />Revoke</button>
              </div>
            </li>
          ))}
        </ul>
      )}
      {creating && <NewToken onClose={() => setCreating(false)} onCreated={(out) => { setCreating(false); setShown(out); load(); }} />}
      {shown && <SecretShown {...shown} onClose={() => setShown(null)} />}
    </section>
  );
}

function NewToken({ onClose, onCreated }) {
  const [name, setName] = useState('');
  const [role, setRole] = useState('viewer');
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    const out = await attempt(() => post('/tokens', { name: name.trim(), role }));
    setBusy(false);
    if (out) onCreated(out);
  };
  return (
    <Dialog title="New API token" onClose={onClose}>
      <form class="form" onSubmit={submit} data-testid="new-token-form">
        <Field label="Name" hint="Who or what holds it: it names them in the journal"><input name="name" value={name} maxLength={200} onInput={(e) => setName(e.currentTarget.value)} required autofocus /></Field>
        <fieldset class="role-pick">
          <legend class="field-label">Role</legend>
          {roles.map(([r, what]) => (
            <label key={r} class={'role-opt' + (role === r ? ' sel' : '')}>
              <input type="radio" name="role" value={r} checked={role === r} onChange={() => setRole(r)} />
              <span><b>{r}</b><span class="muted sm">{what}</span></span>
            </label>
          ))}
        </fieldset>
        <div class="form-actions">
          <button type="button" class="btn ghost" onClick={onClose}>Cancel</button>
          <button type="submit" class="btn primary" disabled={busy || !name.trim()}>Create token</button>
        </div>
      </form>
    </Dialog>
  );
}

/** SecretShown shows a token's secret this once. */
function SecretShown({ token, secret, rotated, onClose }) {
  return (
    <Dialog title={rotated ? `New secret for ${token.name}` : `${token.name} is created`} onClose={onClose} wide>
      <div class="token-flow">
        <p class="notice">This secret is shown only this once: pam keeps only its hash.{rotated ? ' The old secret no longer works.' : ''}</p>
        <div class="token-box"><code data-testid="token-secret">{secret}</code><Copy text={secret} /></div>
        <p class="muted sm">Its holder signs in to this dashboard with it, or sets it as <code>PAM_TOKEN</code> for the <code>pam</code> command. Role: <b>{token.role}</b>.</p>
        <div class="form-actions"><button class="btn primary" onClick={onClose}>Done</button></div>
      </div>
    </Dialog>
  );
}
