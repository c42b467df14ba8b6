// Browser notifications, opt-in ("Inbox" in
// docs/architecture.md#web-dashboard): when a run starts waiting for a
// person — needs input, failed, completed — with a deep link to it. The tab
// title counts the inbox.
import { effect, signal } from '@preact/signals';
import { hooks, inbox, inboxReason, loaded, taskTitle } from './store.js';
import { navigate } from './router.js';

const KEY = 'pam.notify';
const supported = typeof Notification !== 'undefined';

/** Whether the operator asked for notifications (and the browser granted them). */
export const notifyOn = signal(supported && Notification.permission === 'granted' && localStorage.getItem(KEY) === '1');

/** toggleNotify asks for permission the first time, then switches notifications on or off. */
export async function toggleNotify() {
  if (!supported) return 'unsupported';
  if (notifyOn.value) {
    notifyOn.value = false;
    localStorage.removeItem(KEY);
    return 'off';
  }
  const p = Notification.permission === 'default' ? await Notification.requestPermission() : Notification.permission;
  if (p !== 'granted') return 'denied';
  localStorage.setItem(KEY, '1');
  notifyOn.value = true;
  return 'on';
}

const words = { needs_input: 'needs input', rate_limited: 'hit a usage limit', idle: 'is idle', failed: 'failed', completed: 'completed' };

hooks.runChanged = (before, after) => {
  if (!loaded.value || !notifyOn.value || !before) return;
  const was = inboxReason(before);
  const is = inboxReason(after);
  if (!is || is === was || is === 'idle') return;
  try {
    const n = new Notification(`${taskTitle(after)} ${words[is] || is}`, {
      body: `${after.provider} · run ${after.id.slice(0, 8)}`,
      tag: after.id,
    });
    n.onclick = () => {
      window.focus();
      navigate('/runs/' + after.id);
      n.close();
    };
  } catch {
    // notifications unavailable in this context
  }
};

effect(() => {
  const n = inbox.value.length;
  document.title = n ? `(${n}) pam` : 'pam';
});
