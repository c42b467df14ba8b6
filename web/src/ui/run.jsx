// The run page (docs/architecture.md#web-dashboard): what the run is
// asked, answered without the terminal (answer.jsx); the live pane in
// xterm.js, read-only until Take control opens attach/ws under the lease
// (who holds it, and a revoke); stop, retry, complete; tabs Events (by
// attempt), Logs and Changes (the run's worktree, changes.jsx).
import { useEffect, useRef, useState } from 'preact/hooks';
import { canOperate } from '../role.js';
import { ApiError, api, del, eventSeqOf, get, post } from '../api.js';
import { attentionOf, hostName, isActive, items, markSeen, onEvent, onResync, projects, put, runs, taskTitle } from '../store.js';
import { Answer, MessageBox } from './answer.jsx';
import { Changes } from './changes.jsx';
import { Chain, ContinueButton } from './conversation.jsx';
import { Ago, Empty, StatusBadge, attempt, duration, shortId } from './common.jsx';
import { Icon } from './icons.jsx';

/** RunPage is the page of one run. */
export function RunPage({ id }) {
  const run = runs.value.get(id);
  const [missing, setMissing] = useState(false);
  const [, setTick] = useState(0);
  useEffect(() => {
    // The running time ticks by the second here.
    const t = setInterval(() => setTick((n) => n + 1), 1000);
    return () => clearInterval(t);
  }, []);
  useEffect(() => {
    if (!run) get('/runs/' + id).then((r) => put('run', r.id, r)).catch((e) => { if (e instanceof ApiError && e.status === 404) setMissing(true); });
  }, [id]);
  useEffect(() => { if (run) markSeen(run); }, [run && run.updated_at]);
  if (!run) return missing ? <Empty icon="runs" title="No such run" /> : <div class="loading"><span class="spinner" />Loading run…</div>;
  const task = items.value.get(run.task_id);
  const project = projects.value.get(run.project_id);
  const att = attentionOf(run);
  const act = (path, ok) => attempt(async () => { const r = await post(`/runs/${run.id}/${path}`, path === 'stop' ? {} : undefined); put('run', r.id, r); return r; }, ok);
  return (
    <section class="run-page">
      <div class="page-head">
        <div class="grow min0">
          <div class="crumbs">
            <a href="/runs">Runs</a><Icon name="chevron" size={12} />
            {project && <><a href={'/projects/' + project.slug}>{project.name}</a><Icon name="chevron" size={12} /></>}
            <span class="mono">{shortId(run.id)}</span>
          </div>
          <h1 class="run-title">{taskTitle(run)}</h1>
          <div class="run-meta">
            <StatusBadge status={run.status} />
            {isActive(run) && att !== 'none' && <span class={'badge st-' + att}><span class="dot" />{att.replace('_', ' ')}</span>}
            {run.completed_at && <span class="badge st-completed"><span class="dot" />completed</span>}
            <span class="meta-item"><Icon name="terminal" size={13} />{run.provider}</span>
            {run.host_id && <span class="meta-item"><Icon name="fleet" size={13} />{hostName(run.host_id)}</span>}
            <span class="meta-item">attempt {run.attempt}/{run.max_attempts}</span>
            {run.started_at && <span class="meta-item">{isActive(run) ? 'running for ' : 'ran '}{duration(run.started_at, run.finished_at)}</span>}
            {run.failure_reason && <span class="meta-item fail-text">{run.failure_reason.replace(/_/g, ' ')}{run.exit_code != null ? ` (exit ${run.exit_code})` : ''}</span>}
          </div>
        </div>
        {canOperate.value && <div class="head-actions">
          {isActive(run) && <button class="btn" onClick={() => act('stop', 'Stopped')} data-testid="stop"><Icon name="stop" size={14} />Stop</button>}
          {run.status === 'failed' && <button class="btn" onClick={() => act('retry', 'Retrying')} data-testid="retry"><Icon name="retry" size={14} />Retry</button>}
          <ContinueButton run={run} />
          {!run.completed_at && <button class="btn" onClick={() => act('complete', 'Marked complete')} data-testid="complete"><Icon name="check" size={14} />Complete</button>}
        </div>}
      </div>
      <Answer run={run} />
      <MessageBox run={run} />
      <TerminalPanel run={run} />
      <div class="run-lower">
        <Tabs run={run} />
        <aside class="card details">
          <h3>Details</h3>
          <dl>
            <dt>Task</dt><dd>{task ? <a href={`/projects/${project ? project.slug : run.project_id}?item=${task.id}`}>{task.title}</a> : shortId(run.task_id)}</dd>
            <dt>Session</dt><dd class="mono">{run.session_name}</dd>
            {run.cwd && <><dt>Directory</dt><dd class="mono break">{run.cwd}</dd></>}
            {run.workspace && <><dt>Worktree</dt><dd class="mono break">{run.workspace.branch || run.workspace.path}</dd></>}
            <Chain run={run} />
            <dt>Created</dt><dd><Ago iso={run.created_at} /></dd>
            {run.started_at && <><dt>Started</dt><dd><Ago iso={run.started_at} /></dd></>}
            {run.finished_at && <><dt>Finished</dt><dd><Ago iso={run.finished_at} /></dd></>}
            {run.next_attempt_at && isActive(run) && <><dt>Next attempt</dt><dd><Ago iso={run.next_attempt_at} /></dd></>}
          </dl>
          {run.prompt && <><h4>Prompt</h4><pre class="prompt">{run.prompt}</pre></>}
        </aside>
      </div>
    </section>
  );
}

function holderText(h) {
  if (!h) return 'another session';
  const ua = h.user_agent || '';
  const browser = /Firefox\//.test(ua) ? 'Firefox' : /Edg\//.test(ua) ? 'Edge' : /Chrome\//.test(ua) ? 'Chrome' : /Safari\//.test(ua) ? 'Safari' : /^Go-http|pam/.test(ua) ? 'pam CLI' : ua.split(' ')[0] || 'a client';
  const who = h.token ? `${h.token} (${browser}` : browser;
  return `${who} at ${h.remote_addr || 'unknown address'}${h.token ? ')' : ''}`;
}

function TerminalPanel({ run }) {
  const el = useRef(null);
  const ctl = useRef(null);
  const [st, setSt] = useState(/** @type {import('../term.js').TermState} */ ({ mode: 'connecting' }));
  const [failed, setFailed] = useState('');
  useEffect(() => {
    let gone = false;
    import('../term.js').then((m) => {
      if (gone || !el.current) return;
      ctl.current = m.createTerminal(el.current, run.id, setSt);
    }).catch((e) => setFailed(e.message || 'The terminal failed to load.'));
    return () => {
      gone = true;
      if (ctl.current) ctl.current.dispose();
      ctl.current = null;
    };
  }, [run.id]);
  const running = run.status === 'running';
  const asks = running && (attentionOf(run) === 'needs_input' || attentionOf(run) === 'rate_limited');
  const c = ctl.current;
  const revoke = async () => {
    const ok = await attempt(async () => { await del(`/runs/${run.id}/lease`); return true; }, 'Lease revoked');
    if (ok && c) c.retryLease();
  };
  return (
    <div class={'card term-card mode-' + st.mode}>
      <div class="term-bar">
        <span class={'term-mode tm-' + st.mode} data-testid="term-mode" data-mode={st.mode}>
          <span class="dot" />
          {{ connecting: 'Connecting…', view: 'Read-only view', waiting: 'Taking control…', control: 'You have control', held: 'Controlled elsewhere', ended: 'Ended' }[st.mode]}
        </span>
        {st.mode === 'held' && <span class="muted sm holder" data-testid="holder">by {holderText(st.holder)}{st.holder && st.holder.attached_at ? <> since <Ago iso={st.holder.attached_at} /></> : null}</span>}
        {asks && st.mode !== 'control' && <span class="term-ask" data-testid="asks"><span class="dot" />Waiting for your input</span>}
        {st.message && st.mode !== 'held' && <span class="muted sm term-msg">{st.message}</span>}
        <span class="grow" />
        {st.renderer && <span class="muted xs hide-sm" title="xterm.js renderer">{st.renderer}</span>}
        {running && canOperate.value && (st.mode === 'view' || st.mode === 'connecting') && (
          <button class="btn sm primary" disabled={!c} onClick={() => c && c.takeControl()} data-testid="take-control"><Icon name="unlock" size={13} />Take control</button>
        )}
        {st.mode === 'held' && canOperate.value && <>
          <button class="btn sm danger" onClick={revoke} data-testid="revoke"><Icon name="lock" size={13} />Revoke their lease</button>
          <button class="btn sm ghost" onClick={() => c && c.release()}>Cancel</button>
        </>}
        {st.mode === 'control' && <button class="btn sm" onClick={() => c && c.release()} data-testid="release"><Icon name="lock" size={13} />Release</button>}
      </div>
      {failed ? <div class="term-fail">{failed}</div> : <div class="term" ref={el} data-testid="terminal" />}
      {st.mode === 'control' && c && <KeyBar c={c} ctrl={!!st.ctrl} />}
    </div>
  );
}

const KEYS = [
  ['Esc', '\x1b'], ['Tab', '\t'], ['Ctrl', null], ['←', '\x1b[D'], ['↑', '\x1b[A'], ['↓', '\x1b[B'], ['→', '\x1b[C'],
];

/** KeyBar gives a phone the keys its keyboard lacks. */
function KeyBar({ c, ctrl }) {
  return (
    <div class="keybar" role="toolbar" aria-label="Terminal keys">
      {KEYS.map(([label, seq]) => (
        <button key={label} type="button" class={'key' + (seq === null && ctrl ? ' armed' : '')}
          onPointerDown={(e) => e.preventDefault()}
          onClick={() => (seq === null ? c.toggleCtrl() : c.key(seq))}>{label}</button>
      ))}
    </div>
  );
}

function Tabs({ run }) {
  const [tab, setTab] = useState('events');
  return (
    <div class="card tabs-card">
      <div class="tabs" role="tablist">
        <button role="tab" aria-selected={tab === 'events'} class={tab === 'events' ? 'active' : ''} onClick={() => setTab('events')}>Events</button>
        <button role="tab" aria-selected={tab === 'logs'} class={tab === 'logs' ? 'active' : ''} onClick={() => setTab('logs')}>Logs</button>
        <button role="tab" aria-selected={tab === 'changes'} class={tab === 'changes' ? 'active' : ''} onClick={() => setTab('changes')} data-testid="tab-changes">Changes</button>
      </div>
      {tab === 'events' ? <Events run={run} /> : tab === 'logs' ? <Logs run={run} /> : <Changes run={run} />}
    </div>
  );
}

function summary(e) {
  const p = e.payload || {};
  if (e.topic === 'run.continued') return 'continued by run ' + shortId(p.run_id);
  if (e.topic === 'run.created' && p.continues_run_id) return 'continues run ' + shortId(p.continues_run_id);
  const bits = [];
  for (const k of ['host_id', 'exit_code', 'failure_reason', 'source', 'attention', 'kind', 'result', 'next_attempt_at', 'branch', 'detail', 'reason', 'agent_session_id']) {
    if (p[k] === undefined || p[k] === null || p[k] === '') continue;
    bits.push(k === 'host_id' ? 'host ' + hostName(p[k]) : `${k.replace(/_/g, ' ')} ${p[k]}`);
  }
  // Who caused it: a token's name, an agent's tools, or pam itself.
  if (e.actor) bits.push('by ' + e.actor);
  return bits.join(' · ');
}

/**
 * Events lists the run's journal: loaded once (GET /runs/{id}/events, up
 * to its Pam-Event-Seq N), then extended by the stream's events of this
 * run with a seq above the last one shown. The stream is subscribed
 * before the load, so an event arriving meanwhile waits for it; the
 * stream never runs ahead of N (N is at least every seq the stream has
 * sent), and an event it sends again at or below N is already shown.
 */
function Events({ run }) {
  const [list, setList] = useState(null);
  const [err, setErr] = useState('');
  useEffect(() => {
    let stale = false;
    let shown = null; // the events on screen once loaded
    let upTo = 0; // the largest seq shown or covered by the load
    let early = []; // stream events that came before the load
    const add = (evs) => {
      const fresh = evs.filter((e) => e.seq > upTo);
      if (!fresh.length) return;
      upTo = fresh[fresh.length - 1].seq;
      shown = shown.concat(fresh);
      setList(shown);
    };
    const load = async () => {
      early = [];
      shown = null;
      try {
        const res = await api('GET', `/runs/${run.id}/events`, undefined, { response: true });
        const n = eventSeqOf(res);
        const l = await res.json();
        if (stale) return;
        shown = l.events;
        upTo = Math.max(n ?? 0, ...shown.map((e) => e.seq));
        setList(shown);
        add(early);
        early = [];
      } catch (e) {
        if (!stale) setErr(e.message);
      }
    };
    const off = onEvent((e) => {
      if (e.run_id !== run.id || typeof e.seq !== 'number') return;
      if (shown === null) early.push(e);
      else add([e]);
    });
    const offResync = onResync(load);
    load();
    return () => { stale = true; off(); offResync(); };
  }, [run.id]);
  if (err) return <p class="pad form-error">{err}</p>;
  if (!list) return <p class="pad muted">Loading…</p>;
  const byAttempt = new Map();
  for (const e of list) {
    const a = (e.payload && e.payload.attempt) || 1;
    if (!byAttempt.has(a)) byAttempt.set(a, []);
    byAttempt.get(a).push(e);
  }
  const attempts = [...byAttempt.keys()].sort((a, b) => b - a);
  return (
    <div class="events" data-testid="events">
      {attempts.map((a) => {
        const evs = byAttempt.get(a);
        const last = evs[evs.length - 1];
        return (
          <div key={a} class="attempt">
            <div class="attempt-head">
              <span class="attempt-n">Attempt {a}</span>
              <span class="muted sm">{evs.length} event{evs.length === 1 ? '' : 's'} · last <Ago iso={last.created_at} /></span>
            </div>
            <ol class="timeline">
              {evs.slice().reverse().map((e) => (
                <li key={e.seq} class={'ev ev-' + e.topic.split('.')[1]} data-seq={e.seq}>
                  <span class="ev-dot" />
                  <span class="ev-topic mono">{e.topic}</span>
                  <span class="ev-sum">{summary(e)}</span>
                  <span class="grow" />
                  <time class="muted sm nowrap" title={e.created_at}>{new Date(e.created_at).toLocaleTimeString()}</time>
                </li>
              ))}
            </ol>
          </div>
        );
      })}
      {list.length === 0 && <p class="pad muted">No events yet.</p>}
    </div>
  );
}

function Logs({ run }) {
  const [text, setText] = useState('');
  const [err, setErr] = useState('');
  const [busy, setBusy] = useState(true);
  const pre = useRef(null);
  const live = isActive(run);
  useEffect(() => {
    const ctl = new AbortController();
    setText('');
    setErr('');
    setBusy(true);
    (async () => {
      try {
        const res = await api('GET', `/runs/${run.id}/logs${live ? '?follow=true' : ''}`, undefined, { response: true, signal: ctl.signal });
        const reader = res.body.getReader();
        const dec = new TextDecoder();
        let acc = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          acc += dec.decode(value, { stream: true });
          if (acc.length > 2_000_000) acc = acc.slice(-1_500_000);
          setText(acc);
          setBusy(false);
          const p = pre.current;
          if (p && p.scrollHeight - p.scrollTop - p.clientHeight < 80) requestAnimationFrame(() => { p.scrollTop = p.scrollHeight; });
        }
      } catch (e) {
        if (e.name !== 'AbortError') setErr(e.message);
      } finally {
        setBusy(false);
      }
    })();
    return () => ctl.abort();
  }, [run.id, live]);
  if (err) return <p class="pad muted">{err}</p>;
  return <pre class="logs" ref={pre} data-testid="logs">{text || (busy ? 'Loading…' : 'The log is empty.')}</pre>;
}

