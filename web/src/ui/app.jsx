// The shell: sign-in, navigation, connection state, shortcuts, search.
import { signal } from '@preact/signals';
import { useEffect, useRef, useState } from 'preact/hooks';
import { signInNotice, setToken, signOut, token } from '../auth.js';
import { ApiError, get } from '../api.js';
import { route, navigate } from '../router.js';
import { conn, inbox, items, loadError, loaded, projects, runs, hosts, start, taskTitle } from '../store.js';
import { notifyOn, toggleNotify } from '../notify.js';
import { Dialog, Toasts, toast } from './common.jsx';
import { Icon } from './icons.jsx';
import { Inbox } from './inbox.jsx';
import { Projects } from './projects.jsx';
import { Board } from './board.jsx';
import { Runs } from './runs.jsx';
import { RunPage } from './run.jsx';
import { Fleet } from './fleet.jsx';
import { Settings } from './settings.jsx';
import { isAdmin } from '../role.js';

const helpOpen = signal(false);
const searchOpen = signal(false);

/** App is the whole dashboard: the sign-in form until there is a token. */
export function App() {
  if (!token.value) return <><SignIn /><Toasts /></>;
  return <Shell />;
}

function SignIn() {
  const [value, setValue] = useState('');
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    const t = value.trim();
    if (!t) return;
    setBusy(true);
    setError('');
    try {
      await get('/tokens/self', { token: t });
      setToken(t);
    } catch (err) {
      setError(err instanceof ApiError && err.status === 401 ? 'That token was refused.' : err.message);
    } finally {
      setBusy(false);
    }
  };
  return (
    <main class="signin">
      <form class="signin-card" onSubmit={submit}>
        <div class="brand brand-lg"><span class="logo" aria-hidden="true" />pam</div>
        <h1>Sign in</h1>
        <p class="muted">Paste the operator token. <code>pam up</code> prints a link that signs you in, and the token is in <code>&lt;data&gt;/token</code> on the server.</p>
        {signInNotice.value && <p class="notice">{signInNotice.value}</p>}
        <label class="field">
          <span class="field-label">Operator token</span>
          <input id="token" type="password" autocomplete="current-password" spellcheck={false} value={value}
            onInput={(e) => setValue(e.currentTarget.value)} placeholder="32 hex characters" autofocus />
        </label>
        {error && <p class="form-error" role="alert">{error}</p>}
        <button class="btn primary block" type="submit" disabled={busy || !value.trim()}>{busy ? 'Checking…' : 'Sign in'}</button>
      </form>
    </main>
  );
}

const navItems = [
  { name: 'inbox', href: '/inbox', label: 'Inbox', icon: 'inbox', match: ['inbox'] },
  { name: 'projects', href: '/projects', label: 'Projects', icon: 'board', match: ['projects', 'board'] },
  { name: 'runs', href: '/runs', label: 'Runs', icon: 'runs', match: ['runs', 'run'] },
  { name: 'fleet', href: '/fleet', label: 'Fleet', icon: 'fleet', match: ['fleet'] },
  { name: 'settings', href: '/settings', label: 'Settings', icon: 'key', match: ['settings'], admin: true },
];

function Shell() {
  useEffect(() => { start(); }, []);
  useShortcuts();
  useEffect(() => {
    // The first render with data, for the browser test's budget of < 1 s
    // (docs/architecture.md#web-dashboard, internal/webui/browser_test.go).
    if (loaded.value && !performance.getEntriesByName('pam-first-render').length) {
      requestAnimationFrame(() => performance.mark('pam-first-render'));
    }
  }, [loaded.value]);
  const r = route.value;
  return (
    <div class="shell">
      <Nav />
      {conn.value === 'reconnecting' && loaded.value && (
        <div class="banner" role="status"><span class="pulse" />Reconnecting to the server — showing the last known state.</div>
      )}
      <main class="page" id="main">
        {!loaded.value ? <Loading /> : <Page r={r} />}
      </main>
      {helpOpen.value && <Help />}
      {searchOpen.value && <Search />}
      <Toasts />
    </div>
  );
}

function Loading() {
  if (loadError.value) {
    return <div class="loading"><p>Could not load the dashboard: {loadError.value}</p><p class="muted">Retrying…</p></div>;
  }
  return <div class="loading"><span class="spinner" />Loading…</div>;
}

function Page({ r }) {
  switch (r.name) {
    case 'inbox': return <Inbox />;
    case 'projects': return <Projects query={r.query} />;
    case 'board': return <Board key={r.params.ref} ref_={r.params.ref} />;
    case 'runs': return <Runs query={r.query} />;
    case 'run': return <RunPage key={r.params.id} id={r.params.id} />;
    case 'fleet': return <Fleet />;
    case 'settings': return <Settings />;
    default: return <div class="loading"><p>No page here.</p><a class="btn" href="/inbox">Go to the inbox</a></div>;
  }
}

function Nav() {
  const [open, setOpen] = useState(false);
  const [menu, setMenu] = useState(false);
  const r = route.value;
  const count = inbox.value.length;
  useEffect(() => { setOpen(false); setMenu(false); }, [r.path]);
  const state = conn.value;
  const stateLabel = state === 'live' ? 'Live' : state === 'reconnecting' ? 'Reconnecting…' : 'Connecting…';
  return (
    <header class="topbar">
      <div class="topbar-inner">
        <button class="btn icon-btn ghost nav-toggle" aria-label="Menu" aria-expanded={open} onClick={() => setOpen(!open)}>
          <Icon name={open ? 'x' : 'menu'} size={18} />
        </button>
        <a class="brand" href="/inbox"><span class="logo" aria-hidden="true" />pam</a>
        <nav class={'nav' + (open ? ' open' : '')} aria-label="Main">
          {navItems.filter((n) => !n.admin || isAdmin.value).map((n) => (
            <a key={n.name} href={n.href} class={'nav-link' + (n.match.includes(r.name) ? ' active' : '')}
              aria-current={n.match.includes(r.name) ? 'page' : undefined}>
              <Icon name={n.icon} size={16} />{n.label}
              {n.name === 'inbox' && count > 0 && <span class="count" data-testid="inbox-count">{count}</span>}
            </a>
          ))}
        </nav>
        <div class="topbar-right">
          <button class="btn ghost search-btn" onClick={() => { searchOpen.value = true; }} aria-label="Search">
            <Icon name="search" size={15} /><span class="search-label">Search</span><kbd>/</kbd>
          </button>
          <span class={'conn conn-' + state} title={stateLabel} data-testid="conn" data-state={state}>
            <span class="dot" /><span class="conn-label">{stateLabel}</span>
          </span>
          <div class="menu-wrap">
            <button class="btn icon-btn ghost" aria-label="Settings" aria-expanded={menu} onClick={() => setMenu(!menu)}>
              <Icon name="more" size={18} />
            </button>
            {menu && (
              <div class="menu" role="menu">
                <button role="menuitem" onClick={async () => {
                  const r2 = await toggleNotify();
                  toast(r2 === 'on' ? 'Notifications on' : r2 === 'off' ? 'Notifications off' : r2 === 'denied' ? 'The browser refused notifications' : 'This browser has no notifications');
                  setMenu(false);
                }}><Icon name="bell" size={15} />{notifyOn.value ? 'Turn notifications off' : 'Notify me when runs need me'}</button>
                <button role="menuitem" onClick={() => { helpOpen.value = true; setMenu(false); }}><Icon name="keyboard" size={15} />Keyboard shortcuts</button>
                <hr />
                <button role="menuitem" class="danger" onClick={() => signOut()}><Icon name="logout" size={15} />Sign out</button>
              </div>
            )}
          </div>
        </div>
      </div>
    </header>
  );
}

// ---- Keyboard ----

const shortcuts = [
  ['?', 'Show these shortcuts'],
  ['/', 'Search runs, tasks, projects and hosts'],
  ['g i', 'Go to the inbox'],
  ['g p', 'Go to projects'],
  ['g r', 'Go to runs'],
  ['g f', 'Go to the fleet'],
  ['j / k', 'Next / previous row or card'],
  ['Enter', 'Open the selected row or card'],
  ['Shift ← / →', 'Move the selected card to the previous / next column'],
  ['Esc', 'Close a dialog'],
];

function Help() {
  return (
    <Dialog title="Keyboard shortcuts" onClose={() => { helpOpen.value = false; }}>
      <table class="shortcuts">
        <tbody>
          {shortcuts.map(([k, what]) => (
            <tr key={k}><td>{k.split(' ').map((p, i) => (p === '/' && k !== '/' ? ' / ' : <kbd key={i}>{p}</kbd>))}</td><td>{what}</td></tr>
          ))}
        </tbody>
      </table>
    </Dialog>
  );
}

function typing(e) {
  const t = e.target;
  if (!(t instanceof HTMLElement)) return false;
  return t.isContentEditable || ['INPUT', 'TEXTAREA', 'SELECT'].includes(t.tagName) || !!t.closest('.xterm, dialog');
}

function useShortcuts() {
  useEffect(() => {
    let g = 0;
    const onKey = (e) => {
      if (e.metaKey || e.ctrlKey || e.altKey || typing(e)) return;
      if (g && Date.now() - g < 1200) {
        g = 0;
        const to = { i: '/inbox', p: '/projects', r: '/runs', f: '/fleet' }[e.key];
        if (to) { e.preventDefault(); navigate(to); }
        return;
      }
      g = 0;
      if (e.key === 'g') { g = Date.now(); return; }
      if (e.key === '?') { e.preventDefault(); helpOpen.value = true; return; }
      if (e.key === '/') { e.preventDefault(); searchOpen.value = true; return; }
      if (e.key === 'j' || e.key === 'k') {
        const all = [.../** @type {NodeListOf<HTMLElement>} */ (document.querySelectorAll('#main [data-nav]'))].filter((el) => el.offsetParent !== null);
        if (!all.length) return;
        e.preventDefault();
        const i = all.findIndex((el) => el === document.activeElement);
        const next = i < 0 ? 0 : Math.max(0, Math.min(all.length - 1, i + (e.key === 'j' ? 1 : -1)));
        all[next].focus();
        all[next].scrollIntoView({ block: 'nearest' });
      }
    };
    document.addEventListener('keydown', onKey);
    return () => document.removeEventListener('keydown', onKey);
  }, []);
}

// ---- Search ----

function searchAll(q) {
  q = q.trim().toLowerCase();
  if (!q) return [];
  const out = [];
  const has = (...s) => s.some((x) => x && String(x).toLowerCase().includes(q));
  for (const p of projects.value.values()) if (has(p.name, p.slug)) out.push({ kind: 'Project', label: p.name, sub: p.slug, href: '/projects/' + p.slug });
  for (const w of items.value.values()) {
    if (has(w.title, w.id.slice(0, 8))) {
      const p = projects.value.get(w.project_id);
      out.push({ kind: w.kind, label: w.title, sub: p ? p.name : '', href: '/projects/' + (p ? p.slug : w.project_id) + '?item=' + w.id });
    }
  }
  for (const r of runs.value.values()) {
    if (has(r.id.slice(0, 8), r.provider, r.status, taskTitle(r), r.prompt)) out.push({ kind: 'Run', label: taskTitle(r), sub: `${r.provider} · ${r.status} · ${r.id.slice(0, 8)}`, href: '/runs/' + r.id });
  }
  for (const h of hosts.value.values()) if (has(h.name)) out.push({ kind: 'Host', label: h.name, sub: h.status, href: '/fleet?host=' + h.name });
  return out.slice(0, 30);
}

function Search() {
  const [q, setQ] = useState('');
  const [sel, setSel] = useState(0);
  const input = useRef(null);
  const results = searchAll(q);
  useEffect(() => { input.current && input.current.focus(); }, []);
  const close = () => { searchOpen.value = false; };
  const go = (r) => { close(); navigate(r.href); };
  return (
    <Dialog title="Search" onClose={close}>
      <input ref={input} class="search-input" type="search" placeholder="Runs, tasks, projects, hosts…" value={q}
        onInput={(e) => { setQ(e.currentTarget.value); setSel(0); }}
        onKeyDown={(e) => {
          if (e.key === 'ArrowDown') { e.preventDefault(); setSel(Math.min(sel + 1, results.length - 1)); }
          if (e.key === 'ArrowUp') { e.preventDefault(); setSel(Math.max(sel - 1, 0)); }
          if (e.key === 'Enter' && results[sel]) { e.preventDefault(); go(results[sel]); }
        }} />
      <ul class="results">
        {results.map((r, i) => (
          <li key={r.href + i}>
            <a href={r.href} class={i === sel ? 'sel' : ''} onClick={(e) => { e.preventDefault(); go(r); }}>
              <span class="result-kind">{r.kind}</span><span class="result-label">{r.label}</span><span class="muted">{r.sub}</span>
            </a>
          </li>
        ))}
        {q && !results.length && <li class="muted pad">Nothing matches.</li>}
      </ul>
    </Dialog>
  );
}
