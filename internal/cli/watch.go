package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/term"

	"pam/internal/apiclient"
	"pam/internal/wire"
)

// runWatchCmd is `pam run watch ID`: the run's pane, live and read-only,
// from the orchestrator's pane socket (docs/api.md#websockets).
var runWatchCmd = &command{
	name: "watch", args: "ID", nargs: 1, names: runIDs, group: clientGroup,
	summary: "show a run's pane live, read-only, until the run ends (Ctrl-C to stop)",
	setup: func(fs *flag.FlagSet) func(*invocation) error {
		return func(x *invocation) error {
			c, err := x.client()
			if err != nil {
				return err
			}
			return watchPane(x.ctx, c, x.args[0], x.stdout)
		}
	},
}

// runPollEvery is how often watch and attach look whether the run ended.
const runPollEvery = time.Second

// watchPane draws each pane_snapshot as it comes: on a terminal, clear
// and redraw; otherwise one block per snapshot under a header line. It
// returns nil when the run ends or ctx does (Ctrl-C).
func watchPane(ctx context.Context, c *apiclient.Client, runID string, out io.Writer) error {
	run, err := c.GetRun(ctx, runID)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ws, err := dialTerminal(ctx, c, run.ID, "pane", nil)
	if err != nil {
		return err
	}
	defer ws.CloseNow()
	ws.SetReadLimit(wire.MaxFrame)
	// The poller and the reader end with ctx; watchPane waits for them.
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	ended := make(chan string, 1)
	wg.Go(func() { watchRunEnd(ctx, c, run.ID, ended) })
	tty := isTerminal(out)
	frames := make(chan wire.PaneSnapshot)
	readErr := make(chan error, 1)
	wg.Go(func() {
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				readErr <- err
				return
			}
			var p wire.PaneSnapshot
			if json.Unmarshal(b, &p) != nil || p.Type != wire.WSPaneSnapshot {
				continue
			}
			select {
			case frames <- p:
			case <-ctx.Done():
				return
			}
		}
	})
	if tty {
		fmt.Fprint(out, "\x1b[H\x1b[2J")
	}
	for {
		select {
		case <-ctx.Done():
			_ = ws.Close(websocket.StatusNormalClosure, "")
			return nil
		case st := <-ended:
			_ = ws.Close(websocket.StatusNormalClosure, "")
			fmt.Fprintf(out, "\nrun %s is %s\n", run.ID, st)
			return nil
		case err := <-readErr:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("pane stream of run %s ended: %w", run.ID, err)
		case p := <-frames:
			if tty {
				// Home and clear, then the screen as tmux captured it.
				fmt.Fprint(out, "\x1b[H\x1b[2J"+p.Capture)
			} else {
				at := "-"
				if p.Timestamp != nil {
					at = p.Timestamp.UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(out, "--- pane seq %d at %s ---\n%s", p.Seq, at, p.Capture)
				if n := len(p.Capture); n > 0 && p.Capture[n-1] != '\n' {
					fmt.Fprintln(out)
				}
			}
		}
	}
}

// watchRunEnd sends the run's status once it is no longer active.
func watchRunEnd(ctx context.Context, c *apiclient.Client, runID string, ended chan<- string) {
	t := time.NewTicker(runPollEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r, err := c.GetRun(ctx, runID)
		if err == nil && !runActive(r.Status) {
			ended <- r.Status
			return
		}
	}
}

// dialTerminal opens a run's pane or attach socket with the operator
// token in the Authorization header (a non-browser client needs no
// ticket). A refused handshake comes back as the server's error.
func dialTerminal(ctx context.Context, c *apiclient.Client, runID, kind string, q map[string][]string) (*websocket.Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(dctx, c.TerminalURL(runID, kind, q), &websocket.DialOptions{
		HTTPClient: c.HTTPClient(),
		HTTPHeader: c.AuthHeader(),
	})
	if err != nil {
		if resp != nil && resp.StatusCode != 101 {
			var env wire.Envelope
			if resp.Body != nil {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
				if json.Unmarshal(b, &env) == nil && env.Error != nil {
					env.Error.Status = resp.StatusCode
					return nil, env.Error
				}
			}
			return nil, fmt.Errorf("%s socket: %s", kind, resp.Status)
		}
		return nil, fmt.Errorf("%s socket: %w", kind, err)
	}
	return ws, nil
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// runActive reports whether a run status is not terminal.
func runActive(st string) bool {
	return st == wire.RunPending || st == wire.RunSpawning || st == wire.RunRunning
}
