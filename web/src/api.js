// REST calls to /api/v1 with the operator token (docs/api.md#resources).
// Errors come back as ApiError with the envelope's code (docs/api.md#errors);
// a 401 signs out, so the sign-in form shows ("Sign-in" in
// docs/architecture.md#web-dashboard).
import { signOut, token } from './auth.js';

/** An error answer of the API, or a network failure (status 0). */
export class ApiError extends Error {
  constructor(status, code, message, details) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details || {};
  }
}

/** eventSeqOf reads a response's Pam-Event-Seq header, or null. */
export function eventSeqOf(res) {
  const v = res.headers.get('Pam-Event-Seq');
  if (v === null || v === '') return null;
  const n = Number(v);
  return Number.isSafeInteger(n) && n >= 0 ? n : null;
}

/**
 * api calls method path (under /api/v1) with an optional JSON body and
 * returns the parsed JSON (null for 204); with opts.response it returns
 * the Response itself, for text and streams.
 * @param {string} method
 * @param {string} path
 * @param {any} [body]
 * @param {{signal?: AbortSignal, response?: boolean, token?: string}} [opts]
 */
export async function api(method, path, body, opts = {}) {
  const headers = { Authorization: 'Bearer ' + (opts.token ?? token.value) };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let res;
  try {
    res = await fetch('/api/v1' + path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: opts.signal,
      cache: 'no-store',
    });
  } catch (e) {
    if (e && e.name === 'AbortError') throw e;
    throw new ApiError(0, 'network', 'The server cannot be reached.');
  }
  if (res.status === 401) {
    if (opts.token === undefined) signOut('The server refused the token. Sign in again.');
    throw new ApiError(401, 'unauthorized', 'The server refused the token.');
  }
  if (!res.ok) {
    let env = null;
    try {
      env = await res.json();
    } catch {
      // not an envelope
    }
    const e = env && env.error;
    throw new ApiError(res.status, (e && e.code) || 'http_' + res.status, (e && e.message) || res.statusText || 'Request failed', e && e.details);
  }
  if (opts.response) return res;
  if (res.status === 204) return null;
  return res.json();
}

/** get is api('GET', path). */
export const get = (path, opts) => api('GET', path, undefined, opts);
/** post is api('POST', path, body). */
export const post = (path, body, opts) => api('POST', path, body, opts);
/** patch is api('PATCH', path, body). */
export const patch = (path, body, opts) => api('PATCH', path, body, opts);
/** del is api('DELETE', path). */
export const del = (path, opts) => api('DELETE', path, undefined, opts);

/**
 * wsURL is the ws(s):// URL of an /api/v1 socket path with a fresh ticket
 * (docs/api.md#websocket-tickets).
 */
export async function wsURL(runId, purpose, query = {}) {
  const t = await post('/ws-tickets', { run_id: runId, purpose });
  const q = new URLSearchParams({ ...query, ticket: t.ticket });
  const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
  return `${proto}//${location.host}/api/v1/runs/${runId}/${purpose}/ws?${q}`;
}
