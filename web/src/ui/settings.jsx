// Settings (admin only): a page of sections, each its own module. To add
// one, import it and put it in `sections` — that is all.
import { isAdmin, me } from '../role.js';
import { TokensSection } from './settings/tokens.jsx';
import { Channels } from './channels.jsx';

/** The sections of the Settings page, in order. */
const sections = [
  { id: 'tokens', Component: TokensSection },
  { id: 'channels', Component: Channels },
];

export function Settings() {
  if (!me.value) return <div class="loading"><span class="spinner" />Loading…</div>;
  if (!isAdmin.value) {
    return <div class="loading"><p>Settings are for admin tokens. This one, {me.value.name}, is a {me.value.role}.</p><a class="btn" href="/inbox">Go to the inbox</a></div>;
  }
  return (
    <div class="settings" data-testid="settings">
      <div class="page-head"><h1>Settings</h1></div>
      {sections.map(({ id, Component }) => <Component key={id} />)}
    </div>
  );
}
