// Types for what the bundler and the browser tests add to the JavaScript
// sources, which tsc (npm run typecheck) checks through their JSDoc.

// esbuild bundles a stylesheet imported for its side effect.
declare module '*.css';

/** What the event stream delivered in this page's life (store.js). */
interface PamStreamRecord {
  after: number | null;
  seqs: number[];
  reconnects: number;
}

interface Window {
  /** The browser tests read the stream's record here (store.js). */
  __pamStream?: PamStreamRecord;
  /** The browser tests read the terminal's screen and state here (term.js). */
  __pamTerm?: {
    readonly buffer: string;
    readonly state: import('./term.js').TermState;
    term: import('@xterm/xterm').Terminal;
  };
}
