// The operator token ("Sign-in" in docs/architecture.md#web-dashboard;
// docs/api.md#operator-token): taken from the #token= fragment
// the way `pam up` prints the dashboard URL, or typed into the sign-in
// form; kept in localStorage only, removed from the address bar at once,
// and cleared on sign-out or when the server refuses it.
import { signal } from '@preact/signals';

const KEY = 'pam.token';

function stored() {
  try {
    return localStorage.getItem(KEY) || '';
  } catch {
    return '';
  }
}

/** The token the API calls carry; '' shows the sign-in form. */
export const token = signal(stored());

/** Why the last sign-out happened, shown on the form ('' for none). */
export const signInNotice = signal('');

/**
 * takeFragmentToken moves a #token=… fragment into localStorage and
 * rewrites the address without it, so it never stays in the history or
 * the address bar.
 */
export function takeFragmentToken() {
  const m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  if (!m) return;
  const rest = location.hash.slice(1).split('&').filter((p) => !p.startsWith('token=')).join('&');
  history.replaceState(history.state, '', location.pathname + location.search + (rest ? '#' + rest : ''));
  const t = decodeURIComponent(m[1]).trim();
  if (t) setToken(t);
}

/** setToken keeps t as the operator token. */
export function setToken(t) {
  try {
    localStorage.setItem(KEY, t);
  } catch {
    // private mode: the token lives for this page only
  }
  signInNotice.value = '';
  token.value = t;
}

/** signOut forgets the token everywhere; notice says why, if not asked. */
export function signOut(notice = '') {
  try {
    localStorage.removeItem(KEY);
  } catch {
    // nothing stored
  }
  signInNotice.value = notice;
  token.value = '';
}
