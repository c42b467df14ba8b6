// What the signed-in token may do (docs/api.md#tokens-and-roles): its name
// and role come from GET /tokens/self once signed in, and the pages hide
// every control the role cannot use (a viewer sees no key, message,
// attach or lease control; only an admin sees hosts' actions and
// Settings). The server refuses them anyway (403 forbidden): this only
// keeps the page honest.
import { computed, effect, signal } from '@preact/signals';
import { get } from './api.js';
import { token } from './auth.js';

/** The token this dashboard is signed in with: {id, name, role, …} or null while unknown. */
export const me = signal(null);

const rank = { viewer: 1, operator: 2, admin: 3 };

/** The role of the signed-in token ('' while unknown). */
export const role = computed(() => (me.value ? me.value.role : ''));
/** canOperate: projects, items, runs and their terminal (operator and admin). */
export const canOperate = computed(() => (rank[role.value] || 0) >= rank.operator);
/** isAdmin: hosts, tokens, notifications (admin only). */
export const isAdmin = computed(() => role.value === 'admin');

let asked = '';
effect(() => {
  const t = token.value;
  if (!t) {
    me.value = null;
    asked = '';
    return;
  }
  if (asked === t) return;
  asked = t;
  me.value = null;
  loadMe(t);
});

async function loadMe(t, tries = 0) {
  try {
    const self = await get('/tokens/self');
    if (token.value === t) me.value = self;
  } catch (e) {
    // A 401 signs out (api.js); anything else is retried a few times.
    if (e && e.status !== 401 && tries < 5 && token.value === t) setTimeout(() => loadMe(t, tries + 1), 1000 * (tries + 1));
  }
}
