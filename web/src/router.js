// A small history-API router. The server answers index.html for every
// dashboard path (internal/webui.Patterns), so a reload or a deep link —
// a notification's, say — opens the right page.
import { signal } from '@preact/signals';

/**
 * @typedef {{name: string, params: Record<string, string>, query: URLSearchParams, path: string}} Route
 */

/** @type {[RegExp, string, string[]][]} the pattern, the route's name, the names of its groups */
const table = [
  [/^\/(?:inbox)?$/, 'inbox', []],
  [/^\/projects$/, 'projects', []],
  [/^\/projects\/([^/]+)$/, 'board', ['ref']],
  [/^\/runs$/, 'runs', []],
  [/^\/runs\/([0-9a-fA-F-]{36})$/, 'run', ['id']],
  [/^\/fleet$/, 'fleet', []],
  [/^\/settings$/, 'settings', []],
];

/**
 * parse maps a path and query to a Route.
 * @param {string} path
 * @param {string} [search]
 * @returns {Route}
 */
export function parse(path, search = '') {
  for (const [re, name, keys] of table) {
    const m = re.exec(path);
    if (m) {
      /** @type {Record<string, string>} */
      const params = {};
      keys.forEach((k, i) => { params[k] = decodeURIComponent(m[i + 1]); });
      return { name, params, query: new URLSearchParams(search), path };
    }
  }
  return { name: 'notfound', params: {}, query: new URLSearchParams(search), path };
}

/** @type {import('@preact/signals').Signal<Route>} */
export const route = signal(parse(location.pathname, location.search));

/** navigate goes to url (a path with an optional query) without a reload. */
export function navigate(url, { replace = false } = {}) {
  const u = new URL(url, location.href);
  if (u.pathname + u.search === location.pathname + location.search && !replace) return;
  if (replace) history.replaceState(null, '', u.pathname + u.search);
  else history.pushState(null, '', u.pathname + u.search);
  route.value = parse(u.pathname, u.search);
  if (!replace) window.scrollTo(0, 0);
}

window.addEventListener('popstate', () => {
  route.value = parse(location.pathname, location.search);
});

// Same-origin links are routed here rather than reloaded.
document.addEventListener('click', (e) => {
  if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  /** @type {HTMLAnchorElement | null} */
  const a = e.target instanceof Element ? e.target.closest('a[href]') : null;
  if (!a || a.target || a.hasAttribute('download')) return;
  const u = new URL(a.href, location.href);
  if (u.origin !== location.origin || u.pathname.startsWith('/api/')) return;
  e.preventDefault();
  navigate(u.pathname + u.search);
});
