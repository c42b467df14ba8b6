package server

import (
	"context"
	"encoding/json"
	"time"

	"github.com/coder/websocket"

	"pam/internal/fleet"
	"pam/internal/wire"
)

// The attach socket's two byte paths. Input: the reader sends it to the
// relay itself when nothing waits before it and the pace allows (a
// keystroke goes at once, with no goroutine between); otherwise it
// queues it and the pump paces it onto the uplink. Output: the relay's
// sink appends it on the uplink's reader (never blocking), the writer
// sends it at once, or, while output keeps coming, coalesces it into at
// most one data frame per floodInterval.

// queueInput hands input to the relay: directly when it can go now
// (sendNow), else to the pump, waiting while too much is pending.
func (c *attachClient) queueInput(b []byte) bool {
	for {
		c.mu.Lock()
		if c.sendNow(b) {
			c.mu.Unlock()
			return true
		}
		if len(c.in) < maxPendingInput {
			c.in = append(c.in, b...)
			c.mu.Unlock()
			signal(c.inReady)
			return true
		}
		c.mu.Unlock()
		select {
		case <-c.drained:
		case <-c.done:
			return false
		}
	}
}

// sendNow sends b as one attach_input frame if nothing is queued or held
// by the pump before it, it fits one chunk, the pace has room for it and
// the host's uplink is not busy; it reports whether it did. The caller
// holds mu. Sending never blocks (the route's queue is a channel tried
// without waiting).
func (c *attachClient) sendNow(b []byte) bool {
	if c.route == nil || c.pumping || len(c.in) > 0 || len(b) > inputChunk || c.route.Backlog() > uplinkSoftBacklog {
		return false
	}
	if c.refill(time.Now()); c.tokens < float64(len(b)) {
		return false
	}
	if c.route.Input(b) != nil {
		return false // the pump retries, or finds the uplink gone
	}
	c.tokens -= float64(len(b))
	return true
}

// refill adds the tokens earned since the last refill (mu held).
func (c *attachClient) refill(now time.Time) {
	c.tokens = min(float64(inputRate), c.tokens+now.Sub(c.refilled).Seconds()*inputRate)
	c.refilled = now
}

// pump sends queued input to the relay as attach_input frames, paced to
// inputRate and held back while the host's uplink is busy.
func (c *attachClient) pump(route *fleet.AttachRoute, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	defer func() {
		c.mu.Lock()
		c.pumping = false
		c.mu.Unlock()
	}()
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-stop:
		case <-c.done:
		}
		return false
	}
	for {
		select {
		case <-stop:
			return
		case <-c.done:
			return
		case <-c.inReady:
		}
		for {
			c.mu.Lock()
			n := min(len(c.in), inputChunk)
			if n == 0 {
				c.pumping = false
				c.mu.Unlock()
				break
			}
			chunk := append([]byte(nil), c.in[:n]...)
			c.in = c.in[n:]
			if len(c.in) == 0 {
				c.in = nil
			}
			c.pumping = true
			// Tokens may go below zero: the wait pays the debt back.
			c.refill(time.Now())
			c.tokens -= float64(n)
			short := -c.tokens
			c.mu.Unlock()
			signal(c.drained)
			if short > 0 && !wait(time.Duration(short/inputRate*float64(time.Second))) {
				return
			}
			for {
				if route.Backlog() <= uplinkSoftBacklog {
					err := route.Input(chunk)
					if err == nil {
						break
					}
					if err != fleet.ErrUplinkBusy {
						return // the uplink is gone; the route's sink hears of it
					}
				}
				if !wait(5 * time.Millisecond) {
					return
				}
			}
		}
	}
}

// sink receives the relay's frames on the uplink's reader: it appends
// output and never blocks.
func (c *attachClient) sink(attachID string) func(wire.Frame) {
	return func(fr wire.Frame) {
		c.mu.Lock()
		if c.attachID != attachID {
			c.mu.Unlock()
			return // a relay this client has let go
		}
		switch fr := fr.(type) {
		case wire.AttachOutputFrame:
			if len(c.out)+len(fr.Bytes) > maxPendingOutput {
				c.mu.Unlock()
				c.end(wire.CodeTooSlow, "the client fell too far behind its terminal's output")
				return
			}
			c.out = append(c.out, fr.Bytes...)
			c.mu.Unlock()
			signal(c.outReady)
		case wire.AttachClosedFrame:
			c.mu.Unlock()
			// Off the uplink's reader (it asks the database), but counted:
			// Shutdown waits for it. Refused, the socket is ending anyway.
			c.t.s.bg.goFunc(func() { c.relayEnded(fr.Reason) })
		default:
			c.mu.Unlock()
		}
	}
}

// send queues a frame for the writer; a client that lets control frames
// pile up loses the excess.
func (c *attachClient) send(f wire.TermFrame) {
	b, err := json.Marshal(f)
	if err != nil {
		return
	}
	select {
	case c.ctrl <- b:
	default:
	}
}

// end ends the socket once: with code, a final error frame is written
// before the close. It never blocks.
func (c *attachClient) end(code, message string) {
	c.endOnce.Do(func() {
		c.endCode = code
		if code != "" && code != codeStopping {
			c.final, _ = json.Marshal(wire.TermFrame{Type: wire.WSError, Code: code, Message: message})
		}
		close(c.done)
	})
}

// writer is the socket's only writer: control frames as they come,
// output as the pacer allows (at once while the client has credit, at
// most 10 data frames in any second), and on the end the final frame and
// the close.
func (c *attachClient) writer() {
	ctx := context.Background()
	pace := &c.pace
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	armed := false
	// Only a data frame written counts: a wake-up whose output an earlier
	// frame already took (two relay frames, one data frame) sends nothing
	// and must not use up the pace.
	flush := func(held bool) {
		if at := time.Now(); c.flushOutput(ctx) {
			pace.sent(at, held)
		}
	}
	for {
		select {
		case <-c.done:
			c.finish(ctx)
			return
		case b := <-c.ctrl:
			if writeFrame(ctx, c.ws, b) != nil {
				c.end("", "")
			}
		case <-c.outReady:
			if armed {
				continue // the timer flushes it
			}
			if !c.outputPending() {
				continue // an earlier frame took it: no timer for nothing
			}
			if wait := pace.wait(time.Now()); wait > 0 {
				timer.Reset(wait)
				armed = true
				continue
			}
			flush(false)
		case <-timer.C:
			armed = false
			if wait := pace.wait(time.Now()); wait > 0 {
				timer.Reset(wait)
				armed = true
				continue
			}
			flush(true)
		}
	}
}

// framePacer spaces an attach client's data frames by two rules:
//
//   - never more than framesPerSecond in any second, the contract's bound
//     (a ring of the last sends);
//   - a credit of burstFrames frames, one earned back per floodInterval:
//     a frame goes at once while there is credit. At a typist's pace
//     nothing waits, not an echo right after a status-line redraw nor the
//     second read of one echo; a burst beyond it is spaced floodInterval
//     apart.
//
// A frame that had to wait leaves no credit: a flood (output always
// pending) is drawn one frame per floodInterval, evenly. Credit earned
// while the second's bound held frames back would otherwise go in a
// burst, and the bound would then hold the frames after it as long.
type framePacer struct {
	times [framesPerSecond]time.Time // the last sends, a ring
	next  int                        // where the next send is written: the oldest
	// paid is when the frames sent so far are paid for at one per
	// floodInterval; a frame may go once it is no more than
	// (burstFrames-1) intervals ahead.
	paid time.Time
}

const (
	// framesPerSecond bounds the data frames of one attach client in any
	// second.
	framesPerSecond = 10
	// burstFrames is how many frames may go at once after a quiet spell.
	burstFrames = 2
)

// wait is how long a frame ready at now must wait.
func (p *framePacer) wait(now time.Time) time.Duration {
	w := p.paid.Add(-(burstFrames - 1) * floodInterval).Sub(now)
	if oldest := p.times[p.next]; !oldest.IsZero() {
		w = max(w, oldest.Add(time.Second).Sub(now))
	}
	return max(0, w)
}

// sent records a frame sent at now; held says it had waited (wait was
// positive when its output came).
func (p *framePacer) sent(now time.Time, held bool) {
	p.times[p.next] = now
	p.next = (p.next + 1) % framesPerSecond
	switch {
	case held:
		p.paid = now.Add(burstFrames * floodInterval) // no credit left
	case p.paid.Before(now):
		p.paid = now.Add(floodInterval)
	default:
		p.paid = p.paid.Add(floodInterval)
	}
}

// outputPending reports whether output waits for a data frame.
func (c *attachClient) outputPending() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.out) > 0
}

// flushOutput writes one data frame of pending output, and reports
// whether it did; what is left is signalled for the next interval.
// Control frames queued before it go first, so lease_acquired always
// precedes the relay's output.
func (c *attachClient) flushOutput(ctx context.Context) bool {
	for pending := true; pending; {
		select {
		case b := <-c.ctrl:
			if writeFrame(ctx, c.ws, b) != nil {
				c.end("", "")
				return false
			}
		default:
			pending = false
		}
	}
	c.mu.Lock()
	n := min(len(c.out), maxDataChunk)
	chunk := c.out[:n:n]
	c.out = c.out[n:]
	if len(c.out) == 0 {
		c.out = nil
	} else {
		signal(c.outReady)
	}
	c.mu.Unlock()
	if n == 0 {
		return false
	}
	b, _ := json.Marshal(wire.TermFrame{Type: wire.WSData, Bytes: chunk})
	if writeFrame(ctx, c.ws, b) != nil {
		c.end("", "")
	}
	return true
}

// finish writes what the end left to say and closes the socket.
func (c *attachClient) finish(ctx context.Context) {
	for {
		select {
		case b := <-c.ctrl:
			if writeFrame(ctx, c.ws, b) != nil {
				_ = c.ws.CloseNow()
				return
			}
			continue
		default:
		}
		break
	}
	switch {
	case c.endCode == codeStopping:
		_ = c.ws.Close(websocket.StatusGoingAway, "server shutting down")
	case c.final != nil:
		if writeFrame(ctx, c.ws, c.final) != nil {
			_ = c.ws.CloseNow()
			return
		}
		_ = c.ws.Close(websocket.StatusNormalClosure, c.endCode)
	default:
		_ = c.ws.Close(websocket.StatusNormalClosure, "")
	}
}
