// The run page's terminal ("Terminal" in docs/architecture.md#web-dashboard;
// the sockets, docs/api.md#websockets), loaded on that page only:
// xterm.js showing the pane read-only from pane/ws, or, after Take
// control, the interactive attach/ws under the run's single-writer lease.
// WebGL renders when the browser has it; a lost context falls back to
// the DOM renderer.
import { Terminal } from '@xterm/xterm';
import { FitAddon } from '@xterm/addon-fit';
import { WebglAddon } from '@xterm/addon-webgl';
import { wsURL } from './api.js';

const FONT = 13;
const theme = {
  background: '#0c0d10', foreground: '#d7dae0', cursor: '#d7dae0', cursorAccent: '#0c0d10',
  selectionBackground: '#3b4261',
  black: '#1d1f25', red: '#f7768e', green: '#9ece6a', yellow: '#e0af68', blue: '#7aa2f7', magenta: '#bb9af7', cyan: '#7dcfff', white: '#c0caf5',
  brightBlack: '#565f89', brightRed: '#ff899d', brightGreen: '#b9f27c', brightYellow: '#ffc777', brightBlue: '#8db0ff', brightMagenta: '#c7a9ff', brightCyan: '#a4daff', brightWhite: '#e8ecff',
};

const enc = new TextEncoder();
function b64(s) {
  const bytes = typeof s === 'string' ? enc.encode(s) : s;
  let bin = '';
  for (let i = 0; i < bytes.length; i++) bin += String.fromCharCode(bytes[i]);
  return btoa(bin);
}
function unb64(s) {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** The visible text of a terminal, one line per row (for tests and copy). */
function bufferText(term) {
  const b = term.buffer.active;
  const lines = [];
  for (let i = 0; i < b.length; i++) {
    const l = b.getLine(i);
    lines.push(l ? l.translateToString(true) : '');
  }
  return lines.join('\n').replace(/\n+$/, '');
}

/**
 * @typedef {object} TermState
 * @property {'connecting'|'view'|'waiting'|'control'|'held'|'ended'} mode
 * @property {any} [holder] who holds the control lease, when another does
 * @property {string} [message] why the mode changed (an error, a notice)
 * @property {boolean} [notice] the message is a notice that stays across reconnects
 * @property {boolean} [ctrl] the key bar's Ctrl is armed for the next key
 * @property {string} [renderer] 'webgl' or 'dom'
 */

/**
 * createTerminal opens a terminal for runId in el; onState hears every
 * change of mode (view, control, held by someone else, …).
 * @param {HTMLElement} el
 * @param {string} runId
 * @param {(s: TermState) => void} onState
 */
export function createTerminal(el, runId, onState) {
  const term = new Terminal({
    fontFamily: 'ui-monospace, "SF Mono", "JetBrains Mono", Menlo, Consolas, "DejaVu Sans Mono", "Liberation Mono", monospace',
    fontSize: FONT,
    lineHeight: 1.15,
    theme,
    scrollback: 2000,
    cursorBlink: true,
    disableStdin: true,
    allowTransparency: false,
  });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(el);
  let renderer = 'dom';
  try {
    const gl = new WebglAddon();
    gl.onContextLoss(() => {
      gl.dispose(); // back to the DOM renderer
      renderer = 'dom';
      emit({});
    });
    term.loadAddon(gl);
    renderer = 'webgl';
  } catch {
    renderer = 'dom';
  }
  /** @type {TermState} */
  let state = { mode: 'connecting' };
  const emit = (patch) => { state = { ...state, ...patch, renderer }; onState(state); };
  let disposed = false;
  let pane = null; // pane/ws
  let attach = null; // attach/ws
  let paneTimer = 0;
  let lastCapture = '';
  let widest = 0;
  let ctrlArmed = false;

  const safeFit = () => {
    try {
      fit.fit();
    } catch {
      // not laid out yet
    }
  };
  safeFit();
  const ro = new ResizeObserver(() => {
    if (state.mode === 'control') safeFit();
    else sizeForPane();
  });
  ro.observe(el);

  // ---- read-only view ----

  function sizeForPane() {
    // Pick the font that fits the pane's widest line (between 8 and 13 px).
    term.options.fontSize = FONT;
    safeFit();
    if (widest > term.cols) {
      term.options.fontSize = Math.max(8, Math.floor((FONT * term.cols) / widest));
      safeFit();
    }
    if (lastCapture) paint(lastCapture);
  }

  function paint(capture) {
    const lines = capture.replace(/\r/g, '').split('\n');
    while (lines.length > 1 && lines[lines.length - 1].trim() === '') lines.pop();
    const shown = lines.slice(-term.rows);
    // Redraw in place (no clear, no flash): each row then erase-to-end;
    // autowrap off, so a line wider than the terminal is cut, not wrapped.
    term.write('\x1b[?7l\x1b[?25l\x1b[H' + shown.map((l) => '\x1b[0m' + l + '\x1b[0m\x1b[K').join('\r\n') + '\x1b[J');
  }

  function onSnapshot(capture) {
    lastCapture = capture;
    // eslint-disable-next-line no-control-regex
    const w = Math.max(0, ...capture.split('\n').map((l) => l.replace(/\x1b\[[0-9;?]*[ -/]*[@-~]/g, '').replace(/\s+$/, '').length));
    if (w !== widest && (w > term.cols || widest > term.cols)) {
      widest = w;
      sizeForPane();
      return;
    }
    widest = w;
    paint(capture);
  }

  async function startView() {
    if (disposed || attach) return;
    clearTimeout(paneTimer);
    term.options.disableStdin = true;
    term.options.cursorBlink = false;
    let ws;
    try {
      ws = new WebSocket(await wsURL(runId, 'pane'));
    } catch (e) {
      emit({ mode: state.mode === 'connecting' ? 'connecting' : state.mode, message: e.message });
      paneTimer = setTimeout(startView, 2000);
      return;
    }
    if (disposed || attach) { ws.close(); return; }
    pane = ws;
    // A notice of why control ended stays; a connection error goes.
    ws.onopen = () => { if (pane === ws) emit({ mode: 'view', message: state.notice ? state.message : '' }); };
    ws.onmessage = (m) => {
      let f;
      try {
        f = JSON.parse(m.data);
      } catch {
        return;
      }
      if (f.type === 'pane_snapshot' && pane === ws) onSnapshot(f.capture || '');
    };
    ws.onclose = () => {
      if (pane !== ws) return;
      pane = null;
      if (!disposed && !attach) paneTimer = setTimeout(startView, 1500);
    };
  }

  function stopView() {
    clearTimeout(paneTimer);
    if (pane) {
      const p = pane;
      pane = null;
      p.close();
    }
  }

  // ---- interactive control ----

  const send = (f) => { if (attach && attach.readyState === WebSocket.OPEN) attach.send(JSON.stringify(f)); };

  term.onData((d) => {
    if (state.mode !== 'control') return;
    if (ctrlArmed && d.length === 1) {
      const c = d.toLowerCase().charCodeAt(0);
      if (c >= 97 && c <= 122) d = String.fromCharCode(c - 96);
      ctrlArmed = false;
      emit({ ctrl: false });
    }
    send({ type: 'input', bytes: b64(d) });
  });
  term.onBinary((d) => {
    if (state.mode !== 'control') return;
    const bytes = new Uint8Array(d.length);
    for (let i = 0; i < d.length; i++) bytes[i] = d.charCodeAt(i) & 0xff;
    send({ type: 'input', bytes: b64(bytes) });
  });
  term.onResize(({ rows, cols }) => { if (state.mode === 'control') send({ type: 'resize', rows, cols }); });

  async function takeControl() {
    if (disposed || attach) return;
    emit({ mode: 'waiting', message: '', notice: false });
    term.options.fontSize = FONT;
    safeFit();
    let url;
    try {
      url = await wsURL(runId, 'attach', { rows: String(term.rows), cols: String(term.cols) });
    } catch (e) {
      emit({ mode: 'view', message: e.message });
      return;
    }
    const ws = new WebSocket(url);
    attach = ws;
    let ended = false;
    ws.onmessage = (m) => {
      let f;
      try {
        f = JSON.parse(m.data);
      } catch {
        return;
      }
      switch (f.type) {
        case 'lease_acquired':
          stopView();
          term.reset();
          term.options.disableStdin = false;
          term.options.cursorBlink = true;
          term.write('\x1b[?7h\x1b[?25h');
          emit({ mode: 'control', holder: null, message: '' });
          safeFit();
          send({ type: 'resize', rows: term.rows, cols: term.cols });
          term.focus();
          break;
        case 'data':
          if (state.mode === 'control' && f.bytes) term.write(unb64(f.bytes));
          break;
        case 'resize':
          if (state.mode === 'control' && f.rows && f.cols && (f.rows !== term.rows || f.cols !== term.cols)) term.resize(f.cols, f.rows);
          break;
        case 'error':
          if (f.code === 'lease_held') {
            emit({ mode: 'held', holder: f.holder || null, message: f.message || '' });
          } else {
            ended = true;
            const why = {
              lease_revoked: 'Your control was revoked from another session.',
              lease_expired: 'Your control expired after a quiet spell.',
              run_ended: 'The run has ended.',
              run_not_running: 'The run is not running yet.',
              relay_closed: 'The host closed the terminal relay.',
              too_slow: 'The connection was too slow for the terminal.',
            }[f.code] || f.message || f.code;
            finishControl(why);
          }
          break;
        default:
      }
    };
    ws.onclose = () => { if (attach === ws && !ended) finishControl('The terminal connection closed.'); };
  }

  function finishControl(message) {
    const ws = attach;
    attach = null;
    if (ws) ws.close();
    if (disposed) return;
    term.options.disableStdin = true;
    term.reset();
    widest = 0;
    emit({ mode: 'view', holder: null, message, notice: !!message, ctrl: false });
    sizeForPane();
    startView();
  }

  const api = {
    term,
    /** takeControl opens attach/ws under the lease. */
    takeControl,
    /** retryLease asks again for a lease that was held (after a revoke, say). */
    retryLease: () => send({ type: 'resize', rows: term.rows, cols: term.cols }),
    /** release gives the lease back and returns to the read-only view. */
    release: () => {
      send({ type: 'release_lease' });
      finishControl('');
    },
    /** key sends input as if typed (the phone key bar). */
    key: (s) => { send({ type: 'input', bytes: b64(s) }); term.focus(); },
    /** toggleCtrl arms Ctrl for the next typed letter. */
    toggleCtrl: () => { ctrlArmed = !ctrlArmed; emit({ ctrl: ctrlArmed }); term.focus(); },
    get text() { return bufferText(term); },
    dispose() {
      disposed = true;
      stopView();
      if (attach) { const a = attach; attach = null; a.close(); }
      ro.disconnect();
      term.dispose();
      if (window.__pamTerm === exposed) delete window.__pamTerm;
    },
  };
  // Tests read the screen through window.__pamTerm.buffer.
  const exposed = { get buffer() { return bufferText(term); }, get state() { return state; }, term };
  window.__pamTerm = exposed;
  startView();
  return api;
}
