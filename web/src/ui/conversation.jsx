// Conversations on the run page (docs/architecture.md#resume-and-continue):
// Continue for an ended run whose agent reported a session
// (POST /runs/{id}/continue, opening the new run), and the chain of runs
// that continue one another through this one.
import { useEffect, useState } from 'preact/hooks';
import { get, post } from '../api.js';
import { navigate } from '../router.js';
import { isActive, put, runs } from '../store.js';
import { Dialog, Field, StatusBadge, attempt, shortId } from './common.jsx';
import { Icon } from './icons.jsx';

/**
 * ContinueButton offers Continue on an ended run with an agent session
 * that no run continues yet (the newest of a chain is the one to go on).
 */
export function ContinueButton({ run }) {
  const [open, setOpen] = useState(false);
  if (isActive(run) || !run.agent_session_id) return null;
  for (const r of runs.value.values()) if (r.continues_run_id === run.id) return null;
  return (
    <>
      <button class="btn" onClick={() => setOpen(true)} data-testid="continue"><Icon name="play" size={14} />Continue</button>
      {open && <ContinueDialog run={run} onClose={() => setOpen(false)} />}
    </>
  );
}

function ContinueDialog({ run, onClose }) {
  const [text, setText] = useState('');
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    const r = await attempt(() => post(`/runs/${run.id}/continue`, text.trim() ? { text } : {}), 'Continuing');
    setBusy(false);
    if (r) {
      put('run', r.id, r);
      onClose();
      navigate('/runs/' + r.id);
    }
  };
  return (
    <Dialog title="Continue the conversation" onClose={onClose}>
      <form class="form" onSubmit={submit} data-testid="continue-form">
        <p class="muted sm">A new run resumes this agent's conversation in the same worktree on the same host.</p>
        <Field label="Message" hint="What the agent should do next; empty: the provider's continue message">
          <textarea name="text" rows={4} maxLength={4096} value={text} onInput={(e) => setText(e.currentTarget.value)} />
        </Field>
        <div class="form-actions">
          <button type="button" class="btn ghost" onClick={onClose}>Cancel</button>
          <button type="submit" class="btn primary" disabled={busy}>Continue</button>
        </div>
      </form>
    </Dialog>
  );
}

/**
 * chainOf is the runs that continue one another through run, oldest
 * first: back along continues_run_id, forward to the run continuing
 * each. A run known only by id (not loaded) ends the walk back as {id}.
 */
export function chainOf(run, all) {
  const chain = [run];
  const seen = new Set([run.id]);
  for (let cur = run; cur.continues_run_id && !seen.has(cur.continues_run_id);) {
    seen.add(cur.continues_run_id);
    cur = all.get(cur.continues_run_id) || { id: cur.continues_run_id };
    chain.unshift(cur);
  }
  for (let cur = run; ;) {
    const next = [...all.values()].find((r) => r.continues_run_id === cur.id && !seen.has(r.id));
    if (!next) break;
    seen.add(next.id);
    chain.push(next);
    cur = next;
  }
  return chain;
}

/** Chain lists, in the run's details, the runs of its conversation. */
export function Chain({ run }) {
  const [loaded, setLoaded] = useState([]);
  // Every run of the chain is a run of the same task.
  useEffect(() => {
    get(`/runs?task_id=${run.task_id}&limit=1000`).then((l) => setLoaded(l.runs)).catch(() => {});
  }, [run.task_id, run.continues_run_id]);
  const all = new Map(loaded.map((r) => [r.id, r]));
  for (const r of runs.value.values()) if (r.task_id === run.task_id) all.set(r.id, r);
  const chain = chainOf(run, all);
  if (chain.length < 2) return null;
  return (
    <>
      <dt>Conversation</dt>
      <dd>
        <ol class="chain" data-testid="chain">
          {chain.map((r) => (
            <li key={r.id}>
              {r.id === run.id ? <span class="mono" title="this run"><b>{shortId(r.id)}</b></span> : <a class="mono" href={'/runs/' + r.id}>{shortId(r.id)}</a>}
              {r.status && <StatusBadge status={r.status} />}
            </li>
          ))}
        </ol>
      </dd>
    </>
  );
}
