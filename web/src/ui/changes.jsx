// The Changes tab of the run page (contract §18): what the run changed
// in its git worktree — the files with lines added and deleted, and the
// diff, unified or side by side — refreshed live while the run works.
import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, api, get } from '../api.js';
import { isActive, onEvent } from '../store.js';

/** How often a live run's changes are read again (the agent edits files without events). */
const REFRESH_MS = 4000;

/**
 * parseDiff splits a unified diff (git's, as GET /runs/{id}/diff gives it)
 * into files, each with its hunks of numbered lines.
 * @param {string} text
 */
export function parseDiff(text) {
  const files = [];
  let notice = '';
  let f = null;
  let h = null;
  let oldN = 0;
  let newN = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith('diff --git ')) {
      const m = /^diff --git a\/(.*) b\/(.*)$/.exec(line);
      f = { path: m ? m[2] : line.slice(11), hunks: [], binary: false, status: 'modified' };
      files.push(f);
      h = null;
      continue;
    }
    if (line.startsWith('[pam: ')) {
      notice = line;
      continue;
    }
    if (!f) continue;
    if (line.startsWith('@@')) {
      const m = /^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@(.*)$/.exec(line);
      oldN = m ? Number(m[1]) : 0;
      newN = m ? Number(m[2]) : 0;
      h = { header: line, context: m ? m[3].trim() : '', lines: [] };
      f.hunks.push(h);
      continue;
    }
    if (!h) {
      if (line.startsWith('new file')) f.status = 'added';
      else if (line.startsWith('deleted file')) f.status = 'deleted';
      else if (line.startsWith('Binary files')) f.binary = true;
      else if (line.startsWith('+++ b/')) f.path = line.slice(6);
      else if (line.startsWith('--- a/') && f.status === 'deleted') f.path = line.slice(6);
      continue;
    }
    const c = line[0];
    if (c === '+') h.lines.push({ t: 'add', text: line.slice(1), n: newN++ });
    else if (c === '-') h.lines.push({ t: 'del', text: line.slice(1), o: oldN++ });
    else if (c === ' ') h.lines.push({ t: 'ctx', text: line.slice(1), o: oldN++, n: newN++ });
    else if (c === '\\') h.lines.push({ t: 'note', text: line });
  }
  return { files, notice };
}

/**
 * sideBySide pairs a hunk's lines into rows [left, right]: context on both
 * sides, a run of deletions beside the additions that follow it.
 */
export function sideBySide(lines) {
  const rows = [];
  let dels = [];
  let adds = [];
  const flush = () => {
    for (let i = 0; i < Math.max(dels.length, adds.length); i++) rows.push([dels[i] || null, adds[i] || null]);
    dels = [];
    adds = [];
  };
  for (const l of lines) {
    if (l.t === 'del') {
      if (adds.length) flush();
      dels.push(l);
    } else if (l.t === 'add') adds.push(l);
    else {
      flush();
      rows.push(l.t === 'ctx' ? [l, l] : [l, null]);
    }
  }
  flush();
  return rows;
}

/** Changes is the tab: the stat and the diff of run's worktree. */
export function Changes({ run }) {
  const [state, setState] = useState({ loading: true });
  const [split, setSplit] = useState(() => localStorage.getItem('pam.diff') === 'split');
  const body = useRef(null);
  const live = isActive(run);
  useEffect(() => {
    let stale = false;
    let busy = false;
    const load = async () => {
      if (busy || document.hidden) return;
      busy = true;
      try {
        const [stat, text] = await Promise.all([
          get(`/runs/${run.id}/diff?stat=true`),
          api('GET', `/runs/${run.id}/diff`, undefined, { response: true }).then((r) => r.text()),
        ]);
        if (!stale) setState({ files: stat.files, diff: parseDiff(text), at: new Date() });
      } catch (e) {
        if (stale) return;
        if (e instanceof ApiError && e.code === 'no_workspace') setState({ none: true });
        else setState((s) => ({ ...s, loading: false, error: e instanceof ApiError && e.code === 'host_unreachable' ? 'The host that holds the worktree is not connected.' : e.message }));
      } finally {
        busy = false;
      }
    };
    load();
    let t = 0;
    const off = onEvent((e) => {
      if (e.run_id !== run.id) return;
      clearTimeout(t);
      t = setTimeout(load, 200);
    });
    const every = live ? setInterval(load, REFRESH_MS) : 0;
    return () => { stale = true; off(); clearTimeout(t); clearInterval(every); };
  }, [run.id, live, run.workspace && run.workspace.path]);
  const toggle = () => {
    localStorage.setItem('pam.diff', split ? 'unified' : 'split');
    setSplit(!split);
  };
  if (state.none) {
    return <p class="pad muted" data-testid="changes-empty">This run has no worktree{run.workspace ? '' : ' (its project names no repository, or it was removed)'}.</p>;
  }
  if (!state.files) return <p class="pad muted">{state.error || 'Loading…'}</p>;
  const files = state.files;
  const add = files.reduce((n, f) => n + (f.added || 0), 0);
  const del = files.reduce((n, f) => n + (f.deleted || 0), 0);
  const jump = (path) => {
    const el = body.current && [...body.current.querySelectorAll('[data-testid=diff-file]')].find((x) => x.dataset.path === path);
    if (el) el.scrollIntoView({ block: 'start', behavior: 'smooth' });
  };
  return (
    <div class="changes" data-testid="changes">
      <div class="changes-bar">
        <span class="sm"><b>{files.length}</b> file{files.length === 1 ? '' : 's'} changed <span class="plus">+{add}</span> <span class="minus">−{del}</span></span>
        {run.workspace && <span class="muted sm mono hide-sm">{run.workspace.branch} from {run.workspace.base_commit.slice(0, 8)}</span>}
        <span class="grow" />
        {state.error && <span class="muted xs">{state.error}</span>}
        {live && <span class="muted xs" title="Read again every few seconds while the run works">live</span>}
        <button class="btn sm" onClick={toggle} data-testid="diff-mode" data-mode={split ? 'split' : 'unified'}>{split ? 'Unified' : 'Side by side'}</button>
      </div>
      {files.length === 0 ? <p class="pad muted">No changes yet.</p> : (
        <ul class="changes-files">
          {files.map((f) => (
            <li key={f.path} data-testid="changes-file" data-path={f.path}>
              <button onClick={() => jump(f.path)}>
                <span class={'fst fst-' + f.status}>{f.status[0].toUpperCase()}</span>
                <span class="mono path">{f.path}</span>
                <span class="grow" />
                {f.added === null ? <span class="muted xs">binary</span> : <><span class="plus">+{f.added}</span><span class="minus">−{f.deleted}</span></>}
              </button>
            </li>
          ))}
        </ul>
      )}
      <div class="diff-body" ref={body}>
        {state.diff.files.map((f) => <DiffFile key={f.path} f={f} split={split} />)}
        {state.diff.notice && <p class="pad muted" data-testid="diff-notice">{state.diff.notice}</p>}
      </div>
    </div>
  );
}

function DiffFile({ f, split }) {
  return (
    <section class="diff-file" data-testid="diff-file" data-path={f.path}>
      <header class="diff-head mono"><span class={'fst fst-' + f.status}>{f.status[0].toUpperCase()}</span>{f.path}</header>
      {f.binary ? <p class="pad muted sm">Binary file, not shown.</p> : (
        <table class={'diff ' + (split ? 'split' : 'unified')}>
          {split
            ? <colgroup><col class="c-ln" /><col /><col class="c-ln" /><col /></colgroup>
            : <colgroup><col class="c-ln" /><col class="c-ln" /><col /></colgroup>}
          {f.hunks.map((h, i) => (
            <tbody key={i}>
              <tr class="hunk"><td colSpan={split ? 4 : 3} class="mono">{h.header}</td></tr>
              {split ? sideBySide(h.lines).map(([l, r], j) => (
                <tr key={j} data-testid="diff-row">
                  <td class="ln">{l ? l.o : ''}</td><td class={'code ' + (l ? l.t : 'empty')}>{l ? l.text : ''}</td>
                  <td class="ln">{r ? r.n : ''}</td><td class={'code ' + (r ? r.t : 'empty')}>{r ? r.text : ''}</td>
                </tr>
              )) : h.lines.map((l, j) => (
                <tr key={j} class={l.t} data-testid="diff-line">
                  <td class="ln">{l.o ?? ''}</td><td class="ln">{l.n ?? ''}</td>
                  <td class={'code ' + l.t}>{l.t === 'add' ? '+' : l.t === 'del' ? '-' : ' '}{l.text}</td>
                </tr>
              ))}
            </tbody>
          ))}
        </table>
      )}
    </section>
  );
}
