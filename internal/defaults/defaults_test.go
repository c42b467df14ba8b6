package defaults

import (
	"testing"
	"time"
)

func TestDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 90 * time.Second: "90s", 60 * time.Second: "1m", 5 * time.Minute: "5m", 720 * time.Hour: "720h",
		time.Hour: "1h", 1500 * time.Millisecond: "1.5s",
	} {
		if got := Duration(d); got != want {
			t.Errorf("Duration(%v) = %q, want %q", d, got, want)
		}
		if back, err := time.ParseDuration(Duration(d)); err != nil || back != d {
			t.Errorf("%q does not parse back to %v: %v %v", Duration(d), d, back, err)
		}
	}
}
