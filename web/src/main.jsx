// The dashboard's entry point (contract §15). The token fragment is taken
// before anything renders, so it leaves the address bar at once.
import './style.css';
import { render } from 'preact';
import { takeFragmentToken } from './auth.js';
import { App } from './ui/app.jsx';

takeFragmentToken();
render(<App />, document.getElementById('app'));
