// Answering a run that waits for a person without taking its terminal
// (docs/architecture.md#web-dashboard): the question
// (attention_detail.text) and its choices as buttons, each pressing its
// key; a reply box; when a usage limit resets, counting down; a message box on a live
// run's page. A choice goes through POST /runs/{id}/keys, a reply or a
// message through POST /runs/{id}/messages; the delivery of either says
// whether the screen changed: only then does the run leave the inbox.
import { signal } from '@preact/signals';
import { useEffect, useState } from 'preact/hooks';
import { post } from '../api.js';
import { attentionOf } from '../store.js';
import { toast } from './common.jsx';

/** The keys POST /runs/{id}/keys takes by name (docs/api.md#keys). */
const KEYS = new Set(['Enter', 'Escape', 'Tab', 'BTab', 'Space', 'BSpace', 'DC', 'Up', 'Down', 'Left', 'Right',
  'Home', 'End', 'PageUp', 'PageDown', 'C-c', 'C-d', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', 'y', 'n']);

/** How long an answer's delivery stays shown after the run stopped waiting. */
const SHOWN_FOR = 15000;

/**
 * The last answer given to each run in this page's life: run id →
 * {what, state: sending | observed | confirmed | unconfirmed | failed, message, at}.
 * @type {import('@preact/signals').Signal<Map<string, {what: string, state: string, message: string, at: number}>>}
 */
const answers = signal(new Map());

function note(runId, a) {
  const m = new Map(answers.value);
  m.set(runId, { ...a, at: Date.now() });
  answers.value = m;
}

/** sendKeys posts keys to a running run and returns its delivery. */
export async function sendKeys(runId, keys) {
  const r = await post(`/runs/${runId}/keys`, { keys });
  return r.delivery;
}

/**
 * reply sends text to the run's agent as a message (docs/api.md#messages):
 * the server waits for the agent, types or pastes it, presses Enter and
 * says whether it was confirmed. The one place a reply or message is sent.
 */
export async function reply(runId, text) {
  const t = text.replace(/\r\n?/g, '\n').replace(/\n+$/, '');
  const r = await post(`/runs/${runId}/messages`, { text: t });
  return r.delivery;
}

/** answer sends one answer and records (and toasts) how it went. */
async function answer(run, what, send) {
  note(run.id, { what, state: 'sending', message: 'Sending…' });
  try {
    const d = await send();
    const ok = d === 'observed' || d === 'confirmed';
    const message = ok ? 'Delivered: the screen changed.' : 'Sent, but the screen has not changed: the run still waits.';
    note(run.id, { what, state: ok ? d : 'unconfirmed', message });
    toast(`${what}: ${message}`, ok ? 'info' : 'error');
    return ok;
  } catch (e) {
    const message = (e && e.message) || String(e);
    note(run.id, { what, state: 'failed', message });
    if (!e || e.status !== 401) toast(`${what}: ${message}`, 'error');
    return false;
  }
}

/**
 * visible shows the control characters a screen may carry (an escape
 * sequence in a label) in caret notation (ESC as ^[, DEL as ^?), as a
 * terminal's echo does, so they read as text in any font; newlines stay.
 */
export function visible(s) {
  // eslint-disable-next-line no-control-regex
  return String(s || '').replace(/[\x00-\x09\x0b-\x1f\x7f]/g, (c) => '^' + (c === '\x7f' ? '?' : String.fromCharCode(c.charCodeAt(0) + 64)));
}

/** resetsAt is a usage limit's reset time, with the day when not today. */
function resetsAt(iso) {
  const t = new Date(iso);
  if (Number.isNaN(t.getTime())) return '';
  const time = t.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
  return t.toDateString() === new Date().toDateString() ? time : `${t.toLocaleDateString([], { month: 'short', day: 'numeric' })} ${time}`;
}

/**
 * untilText says how long until the time t (ms since the epoch) from at:
 * "in 2 h 05 min", "in 12 min", "in 42 s", or "any moment now" once it
 * has passed (pam continues the run on its next look).
 */
export function untilText(t, at = Date.now()) {
  const s = Math.ceil((t - at) / 1000);
  if (!Number.isFinite(s)) return '';
  if (s <= 0) return 'any moment now';
  if (s < 60) return `in ${s} s`;
  const m = Math.ceil(s / 60);
  if (m < 60) return `in ${m} min`;
  return `in ${Math.floor(m / 60)} h ${String(m % 60).padStart(2, '0')} min`;
}

/** Countdown is untilText of iso, ticking every second while shown. */
function Countdown({ iso }) {
  const [at, setAt] = useState(Date.now());
  useEffect(() => {
    const id = setInterval(() => setAt(Date.now()), 1000);
    return () => clearInterval(id);
  }, []);
  return <span class="countdown" data-testid="countdown">{untilText(Date.parse(iso), at)}</span>;
}

/** waitsForAnswer reports whether the run is asked something a person can answer here. */
export function waitsForAnswer(run) {
  const att = attentionOf(run);
  return run.status === 'running' && (att === 'needs_input' || att === 'rate_limited');
}

/**
 * Answer is the question of a run that waits for a person and the ways
 * to answer it; after an answer, its delivery for a while, even once the
 * run stopped waiting. compact is the inbox card's form.
 */
export function Answer({ run, compact = false }) {
  const [text, setText] = useState('');
  const last = answers.value.get(run.id);
  // A message from the message box shows there.
  const recent = last && last.what !== 'Message' && (last.state === 'sending' || Date.now() - last.at < SHOWN_FOR);
  const waiting = waitsForAnswer(run);
  if (!waiting && !recent) return null;
  const att = attentionOf(run);
  const d = run.attention_detail || null;
  const choices = waiting && d && Array.isArray(d.choices) ? d.choices : [];
  const busy = !!last && last.state === 'sending';
  const press = (c) => answer(run, `Pressed ${c.key}${c.label ? ' “' + visible(c.label) + '”' : ''}`, () => sendKeys(run.id, [{ key: c.key }]));
  const submit = async (e) => {
    e.preventDefault();
    if (!text.trim() || busy) return;
    if (await answer(run, 'Reply', () => reply(run.id, text))) setText('');
  };
  const rows = Math.min(5, Math.max(1, text.split('\n').length));
  return (
    <section class={'answer' + (compact ? ' compact' : ' card')} data-testid="answer" data-run={run.id} aria-label="Answer the agent">
      {!compact && waiting && <h3 class="answer-head"><span class="dot" />{att === 'rate_limited' ? 'Stopped by a usage limit' : 'The agent asks'}</h3>}
      {waiting && att === 'rate_limited' && (
        <p class="answer-limit" data-testid="resets">
          Waiting for the usage limit{d && d.resets_at ? <>, resets at <time dateTime={d.resets_at} title={new Date(d.resets_at).toLocaleString()}>{resetsAt(d.resets_at)}</time> (<Countdown iso={d.resets_at} />)</> : ''}.
        </p>
      )}
      {waiting && d && d.text && <p class="answer-q" data-testid="question">{visible(d.text)}</p>}
      {choices.length > 0 && (
        <div class="answer-choices" role="group" aria-label="Choices">
          {choices.map((c, i) => {
            const ok = KEYS.has(c.key);
            return (
              <button key={i} type="button" class={'btn sm choice' + (i === 0 ? ' primary' : '')} data-testid="choice" data-key={c.key}
                disabled={busy || !ok} title={ok ? `Press ${c.key}` : 'Not a key pam can press'} onClick={() => press(c)}>
                <kbd>{visible(c.key)}</kbd><span class="choice-label">{visible(c.label) || visible(c.key)}</span>
              </button>
            );
          })}
        </div>
      )}
      {waiting && (
        <form class="answer-reply" onSubmit={submit}>
          <textarea rows={rows} value={text} placeholder={choices.length ? 'Or type a reply…' : 'Type a reply…'} aria-label="Reply" data-testid="reply"
            onInput={(e) => setText(e.currentTarget.value)}
            onKeyDown={(e) => { if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) submit(e); }} />
          <button type="submit" class="btn sm" disabled={busy || !text.trim()} data-testid="reply-send">Send</button>
        </form>
      )}
      {last && recent && (
        <p class={'answer-delivery ad-' + last.state} data-testid="delivery" data-delivery={last.state} role="status">
          <span class="dot" />{last.what}: {last.message}
        </p>
      )}
    </section>
  );
}

/**
 * MessageBox says something to a live run's agent that asks nothing (a
 * waiting one has the reply box of Answer): a message, its delivery shown
 * below it.
 */
export function MessageBox({ run }) {
  const [text, setText] = useState('');
  if (run.status !== 'running' || waitsForAnswer(run)) return null;
  const last = answers.value.get(run.id);
  const busy = !!last && last.state === 'sending';
  const submit = async (e) => {
    e.preventDefault();
    if (!text.trim() || busy) return;
    if (await answer(run, 'Message', () => reply(run.id, text))) setText('');
  };
  const rows = Math.min(5, Math.max(1, text.split('\n').length));
  return (
    <section class="answer card" data-testid="message-box" aria-label="Message the agent">
      <form class="answer-reply" onSubmit={submit}>
        <textarea rows={rows} value={text} placeholder="Message the agent…" aria-label="Message" data-testid="message"
          onInput={(e) => setText(e.currentTarget.value)}
          onKeyDown={(e) => { if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) submit(e); }} />
        <button type="submit" class="btn sm" disabled={busy || !text.trim()} data-testid="message-send">Send</button>
      </form>
      {last && last.what === 'Message' && Date.now() - last.at < SHOWN_FOR && (
        <p class={'answer-delivery ad-' + last.state} data-testid="message-delivery" data-delivery={last.state} role="status">
          <span class="dot" />{last.what}: {last.message}
        </p>
      )}
    </section>
  );
}
