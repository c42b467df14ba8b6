// The dashboard's entry point (docs/architecture.md#web-dashboard). The
// token fragment is taken before anything renders, so it leaves the address
// bar at once.
import './style.css';
import { render } from 'preact';
import { takeFragmentToken } from './auth.js';
import { App } from './ui/app.jsx';

takeFragmentToken();
// The link `pam up` prints may be pasted into a tab that shows the
// dashboard already: only the fragment changes then, with no reload.
window.addEventListener('hashchange', takeFragmentToken);
render(<App />, document.getElementById('app'));
