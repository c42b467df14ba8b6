package loadtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"pam/internal/embeddb"
	"pam/internal/procfs"
)

// measured is what the load phase observed.
type measured struct {
	dispatch []time.Duration // probe runs: POST /runs → run_dispatch
	gen      *generator
	window   time.Duration // how long the generator ran

	cpu cpuDelta
	// The largest resident sets sampled every 500 ms, and how many samples.
	serveRSS, workerRSS, sessRSS int64
	rssSamples                   int
	serveEndRSS, serveHWM        int64
	err                          error
}

// cpuTimes are the CPU times, at one moment, of the processes that do
// the work.
type cpuTimes struct {
	serve, worker, workerChildren, sess, postgres, self time.Duration
}

// cpuDelta is CPU time used over a window, per process.
type cpuDelta struct {
	cpuTimes
	window time.Duration
}

func (l *load) cpuNow(ctx context.Context) cpuTimes {
	var c cpuTimes
	if st, ok := procfs.ReadStat(l.serve.PID()); ok {
		c.serve = st.CPU
	}
	if st, ok := procfs.ReadStat(l.worker.PID()); ok {
		c.worker, c.workerChildren = st.CPU, st.Children
	}
	for _, p := range l.sess.pids(ctx) {
		if st, ok := procfs.ReadStat(p); ok {
			c.sess += st.CPU
		}
	}
	c.postgres = procfs.GroupCPU(embeddb.RunningPID(filepath.Join(l.dir, "serve", "postgres")))
	if st, ok := procfs.ReadStat(os.Getpid()); ok {
		c.self = st.CPU
	}
	return c
}

// measureLoad runs the load for its duration: the generator's events, the
// probe's dispatches at their rate, and a sampler of memory; the
// subscribers and viewers already run on loadCtx.
func (l *load) measureLoad(ctx, loadCtx context.Context) measured {
	o := l.o
	m := measured{gen: &generator{api: l.api, items: l.items, rate: o.EventRate}}
	c0, t0 := l.cpuNow(ctx), time.Now()

	var wg sync.WaitGroup
	wg.Go(func() { m.window = m.gen.run(loadCtx, o.Duration) })

	done := make(chan struct{})
	var samplerDone sync.WaitGroup
	samplerDone.Go(func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			m.serveRSS = max(m.serveRSS, rssBytes(l.serve.PID()))
			m.workerRSS = max(m.workerRSS, rssBytes(l.worker.PID()))
			m.sessRSS = max(m.sessRSS, l.sess.rss(ctx))
			m.rssSamples++
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})

	interval := time.Second / time.Duration(o.DispatchRate)
	end := t0.Add(o.Duration)
	for next := t0; time.Now().Before(end); next = next.Add(interval) {
		if w := time.Until(next); w > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(w):
			}
		}
		if ctx.Err() != nil {
			m.err = ctx.Err()
			break
		}
		d, err := l.probe.cycle(ctx)
		if err != nil {
			m.err = fmt.Errorf("dispatch under load: %w", err)
			break
		}
		m.dispatch = append(m.dispatch, d)
		if behind := time.Since(next); behind > time.Second {
			next = time.Now() // the probe cannot keep the rate: no burst after
		}
	}
	wg.Wait()
	close(done)
	samplerDone.Wait()
	c1 := l.cpuNow(ctx)
	m.cpu = cpuDelta{window: time.Since(t0), cpuTimes: cpuTimes{
		serve: c1.serve - c0.serve, worker: c1.worker - c0.worker, workerChildren: c1.workerChildren - c0.workerChildren,
		sess: c1.sess - c0.sess, postgres: c1.postgres - c0.postgres, self: c1.self - c0.self}}
	m.serveEndRSS = rssBytes(l.serve.PID())
	m.serveHWM = procfs.StatusBytes(l.serve.PID(), "VmHWM:")
	if m.err == nil && m.gen.sent.Load() == 0 {
		m.err = fmt.Errorf("the event generator wrote nothing: %v", m.gen.firstErr)
	}
	return m
}
