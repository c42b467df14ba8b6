// Small shared pieces: badges, relative times, dialogs, toasts, menus.
import { signal } from '@preact/signals';
import { useLayoutEffect, useRef } from 'preact/hooks';
import { now } from '../store.js';
import { Icon } from './icons.jsx';

/**
 * StatusBadge shows a run, host or item status with its colour.
 * @param {{status: string, label?: string}} props
 */
export function StatusBadge({ status, label }) {
  return <span class={'badge st-' + status}><span class="dot" />{label || status.replace('_', ' ')}</span>;
}

/** Kind labels a work item's kind. */
export function Kind({ kind }) {
  return <span class={'kind kind-' + kind}>{kind}</span>;
}

/** ago renders an ISO time relative to now ("3m ago"). */
export function ago(iso, t = now.value) {
  if (!iso) return '—';
  const d = Math.max(0, (t - Date.parse(iso)) / 1000);
  if (d < 45) return 'just now';
  if (d < 3600) return Math.round(d / 60) + 'm ago';
  if (d < 86400) return Math.round(d / 3600) + 'h ago';
  if (d < 86400 * 30) return Math.round(d / 86400) + 'd ago';
  return new Date(iso).toLocaleDateString();
}

/** Ago is ago() as an element with the exact time on hover. */
export function Ago({ iso }) {
  return <time dateTime={iso || ''} title={iso ? new Date(iso).toLocaleString() : ''}>{ago(iso)}</time>;
}

/** duration renders the span between two ISO times (or now). */
export function duration(from, to) {
  if (!from) return '—';
  const s = Math.max(0, ((to ? Date.parse(to) : Math.max(now.value, Date.now())) - Date.parse(from)) / 1000);
  if (s < 60) return Math.round(s) + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm ' + Math.round(s % 60) + 's';
  return Math.floor(s / 3600) + 'h ' + Math.round((s % 3600) / 60) + 'm';
}

// ---- Toasts ----

/** @type {import('@preact/signals').Signal<{id: number, text: string, kind: string}[]>} */
export const toasts = signal([]);
let toastId = 0;

/** toast shows a short message for a few seconds; kind is info or error. */
export function toast(text, kind = 'info') {
  const id = ++toastId;
  toasts.value = [...toasts.value, { id, text, kind }];
  setTimeout(() => { toasts.value = toasts.value.filter((t) => t.id !== id); }, kind === 'error' ? 6000 : 3500);
}

/** Toasts renders the live toasts. */
export function Toasts() {
  return (
    <div class="toasts" role="status" aria-live="polite">
      {toasts.value.map((t) => <div key={t.id} class={'toast toast-' + t.kind}>{t.text}</div>)}
    </div>
  );
}

/** attempt runs an action and toasts its failure; it returns the result or undefined. */
export async function attempt(fn, okText) {
  try {
    const r = await fn();
    if (okText) toast(okText);
    return r;
  } catch (e) {
    if (e && e.status !== 401) toast(e.message || String(e), 'error');
    return undefined;
  }
}

// ---- Dialog ----

/**
 * Dialog is a modal <dialog>: Escape or the close button calls onClose.
 * @param {{title: string, onClose: () => void, children: any, wide?: boolean, footer?: any}} props
 */
export function Dialog({ title, onClose, children, wide, footer }) {
  const ref = useRef(null);
  // Opened and listening as the dialog is rendered, not after the next
  // paint: an Escape pressed at once must find it open.
  useLayoutEffect(() => {
    const d = ref.current;
    if (d && !d.open) d.showModal();
    const onCancel = (e) => { e.preventDefault(); onClose(); };
    // Chrome closes a modal dialog on Escape without a cancel event when
    // the page has had no user activation lately (its close-watcher rule;
    // a key press's activation lapses after a few seconds): the dialog is
    // then closed but still rendered, and the app would think it open.
    // Whatever closed it, the owner hears of it.
    const onNativeClose = () => onClose();
    // Escape is handled here first: Chrome's close watcher may ignore an
    // Escape that comes without recent user activation (it then neither
    // fires cancel nor closes), and the dialog would stay up.
    const onKey = (e) => {
      if (e.key !== 'Escape' || e.defaultPrevented) return;
      e.preventDefault();
      e.stopPropagation();
      onClose();
    };
    d.addEventListener('cancel', onCancel);
    d.addEventListener('close', onNativeClose);
    d.addEventListener('keydown', onKey);
    return () => {
      d.removeEventListener('cancel', onCancel);
      d.removeEventListener('close', onNativeClose);
      d.removeEventListener('keydown', onKey);
    };
  }, []);
  return (
    <dialog ref={ref} class={'dialog' + (wide ? ' wide' : '')} onClick={(e) => { if (e.target === ref.current) onClose(); }}>
      <div class="dialog-inner">
        <header class="dialog-head">
          <h2>{title}</h2>
          <button type="button" class="btn icon-btn ghost" aria-label="Close" onClick={onClose}><Icon name="x" /></button>
        </header>
        <div class="dialog-body">{children}</div>
        {footer && <footer class="dialog-foot">{footer}</footer>}
      </div>
    </dialog>
  );
}

/**
 * Field is a labelled form control.
 * @param {{label: string, hint?: any, children: any}} props
 */
export function Field({ label, hint, children }) {
  return (
    <label class="field">
      <span class="field-label">{label}</span>
      {children}
      {hint && <span class="field-hint">{hint}</span>}
    </label>
  );
}

/**
 * Empty is the placeholder of an empty list.
 * @param {{icon?: string, title: string, children?: any}} props
 */
export function Empty({ icon = 'inbox', title, children }) {
  return (
    <div class="empty">
      <div class="empty-icon"><Icon name={icon} size={22} /></div>
      <h3>{title}</h3>
      {children && <p>{children}</p>}
    </div>
  );
}

/** Copy is a button that copies text to the clipboard. */
export function Copy({ text, label = 'Copy' }) {
  return (
    <button type="button" class="btn sm" onClick={async () => {
      try {
        await navigator.clipboard.writeText(text);
        toast('Copied');
      } catch {
        toast('Copy failed: select the text instead', 'error');
      }
    }}><Icon name="copy" size={14} />{label}</button>
  );
}

/** stripAnsi removes terminal escape sequences from pane text. */
export function stripAnsi(s) {
  // eslint-disable-next-line no-control-regex
  return s.replace(/\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]/g, '');
}

/** shortId is the first 8 characters of an id. */
export const shortId = (id) => (id || '').slice(0, 8);
