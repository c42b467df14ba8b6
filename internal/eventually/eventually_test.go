package eventually

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestWithin(t *testing.T) {
	var n atomic.Int32
	if !Within(time.Second, func() bool { return n.Add(1) >= 3 }) {
		t.Fatal("a condition that becomes true was reported false")
	}
	start := time.Now()
	if Within(50*time.Millisecond, func() bool { return false }) {
		t.Fatal("a condition that never holds was reported true")
	}
	if el := time.Since(start); el < 50*time.Millisecond || el > 2*time.Second {
		t.Fatalf("gave up after %s, want about 50ms", el)
	}
}
