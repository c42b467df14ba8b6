package loadtest

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"pam/internal/benchtable"
)

// rows turns what was measured into the figures of the table (docs/bench.md).
func (l *load) rows(idle []time.Duration, m measured, subs []*subscriber, viewers []*viewer, v verdict, mem sessionMemory) []benchtable.Row {
	t := newTable(l.o)
	l.dispatchRows(t, idle, m)
	l.sseRows(t, m, subs, v)
	l.viewerRows(t, m, viewers)
	l.memoryRows(t, len(idle), m, mem)
	l.cpuRows(t, m.cpu)
	return t.rows
}

// table collects the rows. Only a load at least the goals' size (full)
// has its rows judged against the goals; the others say why not.
type table struct {
	full      bool
	load      string // the load in words, for the notes
	notJudged string // the note of a row not judged; "" when full
	rows      []benchtable.Row
}

func newTable(o Options) *table {
	t := &table{full: o.Runs >= goalRuns && o.Subscribers >= goalSubscribers && o.Viewers >= goalViewers &&
		o.EventRate >= goalEventRate && o.CachedRuns >= goalCachedRuns,
		load: fmt.Sprintf("%d live runs, %d SSE subscribers, %d pane viewers, %d events/s", o.Runs, o.Subscribers, o.Viewers, o.EventRate)}
	if !t.full {
		t.notJudged = fmt.Sprintf("not judged: a smaller load than the goal's (%d runs, %d subscribers, %d viewers, %d events/s, %d cached runs)",
			goalRuns, goalSubscribers, goalViewers, goalEventRate, goalCachedRuns)
	}
	return t
}

// add appends r, its value made finite for JSON.
func (t *table) add(r benchtable.Row) {
	r.Value = benchtable.Finite(r.Value)
	t.rows = append(t.rows, r)
}

// judge is a row's verdict: ok, when the load is full enough to judge.
func (t *table) judge(ok bool) *bool { return benchtable.Judge(t.full, ok) }

// dispatchRows: dispatch latency under load, next to idle.
func (l *load) dispatchRows(t *table, idle []time.Duration, m measured) {
	dp50, dp99 := ms(pct(m.dispatch, 0.50)), ms(pct(m.dispatch, 0.99))
	note := join(fmt.Sprintf("POST /runs → run_dispatch at a probe host, %d/s during %s of load (%s); idle: %d runs before the load",
		l.o.DispatchRate, m.cpu.window.Round(time.Second), t.load, len(idle)), t.notJudged)
	t.add(benchtable.Row{Figure: "dispatch latency under load", Stat: "p50", Value: dp50, Unit: "ms",
		Baseline: benchtable.Ptr(ms(pct(idle, 0.50))), BaselineName: "idle", Goal: "≤ 5 ms", Met: t.judge(dp50 <= 5),
		Samples: int64(len(m.dispatch)), Note: note})
	t.add(benchtable.Row{Figure: "dispatch latency under load", Stat: "p99", Value: dp99, Unit: "ms",
		Baseline: benchtable.Ptr(ms(pct(idle, 0.99))), BaselineName: "idle", Goal: "≤ 20 ms", Met: t.judge(dp99 <= 20),
		Samples: int64(len(m.dispatch))})
}

// sseRows: SSE delivery latency, the rate of events reached, and the
// check that every subscriber saw every event exactly once, in order.
func (l *load) sseRows(t *table, m measured, subs []*subscriber, v verdict) {
	var lat []int32
	for _, s := range subs {
		lat = append(lat, s.lat...)
	}
	sp99 := pctMS(lat, 0.99)
	sent, failed, late := m.gen.sent.Load(), m.gen.failed.Load(), m.gen.late.Load()
	t.add(benchtable.Row{Figure: "SSE delivery under load", Stat: "p99", Value: sp99, Unit: "ms", Goal: "< 50 ms", Met: t.judge(sp99 < 50),
		Samples: int64(len(lat)), Note: join(fmt.Sprintf("from just before the PATCH that writes an event to its arrival at each of %d subscribers; p50 %s ms; the PATCH alone: p50 %s ms, p99 %s ms",
			len(subs), benchtable.Number(pctMS(lat, 0.5)), benchtable.Number(ms(pct(m.gen.write, 0.5))), benchtable.Number(ms(pct(m.gen.write, 0.99)))), t.notJudged)})
	rate := float64(sent) / m.window.Seconds()
	t.add(benchtable.Row{Figure: "SSE events written under load", Stat: "events/s", Value: rate, Unit: "events/s",
		Goal: fmt.Sprintf("≥ %s events/s", benchtable.Number(goalEventRate)),
		Met:  t.judge(failed == 0 && late == 0 && rate >= 0.99*goalEventRate), Samples: sent,
		Note: join(fmt.Sprintf("PATCH /work-items/{id} from %d senders, target %d/s: %d written, %d failed, %d skipped behind schedule", len(l.items), l.o.EventRate, sent, failed, late), firstErr(m.gen))})
	checked := fmt.Sprintf("%d subscribers × %d journal events, %d reconnects", len(subs), v.events, v.reconnects)
	t.add(benchtable.Row{Figure: "SSE events lost", Value: float64(v.lost), Unit: "events", Goal: "0", Met: benchtable.Ptr(v.lost == 0),
		Samples: int64(v.events * len(subs)), Note: join(checked, v.worst)})
	t.add(benchtable.Row{Figure: "SSE events duplicated or out of order", Value: float64(v.duplicate + v.outOfOrder + v.extra), Unit: "events",
		Goal: "0", Met: benchtable.Ptr(v.duplicate+v.outOfOrder+v.extra == 0), Samples: int64(v.events * len(subs)),
		Note: fmt.Sprintf("%d duplicate, %d out of order, %d not in the journal", v.duplicate, v.outOfOrder, v.extra)})
}

// viewerRows: how fast pane snapshots reach their viewers, if any watched.
func (l *load) viewerRows(t *table, m measured, viewers []*viewer) {
	if len(viewers) == 0 {
		return
	}
	var plat []int32
	var frames int64
	silent := 0
	for _, vw := range viewers {
		plat = append(plat, vw.lat...)
		frames += vw.frames
		if vw.frames == 0 {
			silent++
		}
	}
	t.add(benchtable.Row{Figure: "pane snapshot to viewer under load", Stat: "p99", Value: pctMS(plat, 0.99), Unit: "ms", Samples: int64(len(plat)),
		Note: fmt.Sprintf("from the worker's capture to each of %d viewers on %d runs: %d snapshots (%s/s), p50 %s ms, %d viewers got none",
			len(viewers), min(len(viewers), len(l.live)), frames, benchtable.Number(float64(frames)/m.cpu.window.Seconds()), benchtable.Number(pctMS(plat, 0.5)), silent)})
}

// memoryRows: serve's peak under load, the worker's and its sessions' at
// the goal's number of sessions and, when more ran, under the full load.
func (l *load) memoryRows(t *table, idleRuns int, m measured, mem sessionMemory) {
	o := l.o
	t.add(benchtable.Row{Figure: "serve RSS", Stat: "peak under load", Value: mib(m.serveRSS), Unit: "MiB", Goal: "≤ 64 MiB",
		Met: t.judge(mib(m.serveRSS) <= 64), Samples: int64(m.rssSamples),
		Note: join(fmt.Sprintf("%d runs through serve's pane cache (1,000 kept) before and during the load, each a full 220×50 colour screen, plus %s; at the end %s MiB, VmHWM %s MiB",
			idleRuns+len(m.dispatch)+o.Runs, t.load, benchtable.Number(mib(m.serveEndRSS)), benchtable.Number(mib(m.serveHWM))), t.notJudged)})
	sessName := l.sessHolder() + " RSS"
	t.add(benchtable.Row{Figure: "worker RSS", Stat: fmt.Sprintf("%d sessions", mem.sessions), Value: mib(mem.worker), Unit: "MiB", Goal: "≤ 64 MiB",
		Met:  benchtable.Judge(mem.sessions >= goalSessions, mib(mem.worker) <= 64),
		Note: "the worker process alone, the largest of 12 reads over 3 s once every run ran; " + sessName + ": its own row"})
	t.add(benchtable.Row{Figure: sessName, Stat: fmt.Sprintf("%d sessions", mem.sessions), Value: mib(mem.sess), Unit: "MiB"})
	if o.Runs > mem.sessions {
		t.add(benchtable.Row{Figure: "worker RSS", Stat: fmt.Sprintf("%d sessions, under load", o.Runs), Value: mib(m.workerRSS), Unit: "MiB", Samples: int64(m.rssSamples)})
		t.add(benchtable.Row{Figure: sessName, Stat: fmt.Sprintf("%d sessions, under load", o.Runs), Value: mib(m.sessRSS), Unit: "MiB", Samples: int64(m.rssSamples)})
	}
}

// cpuRows: where the CPU went during the load, in % of one core.
func (l *load) cpuRows(t *table, c cpuDelta) {
	core := func(d time.Duration) float64 { return 100 * d.Seconds() / c.window.Seconds() }
	t.add(benchtable.Row{Figure: "CPU under load", Stat: "serve", Value: core(c.serve), Unit: "% core"})
	t.add(benchtable.Row{Figure: "CPU under load", Stat: "PostgreSQL", Value: core(c.postgres), Unit: "% core", Note: "the postmaster and its backends"})
	t.add(benchtable.Row{Figure: "CPU under load", Stat: "worker", Value: core(c.worker + c.workerChildren), Unit: "% core",
		Note: fmt.Sprintf("own %s, the processes it forked and reaped (tmux clients) %s", benchtable.Number(core(c.worker)), benchtable.Number(core(c.workerChildren)))})
	t.add(benchtable.Row{Figure: "CPU under load", Stat: l.sessHolder(), Value: core(c.sess), Unit: "% core"})
	t.add(benchtable.Row{Figure: "CPU under load", Stat: "load driver", Value: core(c.self), Unit: "% core",
		Note: "this process: the generator, the probe, every subscriber and viewer"})
}

// sessHolder names what holds the sessions under the executor.
func (l *load) sessHolder() string {
	if l.o.Executor == "pty" {
		return "PTY holders (all)"
	}
	return "tmux server"
}

// pct is the q-quantile of ds (nearest rank); 0 for none.
func pct(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[rank(len(s), q)]
}

// pctMS is the q-quantile of latencies in µs, in ms; 0 for none.
func pctMS(us []int32, q float64) float64 {
	if len(us) == 0 {
		return 0
	}
	s := slices.Clone(us)
	slices.Sort(s)
	return float64(s[rank(len(s), q)]) / 1000
}

// rank is the index of the q-quantile among n sorted values.
func rank(n int, q float64) int {
	return min(max(int(math.Ceil(q*float64(n)))-1, 0), n-1)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func join(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, "; ")
}

func firstErr(g *generator) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.firstErr == nil {
		return ""
	}
	return "first failure: " + g.firstErr.Error()
}
