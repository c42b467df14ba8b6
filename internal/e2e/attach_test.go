package e2e

import (
	"bytes"
	"encoding/json"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"pam/internal/eventually"
	"pam/internal/wire"
)

// readEcho is an agent that reads lines and answers each with the
// terminal's width, so a test sees both that typed bytes reached the
// program and what size its pane has.
const readEcho = `while read l; do echo "got:$l cols:$(tput cols)"; done`

// The single-writer lease: the first client holds it, a second is told
// lease_held with the holder; typed bytes reach the program and its echo
// comes back; a resize reaches the pane; after release_lease the second
// client takes it on its next frame; a revoke closes the holder. Every
// change is journaled with who held the lease and for how long.
func TestAttachLease(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.worker("term-lease")
	r := s.startRun(s.task(), readEcho)

	a := s.attach(r.ID, url.Values{"rows": {"30"}, "cols": {"100"}})
	acq := a.waitFrame(wire.WSLeaseAcquired, "")
	if acq.RunID != r.ID || acq.AttachedAt == nil {
		t.Fatalf("lease_acquired %+v", acq)
	}
	if rs := a.waitFrame(wire.WSResize, ""); rs.Rows != 30 || rs.Cols != 100 {
		t.Fatalf("initial resize %+v", rs)
	}
	b := s.attach(r.ID, nil)
	held := b.waitFrame(wire.WSError, wire.CodeLeaseHeld)
	if held.Holder == nil || held.Holder.Auth != "header" || held.Holder.RemoteAddr == "" || held.Holder.UserAgent == "" {
		t.Fatalf("lease_held without the holder: %+v", held)
	}

	// Round trip: the tty echoes the keystrokes, the program answers.
	a.input("hello\r")
	a.waitOutput("got:hello cols:100")
	s.waitPane(r.ID, "got:hello cols:100")
	// Resize both ways: the pane follows the client.
	if err := a.send(wire.TermFrame{Type: wire.WSResize, Rows: 40, Cols: 117}); err != nil {
		t.Fatal(err)
	}
	// Ask again every 200 ms until the program sees the new size.
	var asked time.Time
	eventually.Wait(t, eventually.Medium, "tput cols saying 117", func() bool {
		if time.Since(asked) >= 200*time.Millisecond {
			a.input("size\r")
			asked = time.Now()
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		return strings.Contains(a.out.String(), "got:size cols:117")
	})
	// A non-holder's input is refused, and never reaches the program.
	if err := b.send(wire.TermFrame{Type: wire.WSInput, Bytes: []byte("intruder\r")}); err != nil {
		t.Fatal(err)
	}
	b.wait(eventually.Medium, "a second lease_held", func() bool {
		n := 0
		for _, f := range b.frames {
			if f.Code == wire.CodeLeaseHeld {
				n++
			}
		}
		return n >= 2
	})

	// release_lease: the socket stays, the lease is free, b takes it.
	if err := a.send(wire.TermFrame{Type: wire.WSReleaseLease}); err != nil {
		t.Fatal(err)
	}
	eventually.Wait(t, eventually.Medium, "the release to be journaled", func() bool { return len(s.runEvents(r.ID, "run.lease_released")) == 1 })
	if err := b.send(wire.TermFrame{Type: wire.WSResize, Rows: 24, Cols: 80}); err != nil {
		t.Fatal(err)
	}
	b.waitFrame(wire.WSLeaseAcquired, "")
	b.input("second\r")
	b.waitOutput("got:second")
	if p := s.waitPane(r.ID, "got:second"); strings.Contains(p.Capture, "intruder") {
		t.Fatalf("a non-holder's input reached the program:\n%s", p.Capture)
	}

	// Revoke: b is told and closed; the lease is free again.
	s.must(204, "DELETE", "/api/v1/runs/"+r.ID+"/lease", nil, nil)
	b.waitFrame(wire.WSError, wire.CodeLeaseRevoked)
	b.waitClosed()
	s.must(204, "DELETE", "/api/v1/runs/"+r.ID+"/lease", nil, nil) // nothing held: still 204
	s.must(404, "DELETE", "/api/v1/runs/00000000-0000-4000-8000-000000000000/lease", nil, nil)
	c := s.attach(r.ID, nil)
	c.waitFrame(wire.WSLeaseAcquired, "")

	eventually.Wait(t, eventually.Medium, "the journal", func() bool {
		return len(s.runEvents(r.ID, "run.lease_acquired")) == 3 && len(s.runEvents(r.ID, "run.lease_released")) == 2
	})
	var reasons []string
	for _, ev := range s.runEvents(r.ID, "run.lease_released") {
		var p struct {
			RunID       string           `json:"run_id"`
			Reason      string           `json:"reason"`
			HeldSeconds float64          `json:"held_seconds"`
			Holder      wire.LeaseHolder `json:"holder"`
		}
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if p.RunID != r.ID || p.HeldSeconds <= 0 || p.Holder.RemoteAddr == "" || p.Holder.Auth != "header" {
			t.Errorf("lease_released payload %s", ev.Payload)
		}
		reasons = append(reasons, p.Reason)
	}
	if strings.Join(reasons, ",") != "released,revoked" {
		t.Errorf("release reasons %v", reasons)
	}
}

// A lease whose holder is silent past PAM_LEASE_TTL expires (the holder is
// closed with lease_expired), and every attach socket of a run ends with
// run_ended when the run leaves running.
func TestAttachLeaseExpiresAndRunEnds(t *testing.T) {
	t.Parallel()
	s := newSystem(t, "PAM_LEASE_TTL=1s")
	s.worker("term-ttl")
	task := s.task()
	r := s.startRun(task, "cat")
	a := s.attach(r.ID, nil)
	a.waitFrame(wire.WSLeaseAcquired, "")
	t0 := time.Now()
	a.waitFrame(wire.WSError, wire.CodeLeaseExpired)
	a.waitClosed()
	if d := time.Since(t0); d < 900*time.Millisecond {
		t.Errorf("the lease expired after %s, before its TTL", d)
	}
	b := s.attach(r.ID, nil)
	b.waitFrame(wire.WSLeaseAcquired, "")
	// Kept alive by frames: it holds past the TTL, and until the end of
	// the run (the checks below take their time on a loaded machine).
	keepAlive := make(chan struct{})
	kept := make(chan struct{})
	var sent atomic.Int32
	go func() {
		defer close(kept)
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for {
			if err := b.send(wire.TermFrame{Type: wire.WSResize, Rows: 24, Cols: 80}); err != nil {
				return
			}
			sent.Add(1)
			select {
			case <-keepAlive:
				return
			case <-tick.C:
			}
		}
	}()
	stopKeepAlive := sync.OnceFunc(func() { close(keepAlive); <-kept })
	defer stopKeepAlive()
	// Seven frames 300 ms apart: well past the TTL.
	eventually.Wait(t, eventually.Long, "seven keep-alive frames", func() bool { return sent.Load() >= 7 })
	if b.has(wire.WSError, wire.CodeLeaseExpired) {
		t.Fatal("an active holder's lease expired")
	}
	ev := s.runEvents(r.ID, "run.lease_released")
	if len(ev) != 1 || !strings.Contains(string(ev[0].Payload), `"reason":"expired"`) {
		t.Fatalf("expiry journal: %+v", ev)
	}

	// The run ends: holder and waiting client both get run_ended.
	w := s.attach(r.ID, nil)
	w.waitFrame(wire.WSError, wire.CodeLeaseHeld)
	stopKeepAlive()
	s.must(202, "POST", "/api/v1/runs/"+r.ID+"/stop", nil, nil)
	b.waitFrame(wire.WSError, wire.CodeRunEnded)
	w.waitFrame(wire.WSError, wire.CodeRunEnded)
	b.waitClosed()
	w.waitClosed()
	// An ended run cannot be attached: run_ended, then the close.
	late := s.attach(r.ID, nil)
	late.waitFrame(wire.WSError, wire.CodeRunEnded)
	late.waitClosed()
}

// Hostile clients do not disturb anyone else: malformed frames are
// answered and dropped, a frame over 1 MiB closes only its own socket,
// and a holder flooding input leaves the other runs' viewers, keys and
// uplink alone.
func TestAttachHostileClients(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	_, werr := s.worker("term-hostile")
	task := s.task()
	sink := s.startRun(task, "stty -echo; cat > /dev/null")
	other := s.startRun(task, ticker)
	echo := s.startRun(task, readEcho)

	// A viewer of another run, counting its snapshots.
	viewer := s.mustWS(other.ID, "pane", nil)
	type snap struct {
		seq int64
		at  time.Time
	}
	snaps := make(chan snap, 1000)
	go func() {
		for {
			_, b, err := viewer.Read(t.Context())
			if err != nil {
				close(snaps)
				return
			}
			var p wire.PaneSnapshot
			_ = json.Unmarshal(b, &p)
			snaps <- snap{p.Seq, time.Now()}
		}
	}()

	// Malformed frames: an error each, the socket and lease stay.
	m := s.attach(echo.ID, nil)
	m.waitFrame(wire.WSLeaseAcquired, "")
	for _, raw := range []string{`not json`, `{}`, `{"type":"nope"}`, `{"type":"input","bogus":1}`, `{"type":"resize","rows":0,"cols":5}`,
		`{"type":"resize","rows":5000,"cols":80}`, `[1]`, `{"type":"input","bytes":"!!notbase64"}`} {
		if err := m.sendRaw([]byte(raw)); err != nil {
			t.Fatal(err)
		}
	}
	m.wait(eventually.Medium, "eight malformed_frame errors", func() bool {
		n := 0
		for _, f := range m.frames {
			if f.Code == wire.CodeMalformedFrame {
				n++
			}
		}
		return n == 8
	})
	m.input("still-here\r")
	m.waitOutput("got:still-here")

	// Flood: 8 MiB of input as fast as the socket takes it.
	f := s.attach(sink.ID, nil)
	f.waitFrame(wire.WSLeaseAcquired, "")
	floodDone := make(chan error, 1)
	var chunks atomic.Int64
	go func() {
		chunk := bytes.Repeat([]byte("flood "), 64<<10/6)
		for sent := 0; sent < 8<<20; sent += len(chunk) {
			if err := f.send(wire.TermFrame{Type: wire.WSInput, Bytes: chunk}); err != nil {
				floodDone <- err
				return
			}
			chunks.Add(1)
		}
		floodDone <- nil
	}()
	// Meanwhile (the flood under way, 4 of its 128 chunks in): keys to
	// another run are delivered and observed, the other run's viewer
	// keeps getting every change.
	eventually.Wait(t, eventually.Long, "the flood under way", func() bool { return chunks.Load() >= 4 })
	var res wire.KeysResult
	s.must(202, "POST", "/api/v1/runs/"+echo.ID+"/keys", map[string]any{"keys": []map[string]string{{"text": "during-flood"}, {"key": "Enter"}}}, &res)
	if res.Delivery != "observed" {
		t.Errorf("keys during a flood on another run: %s", res.Delivery)
	}
	s.waitPane(echo.ID, "got:during-flood")
	var seen []snap
	deadline := time.After(3 * time.Second)
collect:
	for {
		select {
		case sn, ok := <-snaps:
			if !ok {
				t.Fatal("the other run's viewer was closed")
			}
			seen = append(seen, sn)
		case <-deadline:
			break collect
		}
	}
	for i := 2; i < len(seen); i++ {
		if seen[i].seq != seen[i-1].seq+1 {
			t.Errorf("the other run's viewer skipped from %d to %d during the flood", seen[i-1].seq, seen[i].seq)
		}
		if gap := seen[i].at.Sub(seen[i-1].at); gap > 1500*time.Millisecond {
			t.Errorf("the other run's viewer waited %s between changes during the flood", gap)
		}
	}
	if len(seen) < 5 {
		t.Errorf("the other run's viewer got %d changes in 3s during the flood", len(seen))
	}

	// A frame over 1 MiB closes that socket (1009), nobody else's.
	big := s.attach(echo.ID, nil)
	big.waitFrame(wire.WSError, wire.CodeLeaseHeld)
	payload, _ := json.Marshal(wire.TermFrame{Type: wire.WSInput, Bytes: bytes.Repeat([]byte("x"), 1<<20)})
	_ = big.sendRaw(payload)
	if err := big.waitClosed(); websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Errorf("a frame over 1 MiB closed the socket with %v, want 1009", err)
	}
	m.input("after-big\r")
	m.waitOutput("got:after-big")

	select {
	case err := <-floodDone:
		t.Logf("flood writer finished: %v", err)
	default:
		t.Log("flood writer still held back by the server (input is paced)")
	}
	f.c.CloseNow()
	if strings.Contains(werr.String(), "uplink down") {
		t.Errorf("the worker's uplink dropped during the test:\n%s", tail(werr.String(), 2000))
	}
}

// A paste goes in as a bracketed paste where the pane asked for it,
// literally elsewhere; a text is typed, never bracketed; and the answer
// says whether the pane changed.
func TestKeysDeliveryBracketedPaste(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.worker("term-keys")
	task := s.task()
	paste := s.startRun(task, `printf '\033[?2004h'; exec cat -v`)
	plain := s.startRun(task, `exec cat -v`)
	silent := s.startRun(task, `stty -echo; exec cat > /dev/null`)
	send := func(r wire.Run, keys ...map[string]string) string {
		t.Helper()
		var res wire.KeysResult
		s.must(202, "POST", "/api/v1/runs/"+r.ID+"/keys", map[string]any{"keys": keys}, &res)
		return res.Delivery
	}
	s.waitPane(paste.ID, "")
	if d := send(paste, map[string]string{"paste": "the prompt"}, map[string]string{"key": "Enter"}); d != "observed" {
		t.Errorf("bracketed pane: delivery %s", d)
	}
	s.waitPane(paste.ID, "^[[200~the prompt^[[201~")
	if d := send(paste, map[string]string{"text": "typed"}, map[string]string{"key": "Enter"}); d != "observed" {
		t.Errorf("bracketed pane, typed: delivery %s", d)
	}
	if p := s.waitPane(paste.ID, "typed"); strings.Contains(p.Capture, "~typed") {
		t.Errorf("a typed text was bracketed:\n%s", p.Capture)
	}
	if d := send(plain, map[string]string{"paste": "the prompt"}, map[string]string{"key": "Enter"}); d != "observed" {
		t.Errorf("plain pane: delivery %s", d)
	}
	if p := s.waitPane(plain.ID, "the prompt"); strings.Contains(p.Capture, "200~") {
		t.Errorf("a pane without bracketed-paste mode got the brackets:\n%s", p.Capture)
	}
	if d := send(silent, map[string]string{"text": "the prompt"}, map[string]string{"key": "Enter"}); d != "unconfirmed" {
		t.Errorf("a pane that does not change: delivery %s", d)
	}
}
