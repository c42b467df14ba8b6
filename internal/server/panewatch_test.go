package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"pam/internal/wire"
)

// A pane viewer makes the server tell the run's worker that the pane is
// watched (pane_watch, naming the run and its attempt), so that the
// worker refreshes it faster (docs/architecture.md#capture-by-control-mode);
// a second viewer of the same run within the refresh sends nothing more.
func TestPaneViewerSendsPaneWatch(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("host-watch", 4, "shell")
	r := e.runningRun(w)
	view := func() {
		t.Helper()
		c, _, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(e.url, "http")+"/api/v1/runs/"+r.ID+"/pane/ws",
			&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + testToken}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.CloseNow() })
	}
	view()
	f := w.expect(wire.FramePaneWatch)
	if f.RunID != r.ID || f.Attempt == nil || *f.Attempt != r.Attempt {
		t.Fatalf("pane_watch = %+v, want run %s attempt %d", f, r.ID, r.Attempt)
	}
	if err := (wire.PaneWatchFrame{RunID: f.RunID, Attempt: f.Attempt}).Validate(); err != nil {
		t.Fatalf("pane_watch refused by the frame rules: %v", err)
	}
	view()
	// The next frame the worker gets is the keys': no second pane_watch.
	e.must(202, "POST", "/api/v1/runs/"+r.ID+"/keys", map[string]any{"keys": []map[string]string{{"key": "Enter"}}}, nil)
	w.expect(wire.FrameSendKeys)
}
