// The Changes tab of the run page (docs/architecture.md#workspaces): what
// the run changed in its git worktree, committed apart from uncommitted —
// the files with lines added and deleted, and the diff, unified or side
// by side — refreshed live while the run works, and Push of the head shown.
import { useEffect, useRef, useState } from 'preact/hooks';
import { canOperate } from '../role.js';
import { ApiError, api, get, post } from '../api.js';
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

/** diffText reads one part of the run's diff and the head it was taken at. */
async function diffText(runID, part) {
  const r = await api('GET', `/runs/${runID}/diff?part=${part}`, undefined, { response: true });
  return { head: r.headers.get('Pam-Head') || '', diff: parseDiff(await r.text()) };
}

/**
 * Changes is the tab: what the run changed in its worktree, in two parts
 * — the commits on its branch (what Push sends) and what its working tree
 * holds beyond them — each with its files and diff; and Push, of the
 * head shown (the server refuses it head_moved when the branch moved on).
 */
export function Changes({ run }) {
  /**
   * @typedef {object} ChangesState
   * @property {boolean} [loading]
   * @property {boolean} [none] the run has no workspace
   * @property {string} [head] the branch head the diffs are of
   * @property {any[]} [files] the diffstat
   * @property {ReturnType<typeof parseDiff>} [committed] the diff of the commits
   * @property {ReturnType<typeof parseDiff>} [uncommitted] the diff of the worktree
   * @property {Date} [at] when it was read
   * @property {string} [error]
   */
  const [state, setState] = useState(/** @type {ChangesState} */ ({ loading: true }));
  const [split, setSplit] = useState(() => localStorage.getItem('pam.diff') === 'split');
  const [push, setPush] = useState(null);
  const body = useRef(null);
  const reload = useRef(() => {});
  const live = isActive(run);
  useEffect(() => {
    let stale = false;
    let busy = false;
    let again = false; // asked while a read was under way: read once more after it
    const load = async () => {
      if (document.hidden) return;
      if (busy) {
        again = true;
        return;
      }
      busy = true;
      try {
        const [stat, committed, uncommitted] = await Promise.all([
          get(`/runs/${run.id}/diff?stat=true`),
          diffText(run.id, 'committed'),
          diffText(run.id, 'uncommitted'),
        ]);
        if (stale) return;
        // The branch moved between the reads: what is shown must be one
        // head's, so read again rather than mix two.
        if (committed.head !== stat.head || uncommitted.head !== stat.head) {
          setTimeout(load, 300);
          return;
        }
        setState({ head: stat.head, files: stat.files, committed: committed.diff, uncommitted: uncommitted.diff, at: new Date() });
      } catch (e) {
        if (stale) return;
        if (e instanceof ApiError && e.code === 'no_workspace') setState({ none: true });
        else setState((s) => ({ ...s, loading: false, error: e instanceof ApiError && e.code === 'host_unreachable' ? 'The host that holds the worktree is not connected.' : e.message }));
      } finally {
        busy = false;
        if (again && !stale) {
          again = false;
          load();
        }
      }
    };
    reload.current = load;
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
  const { head, files } = state;
  const add = files.reduce((n, f) => n + (f.added || 0), 0);
  const del = files.reduce((n, f) => n + (f.deleted || 0), 0);
  const base = run.workspace ? run.workspace.base_commit : '';
  const jump = (part, path) => {
    const el = body.current && [...body.current.querySelectorAll(`[data-part=${part}] [data-testid=diff-file]`)].find((x) => x.dataset.path === path);
    if (el) el.scrollIntoView({ block: 'start', behavior: 'smooth' });
  };
  const doPush = async () => {
    setPush({ busy: true });
    try {
      const res = await post(`/runs/${run.id}/push`, { commit: head });
      setPush(res.ok ? { ok: true, text: `Pushed ${res.branch} at ${res.commit.slice(0, 8)}.` } : { error: `The push failed: ${res.detail}` });
    } catch (e) {
      if (e instanceof ApiError && e.code === 'head_moved') {
        setPush({ error: 'The branch moved on since these changes were read: nothing was pushed. Review what it holds now, then push again.' });
        reload.current();
      } else setPush({ error: e.message });
    }
  };
  const parts = [
    { key: 'committed', title: 'Committed', hint: 'on the branch: what Push sends', files: files.filter((f) => f.committed), diff: state.committed, empty: 'No commits on the branch yet.' },
    { key: 'uncommitted', title: 'Not committed', hint: 'in the working tree only: Push does not send it', files: files.filter((f) => !f.committed), diff: state.uncommitted, empty: 'Nothing beyond the commits.' },
  ];
  return (
    <div class="changes" data-testid="changes" data-head={head}>
      <div class="changes-bar">
        <span class="sm" data-testid="changes-count"><b>{parts[0].files.length}</b> committed · <b>{parts[1].files.length}</b> not committed <span class="plus">+{add}</span> <span class="minus">−{del}</span></span>
        {run.workspace && <span class="muted sm mono hide-sm">{run.workspace.branch} from {base.slice(0, 8)}</span>}
        <span class="grow" />
        {state.error && <span class="muted xs">{state.error}</span>}
        {live && <span class="muted xs" title="Read again every few seconds while the run works">live</span>}
        <button class="btn sm" onClick={toggle} data-testid="diff-mode" data-mode={split ? 'split' : 'unified'}>{split ? 'Unified' : 'Side by side'}</button>
        {canOperate.value && <button class="btn sm primary" onClick={doPush} disabled={!head || head === base || (push && push.busy)} data-testid="push" data-commit={head}
          title={`Push the branch at ${head.slice(0, 8)}: the commits shown under Committed, nothing else`}>
          Push <span class="mono">{head.slice(0, 8)}</span>
        </button>}
      </div>
      {push && (push.ok || push.error) && (
        <p class={'changes-note sm ' + (push.ok ? 'ok' : 'err')} data-testid="push-result" data-ok={push.ok ? 'true' : 'false'}>{push.ok ? push.text : push.error}</p>
      )}
      <div class="diff-body" ref={body}>
        {parts.map((p) => (
          <section key={p.key} class="changes-part" data-testid="changes-part" data-part={p.key}>
            <header class="changes-part-head">
              <b>{p.title}</b>
              <span class="muted xs">{p.hint}</span>
              <span class="grow" />
              <span class="muted xs">{p.files.length} file{p.files.length === 1 ? '' : 's'}</span>
            </header>
            {p.files.length === 0 ? <p class="pad muted sm">{p.empty}</p> : (
              <>
                <ul class="changes-files">
                  {p.files.map((f) => (
                    <li key={f.path} data-testid="changes-file" data-path={f.path} data-committed={f.committed ? 'true' : 'false'}>
                      <button onClick={() => jump(p.key, f.path)}>
                        <span class={'fst fst-' + f.status}>{f.status[0].toUpperCase()}</span>
                        <span class="mono path">{f.path}</span>
                        <span class="grow" />
                        {f.added === null ? <span class="muted xs">binary</span> : <><span class="plus">+{f.added}</span><span class="minus">−{f.deleted}</span></>}
                      </button>
                    </li>
                  ))}
                </ul>
                {p.diff.files.map((f) => <DiffFile key={f.path} f={f} split={split} />)}
                {p.diff.notice && <p class="pad muted" data-testid="diff-notice">{p.diff.notice}</p>}
              </>
            )}
          </section>
        ))}
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
