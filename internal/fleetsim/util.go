package fleetsim

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"pam/internal/apiclient"
)

// countEvents pages through the journal after seq after and returns how
// many events it holds and the last one's seq.
func countEvents(ctx context.Context, op *apiclient.Client, after int64) (int, int64, error) {
	n := 0
	for {
		evs, err := op.ListEvents(ctx, after, "", 1000)
		if err != nil {
			return n, after, fmt.Errorf("read the journal: %w", err)
		}
		if len(evs) == 0 {
			return n, after, nil
		}
		n += len(evs)
		after = evs[len(evs)-1].Seq
	}
}

// parallel runs fn(i) for i in [0, n) on k goroutines; the first error
// stops the rest and is returned.
func parallel(ctx context.Context, k, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for range k {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return first
}

// waitFor polls cond every 50 ms until it holds, d passes or ctx ends;
// it returns cond's last count.
func waitFor(ctx context.Context, d time.Duration, cond func() (int, bool)) (int, error) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		n, done := cond()
		if done {
			return n, nil
		}
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case <-deadline.C:
			return n, fmt.Errorf("not within %s", d)
		case <-t.C:
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func percent(cpu, wall time.Duration) float64 {
	if wall <= 0 {
		return 0
	}
	return 100 * cpu.Seconds() / wall.Seconds()
}

// raiseFileLimit raises this process's soft limit of open files to the
// hard one and returns it: a simulated fleet holds a few descriptors per
// worker. Serve raises its own (the Go runtime does at start).
func raiseFileLimit() (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			return 0, err
		}
	}
	return l.Cur, nil
}

// tail is the last n lines of a file, for an error message.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	out := ""
	for _, l := range lines {
		out += "  " + l + "\n"
	}
	return out
}

// Percentile is the q-quantile (0 < q ≤ 1) of sorted durations, by the
// nearest rank; 0 for none.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
