package server

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestFramePacer: whatever the arrival of output, an attach client never
// gets more than 10 data frames in any second; a frame after a quiet
// spell goes at once, even right after another (a status-line redraw,
// then an echo); a flood is spaced by floodInterval.
func TestFramePacer(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var p framePacer
		now := start
		var sent []time.Time
		for range 300 {
			now = now.Add(time.Duration(rng.IntN(150)) * time.Millisecond)
			at := now.Add(p.wait(now))
			if at.Before(now) {
				t.Fatalf("seed %d: a negative wait", seed)
			}
			p.sent(at)
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
	p.sent(now)
	now = now.Add(20 * time.Millisecond)
	if w := p.wait(now); w != 0 {
		t.Fatalf("an echo 20 ms after a redraw waits %s", w)
	}
	// A flood: after the quiet frames, one per floodInterval.
	for range quietFrames {
		p.sent(now)
		now = now.Add(time.Millisecond)
	}
	if w := p.wait(now); w <= 0 || w > floodInterval {
		t.Fatalf("a flood's next frame waits %s, want (0, %s]", w, floodInterval)
	}
}
