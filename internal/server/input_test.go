package server_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/coder/websocket"

	"pam/internal/eventually"
	"pam/internal/wire"
)

// lastInputAt is the run's last_input_at, which is not on the wire.
func (e *runEnv) lastInputAt(runID string) time.Time {
	e.t.Helper()
	r, err := e.store.GetRun(e.t.Context(), runID)
	if err != nil || r.LastInputAt == nil {
		e.t.Fatalf("run %s: last_input_at %v (%v)", runID, r.LastInputAt, err)
	}
	return *r.LastInputAt
}

// forgetInput moves the run's last input an hour back, so that a new
// one shows.
func (e *runEnv) forgetInput(runID string) {
	e.t.Helper()
	if _, err := e.store.Pool.Exec(e.t.Context(), `UPDATE runs SET last_input_at = now() - interval '1 hour' WHERE id = $1`, runID); err != nil {
		e.t.Fatal(err)
	}
}

// Every input into a running run moves its last_input_at
// (docs/architecture.md#working-waiting-hung): its start (made at the spawn), keys once they
// went to the host, and input through attach.
func TestInputRecorded(t *testing.T) {
	t.Parallel()
	e := newRunEnv(t, runOpts{})
	w := e.worker("host-a", 4, "shell")
	r, _ := e.attendedRun(w)
	recent := func(at time.Time) bool { return time.Since(at) < time.Minute }
	// The start's input is when the host took the run, before it spawned
	// the CLI: not after started_at.
	if at := e.lastInputAt(r.ID); !recent(at) || r.StartedAt == nil || at.After(*r.StartedAt) {
		t.Fatalf("started at %v, last input %v", r.StartedAt, at)
	}

	e.forgetInput(r.ID)
	e.must(202, "POST", "/api/v1/runs/"+r.ID+"/keys", map[string]any{"keys": []map[string]any{{"text": "y"}}}, nil)
	w.expect(wire.FrameSendKeys)
	if at := e.lastInputAt(r.ID); !recent(at) {
		t.Fatalf("after keys: last input %v", at)
	}

	e.forgetInput(r.ID)
	c := e.dialAttach(r.ID)
	defer c.CloseNow()
	if f, err := readTerm(t, c, eventually.Short); err != nil || f.Type != wire.WSLeaseAcquired {
		t.Fatalf("first attach frame %+v %v", f, err)
	}
	w.expect(wire.FrameAttachOpen)
	if at := e.lastInputAt(r.ID); recent(at) {
		t.Fatalf("attached without typing: last input %v", at)
	}
	b, _ := json.Marshal(wire.TermFrame{Type: wire.WSInput, Bytes: []byte("y\r")})
	if err := c.Write(t.Context(), websocket.MessageText, b); err != nil {
		t.Fatal(err)
	}
	eventually.Wait(t, eventually.Medium, "attach input recorded", func() bool { return recent(e.lastInputAt(r.ID)) })
	c.Close(websocket.StatusNormalClosure, "")
}
