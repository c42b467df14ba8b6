// A Server-Sent Events reader over fetch (docs/api.md#server-sent-events).
// EventSource cannot send an Authorization header, and the token must never
// travel in a URL (docs/architecture.md#security-model), so the stream is
// read from fetch's body and parsed here.

/**
 * readSSE reads the event stream of res.body and calls onEvent with
 * {id, event, data} for each event, until the stream ends or signal aborts.
 * @param {Response} res
 * @param {(ev: {id: string, event: string, data: string}) => void} onEvent
 */
export async function readSSE(res, onEvent) {
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  let id = '';
  let event = '';
  let data = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += dec.decode(value, { stream: true });
    let nl;
    while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
      if (buf[nl] === '\r' && nl === buf.length - 1) break; // a \r\n cut in two
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + (buf[nl] === '\r' && buf[nl + 1] === '\n' ? 2 : 1));
      if (line === '') {
        if (data.length) onEvent({ id, event: event || 'message', data: data.join('\n') });
        event = '';
        data = [];
        continue;
      }
      if (line[0] === ':') continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let val = colon < 0 ? '' : line.slice(colon + 1);
      if (val[0] === ' ') val = val.slice(1);
      if (field === 'id') id = val;
      else if (field === 'event') event = val;
      else if (field === 'data') data.push(val);
    }
  }
}
