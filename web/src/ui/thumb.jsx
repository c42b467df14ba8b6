// Live pane thumbnails (Inbox, Fleet): the tail of a run's screen as plain
// text, from pane/ws while the run is live (docs/api.md#pane-websocket; a
// ticket per socket, docs/api.md#websocket-tickets) or one
// GET /runs/{id}/pane once it has ended.
import { useEffect, useState } from 'preact/hooks';
import { get, wsURL } from '../api.js';
import { stripAnsi } from './common.jsx';

function tail(capture, n) {
  const lines = stripAnsi(capture || '').split('\n').map((l) => l.replace(/\s+$/, ''));
  while (lines.length && lines[lines.length - 1] === '') lines.pop();
  return lines.slice(-n).join('\n');
}

/** Thumb shows the last lines of a run's pane, live while the run is. */
export function Thumb({ runId, live, lines = 8 }) {
  const [text, setText] = useState('');
  useEffect(() => {
    let ws = null;
    let closed = false;
    let timer = 0;
    const open = async () => {
      if (closed) return;
      try {
        ws = new WebSocket(await wsURL(runId, 'pane'));
      } catch {
        timer = setTimeout(open, 3000);
        return;
      }
      if (closed) { ws.close(); return; }
      ws.onmessage = (m) => {
        try {
          const f = JSON.parse(m.data);
          if (f.type === 'pane_snapshot') setText(tail(f.capture, lines));
        } catch {
          // not a frame
        }
      };
      ws.onclose = () => { if (!closed) timer = setTimeout(open, 3000); };
    };
    if (live) open();
    else get(`/runs/${runId}/pane`).then((p) => { if (!closed) setText(tail(p.capture, lines)); }).catch(() => {});
    return () => {
      closed = true;
      clearTimeout(timer);
      if (ws) ws.close();
    };
  }, [runId, live]);
  return <pre class={'thumb' + (text ? '' : ' thumb-empty')} aria-label="pane preview">{text || 'No output yet'}</pre>;
}
