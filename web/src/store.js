// The dashboard's live state ("Live state" in docs/architecture.md#web-dashboard):
// loaded over REST, then kept current by the event stream
// (docs/api.md#server-sent-events). Each event names what
// changed; the store applies the payload when it carries the whole object
// (work items) and otherwise fetches that one object again, so applying an
// event twice is harmless and no event is ever lost to a partial payload.
import { batch, computed, signal } from '@preact/signals';
import { ApiError, api, eventSeqOf, get } from './api.js';
import { readSSE } from './sse.js';
import { token } from './auth.js';

/** @typedef {{id: string, name: string, slug: string, description: string, status: string, auto_done: boolean, repo: any, created_at: string, updated_at: string}} Project */
/** @typedef {{id: string, project_id: string, parent_id: string|null, kind: string, title: string, body: string, status: string, path: string, position: number, created_at: string, updated_at: string}} WorkItem */
/** @typedef {{id: string, task_id: string, project_id: string, provider: string, host_id: string|null, target_host_id: string|null, status: string, attempt: number, max_attempts: number, failure_reason: string|null, exit_code: number|null, session_name: string, cwd: string, prompt: string, args: string[], attention?: string, attention_since?: string|null, workspace?: any, agent_session_id?: string|null, continues_run_id?: string|null, pending_since: string|null, next_attempt_at: string|null, started_at: string|null, finished_at: string|null, completed_at: string|null, completion_source: string|null, created_at: string, updated_at: string}} Run */
/** @typedef {{id: string, name: string, platform: string, status: string, disabled: boolean, instance_id: string|null, instance_suspect: boolean, last_seen_at: string|null, providers: string[], max_runs: number, executor: string, active_runs: number, created_at: string, updated_at: string}} Host */

/** @type {import('@preact/signals').Signal<Map<string, Project>>} */
export const projects = signal(new Map());
/** @type {import('@preact/signals').Signal<Map<string, WorkItem>>} */
export const items = signal(new Map());
/** @type {import('@preact/signals').Signal<Map<string, Run>>} */
export const runs = signal(new Map());
/** @type {import('@preact/signals').Signal<Map<string, Host>>} */
export const hosts = signal(new Map());
/** @type {import('@preact/signals').Signal<{name: string, hosts: string[]}[]>} */
export const providers = signal([]);
/**
 * The before of the page of runs older than those loaded (GET /runs pages
 * with ?before=, docs/api.md#runs),
 * null once the oldest run is loaded.
 */
export const runsNext = signal(null);
/** connecting (first load), live, or reconnecting (the screen keeps its last state). */
export const conn = signal('connecting');
/** True once the first load finished. */
export const loaded = signal(false);
/** An error of the first load, shown instead of an empty page. */
export const loadError = signal('');
/** A clock for relative times, ticking every 15 s. */
export const now = signal(Date.now());
setInterval(() => { now.value = Date.now(); }, 15000);

const ACTIVE = new Set(['pending', 'spawning', 'running']);
/** isActive reports whether a run is not terminal yet. */
export const isActive = (r) => ACTIVE.has(r.status);
/** attentionOf reads a run's attention, 'none' where the server sends none yet. */
export const attentionOf = (r) => r.attention || 'none';

// ---- Inbox: what waits for a person ----
// ("Inbox" in docs/architecture.md#web-dashboard; a run's attention,
// docs/architecture.md#attention)

const SEEN_KEY = 'pam.seen';
function readSeen() {
  try {
    return JSON.parse(localStorage.getItem(SEEN_KEY) || '{}') || {};
  } catch {
    return {};
  }
}
/** Runs the operator has looked at since they ended: id → updated_at seen. */
export const seen = signal(readSeen());

/** markSeen records that the run's current ending has been looked at. */
export function markSeen(run) {
  if (!run || isActive(run) || seen.value[run.id] === run.updated_at) return;
  const next = { ...seen.value, [run.id]: run.updated_at };
  const ids = Object.keys(next);
  if (ids.length > 2000) for (const id of ids.slice(0, ids.length - 2000)) delete next[id];
  seen.value = next;
  try {
    localStorage.setItem(SEEN_KEY, JSON.stringify(next));
  } catch {
    // not kept across reloads
  }
}

/**
 * inboxReason says why a run waits for a person: needs_input, idle,
 * failed or completed (ended and not seen yet), or '' when it does not.
 */
export function inboxReason(r, seenMap = seen.value) {
  const att = attentionOf(r);
  if (isActive(r) && att !== 'none') return att;
  if (isActive(r)) return '';
  if (seenMap[r.id] === r.updated_at) return '';
  if (r.status === 'failed') return 'failed';
  if (r.completed_at || r.status === 'exited') return 'completed';
  return '';
}

/** The inbox: every run that waits for a person, newest first. */
export const inbox = computed(() => {
  const s = seen.value;
  const out = [];
  for (const r of runs.value.values()) {
    const why = inboxReason(r, s);
    if (why) out.push({ run: r, why });
  }
  out.sort((a, b) => stamp(b.run) - stamp(a.run));
  return out;
});

function stamp(r) {
  return Date.parse(r.attention_since || r.finished_at || r.completed_at || r.updated_at || r.created_at) || 0;
}

// ---- Loading and following ----
//
// Reads and the stream fit together (docs/api.md#resuming, and
// docs/architecture.md#sse-resume-without-gaps-or-duplicates): load the
// state over REST, note each answer's Pam-Event-Seq, then stream
// /events/stream?after=N and, after a break, reconnect with
// Last-Event-ID: <the last seq applied>.
//
// Which N. Each answer's Pam-Event-Seq N_i is a position its read
// already reflects: the server takes N_i before the read, as a seq below
// which every event has committed (or never will), and each event commits
// together with the change it journals, so the read sees every change of
// an event <= N_i (and perhaps some later ones). The reads of one load run
// at once and see different positions, so the stream starts after the
// smallest, N = min(N_i): every loaded object then hears every event
// after the position it reflects. The events in (N, N_i] that a read
// already reflects arrive once more, and applying them is harmless (see
// the top of this file: a work item event carries the item as that event
// set it and they come in journal order, so the newest wins; any other
// event makes the store fetch its object afresh). Starting after the
// largest would be wrong: a read with a smaller N_i never hears the
// events in (N_i, max], and its objects stay stale until they change again.
//
// Once streaming, the cursor is the seq of the last event received; the
// server sends every later event once and in order, from its journal in
// the database, also across its own restart. So nothing is missed and no
// event arrives twice (window.__pamStream records what arrived, for the
// browser tests).

let session = null; // the running follow loop's abort controller
const listeners = new Set();
const resyncs = new Set();

/** onEvent calls fn with every journal event as it arrives; returns the unsubscribe. */
export function onEvent(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

/**
 * onResync calls fn when the stream could not resume where it stopped
 * (its cursor was purged from the journal): whoever keeps a list of
 * events loads it again. Returns the unsubscribe.
 */
export function onResync(fn) {
  resyncs.add(fn);
  return () => resyncs.delete(fn);
}

/** The notification hook, set by notify.js: called when a run enters the inbox. */
export const hooks = { runChanged: null };

/**
 * What the stream delivered in this page's life, for the browser tests:
 * the position the first load ended at, the seq of every event in
 * arrival order (the last 10 000), and how many times it reconnected.
 */
/** @type {PamStreamRecord} */
const record = { after: null, seqs: [], reconnects: 0 };
window.__pamStream = record;

function mapOf(list) {
  const m = new Map();
  for (const x of list) m.set(x.id, x);
  return m;
}

async function getSeq(path, seqs, signal) {
  const res = await api('GET', path, undefined, { response: true, signal });
  const seq = eventSeqOf(res);
  if (seq === null) throw new ApiError(0, 'no_event_seq', `GET ${path} came without Pam-Event-Seq: the dashboard cannot follow this server.`);
  seqs.push(seq);
  return res.json();
}

/**
 * loadAll reads the whole state and returns the smallest Pam-Event-Seq
 * of its reads: where the stream starts (see above).
 */
async function loadAll(signal) {
  const seqs = [];
  const [p, h, pr, recent, live, att] = await Promise.all([
    getSeq('/projects?include_archived=true', seqs, signal),
    getSeq('/hosts', seqs, signal),
    getSeq('/providers', seqs, signal),
    getSeq('/runs?limit=500', seqs, signal),
    getSeq('/runs?status=running&limit=1000', seqs, signal),
    getSeq('/runs?attention=any&limit=500', seqs, signal),
  ]);
  const active = p.projects.filter((x) => x.status === 'active');
  const lists = await Promise.all(active.map((x) => getSeq(`/projects/${x.id}/work-items`, seqs, signal)));
  const rm = mapOf(recent.runs);
  for (const r of live.runs.concat(att.runs)) rm.set(r.id, r);
  const im = new Map();
  for (const l of lists) for (const w of l.work_items) im.set(w.id, w);
  batch(() => {
    projects.value = mapOf(p.projects);
    hosts.value = mapOf(h.hosts);
    providers.value = pr.providers;
    runs.value = rm;
    // Older runs are a page away (GET /runs pages with ?before=, docs/api.md#runs).
    runsNext.value = recent.next || null;
    items.value = im;
    loaded.value = true;
    loadError.value = '';
  });
  return Math.min(...seqs);
}

/** start loads the state and follows the stream until stop (sign-out). */
export function start() {
  if (session) return;
  session = new AbortController();
  follow(session.signal);
}

/** stop ends the stream and forgets the state (sign-out). */
export function stop() {
  if (session) session.abort();
  session = null;
  batch(() => {
    projects.value = new Map();
    items.value = new Map();
    runs.value = new Map();
    hosts.value = new Map();
    runsNext.value = null;
    loaded.value = false;
    conn.value = 'connecting';
  });
}

/** @type {(ms: number, signal: AbortSignal) => Promise<void>} */
const sleep = (ms, signal) => new Promise((resolve) => {
  const t = setTimeout(resolve, ms);
  signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
});

async function follow(signal) {
  let cursor = null; // the seq the stream resumes after; null until loaded
  let resumed = false; // a reconnect, not the first stream after the load
  let delay = 500;
  while (!signal.aborted) {
    try {
      if (cursor === null) {
        cursor = await loadAll(signal);
        record.after = cursor;
        record.seqs = [];
        resumed = false;
      }
      await stream();
    } catch (e) {
      if (signal.aborted) return;
      if (e instanceof ApiError && e.status === 401) return; // signed out
      if (!loaded.value) loadError.value = e.message || String(e);
    }
    if (signal.aborted) return;
    conn.value = 'reconnecting';
    await sleep(delay, signal);
    delay = Math.min(delay * 2, 8000);
  }

  /** stream follows the SSE stream after cursor until it ends. */
  async function stream() {
    const headers = { Authorization: 'Bearer ' + token.value, Accept: 'text/event-stream' };
    let path = '/api/v1/events/stream';
    if (resumed) headers['Last-Event-ID'] = String(cursor);
    else path += `?after=${cursor}`;
    let res;
    try {
      res = await fetch(path, { headers, signal, cache: 'no-store' });
    } catch (e) {
      if (signal.aborted) return;
      throw new ApiError(0, 'network', 'The server cannot be reached.');
    }
    if (res.status === 401) {
      await api('GET', '/projects'); // signs out through the one 401 path
      throw new ApiError(401, 'unauthorized', 'refused');
    }
    if (!res.ok) throw new ApiError(res.status, 'http_' + res.status, 'The event stream failed.');
    if (resumed) record.reconnects++;
    resumed = true;
    conn.value = 'live';
    delay = 500;
    await readSSE(res, (ev) => {
      const seq = handle(ev);
      if (seq !== null) cursor = seq;
    });
  }
}

/** handle applies one SSE event and returns its seq, or null when it has none. */
function handle(ev) {
  if (ev.event === 'snapshot') {
    // The cursor was purged: the stream goes on from the oldest event it
    // still has. The snapshot holds every live run and host; the rest is
    // loaded again, and lists of events start over.
    resync(ev.data);
    return null;
  }
  let e;
  try {
    e = JSON.parse(ev.data);
  } catch {
    return null;
  }
  const seq = typeof e.seq === 'number' ? e.seq : Number(ev.id);
  if (Number.isSafeInteger(seq)) {
    record.seqs.push(seq);
    if (record.seqs.length > 10000) record.seqs.splice(0, record.seqs.length - 10000);
  }
  apply(e);
  for (const fn of listeners) {
    try {
      fn(e);
    } catch (err) {
      console.error(err);
    }
  }
  return Number.isSafeInteger(seq) ? seq : null;
}

function resync(data) {
  try {
    const s = JSON.parse(data);
    batch(() => {
      if (Array.isArray(s.runs)) {
        const m = new Map(runs.value);
        for (const r of s.runs) m.set(r.id, r);
        runs.value = m;
      }
      if (Array.isArray(s.hosts)) hosts.value = mapOf(s.hosts);
    });
  } catch {
    // the reload below brings it all
  }
  loadAll(session ? session.signal : undefined).catch(() => {});
  for (const fn of resyncs) {
    try {
      fn();
    } catch (err) {
      console.error(err);
    }
  }
}

/** Run topics that change a host's active_runs. */
const COUNTED = new Set(['run.dispatched', 'run.dispatch_withdrawn', 'run.spawning', 'run.started', 'run.finished', 'run.exited',
  'run.failed', 'run.stopped', 'run.requeued']);

function apply(e) {
  const t = e.topic || '';
  const p = e.payload || {};
  if (t.startsWith('work_item.')) {
    // Changes carry the item as payload.work_item; a creation is the item itself.
    const w = p.work_item || (t === 'work_item.created' && p.id ? p : null);
    if (!w || !w.id) {
      if (p.work_item_id) refetch('item', p.work_item_id);
      return;
    }
    const m = new Map(items.value);
    if (t === 'work_item.deleted') m.delete(w.id);
    else m.set(w.id, w);
    items.value = m;
  } else if (t.startsWith('run.')) {
    if (e.run_id) refetch('run', e.run_id);
    // A host's active_runs counts its live runs: a run that comes or goes changes it.
    if (e.host_id && COUNTED.has(t)) refetch('host', e.host_id);
  } else if (t.startsWith('host.') || t.startsWith('worker.')) {
    if (t === 'host.removed' && e.host_id) {
      pending.delete('host:' + e.host_id); // a refetch would only find it gone
      put('host', e.host_id, null);
    } else if (e.host_id) refetch('host', e.host_id);
  } else if (t.startsWith('project.')) {
    if (e.project_id) refetch('project', e.project_id);
  }
}

// Refetches are coalesced: many events about one run in a burst cost one GET.
const pending = new Map(); // "kind:id" → true
// ticket holds, per "kind:id", the newest writer: an action's put or the
// latest refetch started. A refetch applies its answer only if it is still
// the newest; one overtaken by a put (say a host removed by an action) or
// by a later refetch is dropped instead of bringing back an older object.
const ticket = new Map();
let tickets = 0;
let flushTimer = 0;

function refetch(kind, id) {
  pending.set(kind + ':' + id, true);
  if (!flushTimer) flushTimer = setTimeout(flush, 80);
}

async function flush() {
  flushTimer = 0;
  const keys = [...pending.keys()];
  pending.clear();
  await Promise.all(keys.map(async (k) => {
    const [kind, id] = k.split(':');
    const path = { run: `/runs/${id}`, host: `/hosts/${id}`, item: `/work-items/${id}`, project: `/projects/${id}` }[kind];
    const mine = ++tickets;
    ticket.set(k, mine);
    let obj;
    try {
      obj = await get(path);
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 404)) return;
      obj = null;
    }
    if (ticket.get(k) === mine) store(kind, id, obj);
  }));
}

/** put stores (or, with null, removes) one object fetched or returned by an action. */
export function put(kind, id, obj) {
  ticket.set(kind + ':' + id, ++tickets);
  store(kind, id, obj);
}

function store(kind, id, obj) {
  /** @type {import('@preact/signals').Signal<Map<string, any>>} one of the four maps, by kind */
  const sig = kind === 'run' ? runs : kind === 'host' ? hosts : kind === 'item' ? items : projects;
  const before = sig.value.get(id);
  const m = new Map(sig.value);
  if (obj) m.set(id, obj);
  else m.delete(id);
  sig.value = m;
  // A project new to the page, or back from the archive, brings its items.
  if (kind === 'project' && obj && obj.status === 'active' && (!before || before.status !== 'active')) loadItems(id);
  if (kind === 'run' && obj && hooks.runChanged) hooks.runChanged(before, obj);
}

/** The runs page loads older runs this many at a time. */
export const RUNS_PAGE = 200;

/**
 * loadOlderRuns adds the next page of older runs to the state; it returns
 * how many it added. Every run is reachable this way, not only the newest
 * the first load read.
 */
export async function loadOlderRuns() {
  const before = runsNext.value;
  if (!before) return 0;
  const l = await get(`/runs?limit=${RUNS_PAGE}&before=${encodeURIComponent(before)}`);
  const m = new Map(runs.value);
  let added = 0;
  for (const r of l.runs) {
    if (m.has(r.id)) continue; // a loaded run is kept current by the stream
    m.set(r.id, r);
    added++;
  }
  batch(() => {
    runs.value = m;
    runsNext.value = l.next || null;
  });
  return added;
}

/** loadItems (re)loads one project's work items. */
export async function loadItems(projectId) {
  const l = await get(`/projects/${projectId}/work-items`);
  const m = new Map(items.value);
  for (const [id, w] of m) if (w.project_id === projectId) m.delete(id);
  for (const w of l.work_items) m.set(w.id, w);
  items.value = m;
}

// ---- Lookups ----

/** projectByRef finds a project by id or slug. */
export function projectByRef(ref) {
  const m = projects.value;
  if (m.has(ref)) return m.get(ref);
  for (const p of m.values()) if (p.slug === ref) return p;
  return null;
}

/** hostName names a host id ('' for none). */
export function hostName(id) {
  if (!id) return '';
  const h = hosts.value.get(id);
  return h ? h.name : id.slice(0, 8);
}

/** taskTitle is a run's task title, or its id while unknown. */
export function taskTitle(run) {
  const w = items.value.get(run.task_id);
  return w ? w.title : 'Task ' + run.task_id.slice(0, 8);
}

// A page the browser leaves (or keeps in its back/forward cache) closes
// its stream: an open stream holds one of the six HTTP/1.1 connections a
// browser allows per server, and a few left open stall every request.
let paused = false;
window.addEventListener('pagehide', () => {
  if (!session) return;
  session.abort();
  session = null;
  paused = true;
});
window.addEventListener('pageshow', () => {
  if (paused && token.value) {
    paused = false;
    start();
  }
});

/** Signed out: forget the state. */
token.subscribe((t) => { if (!t) stop(); });
