package server

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestFramePacer: whatever the arrival of output, an attach client never
// gets more than 10 data frames in any second; a frame after a quiet
// spell goes at once, even right after another (a status-line redraw,
// then an echo); a flood is spaced by floodInterval, also right after a
// frame that waited.
func TestFramePacer(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var p framePacer
		now := start
		var sent []time.Time
		for range 300 {
			now = now.Add(time.Duration(rng.IntN(150)) * time.Millisecond)
			w := p.wait(now)
			if w < 0 {
				t.Fatalf("seed %d: a negative wait", seed)
			}
			at := now.Add(w)
			p.sent(at, w > 0)
			sent = append(sent, at)
			now = at
		}
		for i := range sent {
			j := i
			for j < len(sent) && sent[j].Sub(sent[i]) < time.Second {
				j++
			}
			if j-i > framesPerSecond {
				t.Fatalf("seed %d: %d frames within a second from %s", seed, j-i, sent[i].Sub(start))
			}
		}
	}

	var p framePacer
	now := start
	if w := p.wait(now); w != 0 {
		t.Fatalf("first frame waits %s", w)
	}
	p.sent(now, false)
	now = now.Add(20 * time.Millisecond)
	if w := p.wait(now); w != 0 {
		t.Fatalf("an echo 20 ms after a redraw waits %s", w)
	}
	// A flood: after the burst, one per floodInterval.
	p.sent(now, false)
	now = now.Add(time.Millisecond)
	w := p.wait(now)
	if w <= 0 || w > floodInterval {
		t.Fatalf("a flood's next frame waits %s, want (0, %s]", w, floodInterval)
	}
	now = now.Add(w)
	p.sent(now, true)
	now = now.Add(time.Millisecond)
	if w := p.wait(now); w != floodInterval-time.Millisecond {
		t.Fatalf("after a frame that waited, the next waits %s, want %s", w, floodInterval-time.Millisecond)
	}
}

// TestAttachRoundTripPacerTyping (issue 13, the attach round trip's
// p99): at a typist's pace every echo goes at once, also when it comes
// 150 ms after a fresh line that came as two frames (the terminal's echo
// of the return, then the program's line), 90 ms after a status-line
// redraw, or right after a second frame of the same key; and a flood,
// the output pending all the time, still gets a frame every
// floodInterval once its first second is over (at most 2 intervals apart
// before), never more than framesPerSecond in a second.
func TestAttachRoundTripPacerTyping(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	var p framePacer
	now := start
	frame := func(what string) {
		t.Helper()
		if w := p.wait(now); w != 0 {
			t.Fatalf("at %s, %s waits %s", now.Sub(start), what, w)
		}
		p.sent(now, false)
	}
	// BenchmarkAttachRoundTrip's relay side: a key every 200 ms.
	for i := range 200 {
		switch {
		case i%8 == 7:
			frame("the echo of a return")
			now = now.Add(100 * time.Microsecond)
			frame("the program's line right after it")
			now = now.Add(150 * time.Millisecond)
			frame("the echo after the fresh line")
		case i%8 == 3:
			now = now.Add(110 * time.Millisecond)
			frame("a status-line redraw")
			now = now.Add(90 * time.Millisecond)
			frame("the echo after the redraw")
		case i%8 == 5:
			frame("an echo")
			now = now.Add(2 * time.Millisecond)
			frame("a second read of the same echo")
		default:
			frame("an echo")
		}
		now = now.Add(200 * time.Millisecond)
	}

	// A flood: output always pending.
	p = framePacer{}
	now = start.Add(time.Hour)
	floodStart := now
	var sent []time.Time
	for now.Sub(floodStart) < 10*time.Second {
		w := p.wait(now)
		now = now.Add(w)
		p.sent(now, w > 0)
		sent = append(sent, now)
		now = now.Add(time.Millisecond) // the next output
	}
	for i := 1; i < len(sent); i++ {
		gap := sent[i].Sub(sent[i-1])
		limit := floodInterval + time.Millisecond
		if sent[i].Sub(floodStart) <= time.Second {
			limit = 2*floodInterval + time.Millisecond
		}
		if gap > limit {
			t.Errorf("a flood's frame %d came %s after the one before, at %s", i, gap, sent[i].Sub(floodStart))
		}
	}
	for i := range sent {
		j := i
		for j < len(sent) && sent[j].Sub(sent[i]) < time.Second {
			j++
		}
		if j-i > framesPerSecond {
			t.Fatalf("a flood: %d frames within a second from %s", j-i, sent[i].Sub(floodStart))
		}
	}
}
