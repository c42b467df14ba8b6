// A project's board (docs/architecture.md#web-dashboard): columns
// todo/doing/done/cancelled, cards dragged with pointer events (mouse
// anywhere on a card, touch by its grip) or moved with Shift+←/→; epics and
// milestones group their items; each task shows its runs as live badges.
import { signal } from '@preact/signals';
import { canOperate } from '../role.js';
import { useEffect, useRef, useState } from 'preact/hooks';
import { del, patch, post } from '../api.js';
import { navigate, route } from '../router.js';
import { attentionOf, isActive, items, loadItems, projectByRef, put, runs } from '../store.js';
import { Ago, Dialog, Empty, Field, Kind, StatusBadge, attempt, shortId, toast } from './common.jsx';
import { Icon } from './icons.jsx';
import { unarchive } from './projects.jsx';
import { StartRun } from './startrun.jsx';

const COLUMNS = [
  { status: 'todo', label: 'To do' },
  { status: 'doing', label: 'Doing' },
  { status: 'done', label: 'Done' },
  { status: 'cancelled', label: 'Cancelled' },
];
const RANK = { milestone: 4, epic: 3, task: 2, subtask: 1 };
const KINDS = ['task', 'subtask', 'epic', 'milestone'];

/** The column a card is dragged over, highlighted. */
const dropTarget = signal('');

/** moveItem changes an item's status, showing it at once and undoing it if the server refuses. */
async function moveItem(w, status) {
  if (w.status === status) return;
  put('item', w.id, { ...w, status });
  const out = await attempt(() => patch(`/work-items/${w.id}`, { status }));
  put('item', w.id, out || w);
}

function runsOf(itemId) {
  const out = [];
  for (const r of runs.value.values()) if (r.task_id === itemId) out.push(r);
  return out.sort((a, b) => Date.parse(b.created_at) - Date.parse(a.created_at));
}

/** Board is the page of one project. */
export function Board({ ref_ }) {
  const project = projectByRef(ref_);
  const [dialog, setDialog] = useState(null); // {type:'new', status} | {type:'edit', id} | {type:'run', id}
  const [filter, setFilter] = useState('');
  const boardRef = useRef(null);
  const q = route.value.query.get('item');
  useEffect(() => { if (q) setDialog({ type: 'edit', id: q }); }, [q]);
  useEffect(() => { if (project) loadItems(project.id).catch(() => {}); }, [project && project.id]);
  if (!project) return <Empty icon="board" title="No such project">It may have been archived. <a href="/projects">All projects</a></Empty>;
  const all = [...items.value.values()].filter((w) => w.project_id === project.id);
  const byId = new Map(all.map((w) => [w.id, w]));
  const f = filter.trim().toLowerCase();
  const shown = f ? all.filter((w) => w.title.toLowerCase().includes(f)) : all;
  const close = () => { setDialog(null); if (q) navigate('/projects/' + project.slug, { replace: true }); };
  return (
    <section class="board-page">
      <div class="page-head">
        <div class="grow">
          <div class="crumbs"><a href="/projects">Projects</a><Icon name="chevron" size={12} /><span>{project.slug}</span></div>
          <h1>{project.name}</h1>
          {project.description && <p class="muted">{project.description}</p>}
          {project.repo && <p class="muted sm mono"><Icon name="link" size={12} /> {project.repo.url}{project.repo.base ? ' @ ' + project.repo.base : ''}</p>}
        </div>
        <div class="head-actions">
          <input class="filter-input" type="search" placeholder="Filter cards" value={filter} onInput={(e) => setFilter(e.currentTarget.value)} aria-label="Filter cards" />
          {canOperate.value && <button class="btn primary" onClick={() => setDialog({ type: 'new', status: 'todo' })} data-testid="new-item"><Icon name="plus" size={15} />New item</button>}
          {project.status !== 'archived' && canOperate.value && <button class="btn ghost icon-btn" title="Archive project" aria-label="Archive project" onClick={async () => {
            if (!confirm(`Archive ${project.name}? It leaves the list; its items and runs stay.`)) return;
            const p = await attempt(() => del('/projects/' + project.id), 'Project archived');
            if (p) { put('project', p.id, p); navigate('/projects'); }
          }}><Icon name="archive" size={16} /></button>}
        </div>
      </div>
      {project.status === 'archived' && (
        <div class="archived-note" role="status" data-testid="archived-note">
          <Icon name="archive" size={15} /><span class="grow">This project is archived: its items and runs cannot change.</span>
          <button class="btn sm" onClick={() => unarchive(project)} data-testid="restore-project"><Icon name="undo" size={14} />Restore</button>
        </div>
      )}
      <ColumnTabs board={boardRef} counts={COLUMNS.map((c) => shown.filter((w) => w.status === c.status).length)} />
      <div class="board" data-testid="board" ref={boardRef}>
        {COLUMNS.map((c) => (
          <Column key={c.status} col={c} list={shown.filter((w) => w.status === c.status)} byId={byId}
            onAdd={() => setDialog({ type: 'new', status: c.status })} onOpen={(id) => setDialog({ type: 'edit', id })} />
        ))}
      </div>
      {dialog && dialog.type === 'new' && <ItemDialog project={project} all={all} status={dialog.status} onClose={close} />}
      {dialog && dialog.type === 'edit' && byId.get(dialog.id) && (
        <ItemDialog project={project} all={all} item={byId.get(dialog.id)} onClose={close} onRun={() => setDialog({ type: 'run', id: dialog.id })} />
      )}
      {dialog && dialog.type === 'run' && byId.get(dialog.id) && <StartRun task={byId.get(dialog.id)} onClose={close} />}
    </section>
  );
}

/**
 * ColumnTabs is the board's column strip on a phone, where one column
 * shows at a time: a tap scrolls to a column, the one in view is marked,
 * and a card dropped on a tab moves to that column.
 */
function ColumnTabs({ board, counts }) {
  const [inView, setInView] = useState(0);
  useEffect(() => {
    const b = board.current;
    if (!b) return undefined;
    const onScroll = () => {
      const col = b.querySelector('[data-col]');
      const step = col ? col.getBoundingClientRect().width + (parseFloat(getComputedStyle(b).columnGap) || 0) : 0;
      if (step) setInView(Math.max(0, Math.min(COLUMNS.length - 1, Math.round(b.scrollLeft / step))));
    };
    b.addEventListener('scroll', onScroll, { passive: true });
    return () => b.removeEventListener('scroll', onScroll);
  }, [board.current]);
  const show = (i) => {
    const b = board.current;
    const col = b && b.querySelectorAll('[data-col]')[i];
    if (col) b.scrollTo({ left: col.offsetLeft - b.firstElementChild.offsetLeft, behavior: 'smooth' });
  };
  return (
    <div class="col-tabs" role="tablist" aria-label="Columns">
      {COLUMNS.map((c, i) => (
        <button key={c.status} type="button" role="tab" aria-selected={i === inView} data-col={c.status} data-testid={'col-tab-' + c.status}
          class={'col-tab' + (i === inView ? ' active' : '') + (dropTarget.value === c.status ? ' drop' : '')} onClick={() => show(i)}>
          {c.label}<span class="col-count">{counts[i]}</span>
        </button>
      ))}
    </div>
  );
}

function groupLabel(w, byId) {
  if (!w.parent_id) return '';
  const chain = [];
  let p = byId.get(w.parent_id);
  while (p) {
    chain.unshift(p.title);
    p = p.parent_id ? byId.get(p.parent_id) : null;
  }
  return chain.join(' › ');
}

function Column({ col, list, byId, onAdd, onOpen }) {
  const groups = new Map();
  list.sort((a, b) => a.position - b.position || Date.parse(a.created_at) - Date.parse(b.created_at));
  for (const w of list) {
    const key = w.parent_id || '';
    if (!groups.has(key)) groups.set(key, { label: groupLabel(w, byId), list: [] });
    groups.get(key).list.push(w);
  }
  const ordered = [...groups.entries()].sort(([a, ga], [b, gb]) => (a === '' ? -1 : b === '' ? 1 : ga.label.localeCompare(gb.label)));
  return (
    <div class={'column col-' + col.status + (dropTarget.value === col.status ? ' drop' : '')} data-col={col.status} data-testid={'col-' + col.status}>
      <header class="column-head">
        <span class={'col-dot col-dot-' + col.status} />
        <h2>{col.label}</h2>
        <span class="col-count">{list.length}</span>
        <span class="grow" />
        {canOperate.value && <button class="btn icon-btn ghost sm" aria-label={'Add to ' + col.label} onClick={onAdd}><Icon name="plus" size={14} /></button>}
      </header>
      <div class="column-body">
        {ordered.map(([key, g]) => (
          <div key={key} class="group">
            {g.label && <div class="group-label" title={g.label}>{g.label}</div>}
            {g.list.map((w) => <Card key={w.id} w={w} byId={byId} onOpen={onOpen} />)}
          </div>
        ))}
        {list.length === 0 && <div class="column-empty">Drop cards here</div>}
      </div>
    </div>
  );
}

function Card({ w, byId, onOpen }) {
  const ref = useRef(null);
  const rs = runsOf(w.id);
  let children = 0;
  if (w.kind === 'epic' || w.kind === 'milestone') for (const x of byId.values()) if (x.parent_id === w.id) children++;
  const onPointerDown = (e) => { if (canOperate.value) startDrag(e, ref.current, w); };
  const onKeyDown = (e) => {
    if (e.key === 'Enter') { e.preventDefault(); onOpen(w.id); return; }
    if (canOperate.value && e.shiftKey && (e.key === 'ArrowRight' || e.key === 'ArrowLeft')) {
      e.preventDefault();
      const i = COLUMNS.findIndex((c) => c.status === w.status) + (e.key === 'ArrowRight' ? 1 : -1);
      if (i >= 0 && i < COLUMNS.length) {
        moveItem(w, COLUMNS[i].status).then(() => {
          /** @type {HTMLElement | null} */
          const el = document.querySelector(`[data-item="${w.id}"]`);
          if (el) el.focus();
        });
        toast(`Moved to ${COLUMNS[i].label}`);
      }
    }
  };
  return (
    <div ref={ref} class={'card item-card kind-border-' + w.kind} tabIndex={0} data-nav data-item={w.id} data-testid="item-card"
      role="button" aria-label={`${w.kind} ${w.title}, ${w.status}. Shift and arrow keys move it.`}
      onPointerDown={onPointerDown} onKeyDown={onKeyDown}
      onClick={() => { if (!dragJustEnded) onOpen(w.id); }}>
      <div class="item-top">
        {w.kind !== 'task' && <Kind kind={w.kind} />}
        <span class="item-title">{w.title}</span>
        <span class="grip" aria-hidden="true" data-grip><Icon name="grip" size={14} /></span>
      </div>
      {(rs.length > 0 || children > 0) && (
        <div class="item-foot">
          {children > 0 && <span class="muted sm">{children} item{children === 1 ? '' : 's'}</span>}
          <RunBadges list={rs} />
        </div>
      )}
    </div>
  );
}

/** RunBadges shows a task's runs, newest first, as live status pills. */
export function RunBadges({ list, max = 3 }) {
  if (!list.length) return null;
  return (
    <span class="run-badges">
      {list.slice(0, max).map((r) => {
        const att = attentionOf(r);
        const st = isActive(r) && att !== 'none' ? att : r.status;
        return (
          <a key={r.id} href={'/runs/' + r.id} class={'run-pill st-' + st} title={`${r.provider} · ${st} · ${shortId(r.id)}`}
            onPointerDown={(e) => e.stopPropagation()} onClick={(e) => e.stopPropagation()} data-testid="run-badge" data-status={r.status}>
            <span class="dot" />{r.provider}
          </a>
        );
      })}
      {list.length > max && <span class="muted sm">+{list.length - max}</span>}
    </span>
  );
}

// ---- Drag with pointer events ----

let dragJustEnded = false;

// A card brought to the board's left or right edge scrolls the board one
// column that way (on a phone the board shows one column); one column per
// visit to the edge, so the column under the card stays predictable.
const EDGE = 36;

function startDrag(e, card, w) {
  if (e.button !== 0 || !card) return;
  if (e.target instanceof Element && e.target.closest('a, button, input, select, textarea')) return;
  // Touch drags start from the grip, so a finger elsewhere still scrolls.
  if (e.pointerType !== 'mouse' && !(e.target instanceof Element && e.target.closest('[data-grip]'))) return;
  const x0 = e.clientX;
  const y0 = e.clientY;
  const id = e.pointerId;
  const board = card.closest('.board');
  let ghost = null;
  let x = x0;
  let y = y0;
  let edgeTimer = 0;
  let edgeDir = 0;
  const rect = card.getBoundingClientRect();
  const target = () => {
    const under = document.elementFromPoint(x, y);
    const col = under && under.closest('[data-col]');
    dropTarget.value = col ? col.getAttribute('data-col') : '';
  };
  const scrollStep = () => {
    edgeTimer = 0;
    if (!ghost || !edgeDir || !board) return;
    const col = board.querySelector('[data-col]');
    const gap = parseFloat(getComputedStyle(board).columnGap) || 0;
    board.scrollBy({ left: edgeDir * ((col ? col.getBoundingClientRect().width : 240) + gap), behavior: 'smooth' });
  };
  const edge = () => {
    if (!board) return;
    const r = board.getBoundingClientRect();
    const left = Math.max(r.left, 0);
    const right = Math.min(r.right, window.innerWidth);
    const dir = x > right - EDGE && board.scrollLeft + board.clientWidth < board.scrollWidth - 1 ? 1
      : x < left + EDGE && board.scrollLeft > 0 ? -1 : 0;
    if (dir === edgeDir) return;
    edgeDir = dir;
    clearTimeout(edgeTimer);
    edgeTimer = dir ? setTimeout(scrollStep, 150) : 0;
  };
  const onScroll = () => { if (ghost) target(); };
  const move = (ev) => {
    if (ev.pointerId !== id) return;
    if (!ghost) {
      if (Math.hypot(ev.clientX - x0, ev.clientY - y0) < 5) return;
      ghost = card.cloneNode(true);
      ghost.classList.add('drag-ghost');
      ghost.removeAttribute('data-item');
      ghost.removeAttribute('data-testid');
      ghost.style.width = rect.width + 'px';
      ghost.style.left = rect.left + 'px';
      ghost.style.top = rect.top + 'px';
      document.body.appendChild(ghost);
      card.classList.add('dragging');
      document.body.classList.add('is-dragging');
      if (board) board.addEventListener('scroll', onScroll, { passive: true });
    }
    ev.preventDefault();
    x = ev.clientX;
    y = ev.clientY;
    ghost.style.transform = `translate(${x - x0}px, ${y - y0}px) rotate(1.5deg)`;
    target();
    edge();
  };
  const end = (ev) => {
    if (ev.pointerId !== id) return;
    window.removeEventListener('pointermove', move);
    window.removeEventListener('pointerup', end);
    window.removeEventListener('pointercancel', end);
    clearTimeout(edgeTimer);
    if (!ghost) return;
    if (board) board.removeEventListener('scroll', onScroll);
    ghost.remove();
    card.classList.remove('dragging');
    document.body.classList.remove('is-dragging');
    const to = dropTarget.value;
    dropTarget.value = '';
    dragJustEnded = true;
    setTimeout(() => { dragJustEnded = false; }, 0);
    if (ev.type === 'pointerup' && to) moveItem(w, to);
  };
  window.addEventListener('pointermove', move, { passive: false });
  window.addEventListener('pointerup', end);
  window.addEventListener('pointercancel', end);
}

// ---- Create and edit ----

/**
 * ItemDialog creates a work item (in the status given) or edits item.
 * @param {{project: import('../store.js').Project, all: import('../store.js').WorkItem[], item?: import('../store.js').WorkItem, status?: string, onClose: () => void, onRun?: () => void}} props
 */
function ItemDialog({ project, all, item, status, onClose, onRun }) {
  const editing = !!item;
  const [kind, setKind] = useState(item ? item.kind : 'task');
  const [title, setTitle] = useState(item ? item.title : '');
  const [body, setBody] = useState(item ? item.body : '');
  const [st, setSt] = useState(item ? item.status : status || 'todo');
  const [parent, setParent] = useState(item ? item.parent_id || '' : '');
  const [busy, setBusy] = useState(false);
  const inSubtree = (w) => item && (w.id === item.id || w.path.split('/').includes(item.id));
  const parents = all.filter((w) => RANK[w.kind] > RANK[kind] && !inSubtree(w));
  const rs = item ? runsOf(item.id) : [];
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    let out;
    if (editing) {
      const b = {};
      if (title !== item.title) b.title = title;
      if (body !== item.body) b.body = body;
      if (st !== item.status) b.status = st;
      if ((parent || null) !== item.parent_id) b.parent_id = parent || null;
      out = Object.keys(b).length ? await attempt(() => patch(`/work-items/${item.id}`, b)) : item;
    } else {
      const b = { kind, title: title.trim(), status: st };
      if (body.trim()) b.body = body;
      if (parent) b.parent_id = parent;
      out = await attempt(() => post(`/projects/${project.id}/work-items`, b));
    }
    setBusy(false);
    if (out) {
      put('item', out.id, out);
      if (editing && (parent || null) !== item.parent_id) loadItems(project.id).catch(() => {});
      onClose();
    }
  };
  const remove = async () => {
    if (!confirm(`Delete “${item.title}”?`)) return;
    const ok = await attempt(async () => { await del(`/work-items/${item.id}`); return true; }, 'Deleted');
    if (ok) { put('item', item.id, null); onClose(); }
  };
  return (
    <Dialog title={editing ? item.title : 'New item'} onClose={onClose} wide={editing}>
      <form class="form" onSubmit={submit} id="item-form">
        <div class="row2">
          <Field label="Kind">
            <select name="kind" value={kind} onChange={(e) => setKind(e.currentTarget.value)} disabled={editing}>
              {KINDS.map((k) => <option key={k} value={k}>{k}</option>)}
            </select>
          </Field>
          <Field label="Status">
            <select name="status" value={st} onChange={(e) => setSt(e.currentTarget.value)}>
              {COLUMNS.map((c) => <option key={c.status} value={c.status}>{c.label}</option>)}
            </select>
          </Field>
        </div>
        <Field label="Title"><input name="title" value={title} onInput={(e) => setTitle(e.currentTarget.value)} required maxLength={200} autofocus={!editing} /></Field>
        <Field label="Parent" hint="Epics group tasks; milestones group epics">
          <select name="parent" value={parent} onChange={(e) => setParent(e.currentTarget.value)}>
            <option value="">None (project root)</option>
            {parents.map((w) => <option key={w.id} value={w.id}>{w.kind}: {w.title}</option>)}
          </select>
        </Field>
        <Field label="Description"><textarea name="body" rows={editing ? 5 : 3} value={body} onInput={(e) => setBody(e.currentTarget.value)} /></Field>
        {editing && (item.kind === 'task' || item.kind === 'subtask') && (
          <div class="item-runs">
            <div class="item-runs-head">
              <h3>Runs</h3>
              {canOperate.value && <button type="button" class="btn sm" onClick={onRun} data-testid="start-run"><Icon name="play" size={13} />Start run</button>}
            </div>
            {rs.length === 0 ? <p class="muted sm">No runs yet.</p> : (
              <ul class="mini-list">
                {rs.map((r) => (
                  <li key={r.id}><a href={'/runs/' + r.id} onClick={onClose}><StatusBadge status={r.status} /><span>{r.provider}</span><span class="muted mono sm">{shortId(r.id)}</span><span class="grow" /><Ago iso={r.created_at} /></a></li>
                ))}
              </ul>
            )}
          </div>
        )}
        <div class="form-actions">
          {editing && <button type="button" class="btn ghost danger" onClick={remove}><Icon name="trash" size={14} />Delete</button>}
          <span class="grow" />
          <button type="button" class="btn ghost" onClick={onClose}>Cancel</button>
          <button type="submit" class="btn primary" disabled={busy || !title.trim()}>{editing ? 'Save' : 'Create'}</button>
        </div>
      </form>
    </Dialog>
  );
}
