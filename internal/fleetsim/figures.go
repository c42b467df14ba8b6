package fleetsim

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"pam/internal/benchtable"
)

// Figure is the name of every row a simulation reports; the stat tells
// the rows apart.
const Figure = "simulated fleet"

// Row is one figure as `pam-bench fleet --json` prints it: the row of
// `pam-bench load` too, so that the `make bench` table merges both with
// the Go benchmarks' figures.
type Row = benchtable.Row

// Rows turns a result into figure rows. Goals are the issue's: one serve
// holds the whole fleet at its heartbeat interval, dispatch spreads
// within 2× across equal hosts, the reconnect storm settles in under 60
// s, and no run is lost or run twice.
func (r *Result) Rows() []Row {
	b := &rowBuilder{r: r}
	r.heldRows(b)
	r.dispatchRows(b)
	r.resourceRows(b)
	r.outcomeRows(b)
	return b.rows
}

// rowBuilder collects the rows of a result: only those of the phases it
// reached.
type rowBuilder struct {
	r     *Result
	phase Phase // of the rows added next: none before it was reached
	rows  []Row
}

func (b *rowBuilder) add(stat string, v float64, unit string, f func(*Row)) {
	if b.r.Reached < b.phase {
		return
	}
	row := Row{Figure: Figure, Stat: stat, Value: round(v), Unit: unit}
	if f != nil {
		f(&row)
	}
	b.rows = append(b.rows, row)
}

// percentiles adds a p50 and a p99 row of sorted durations, in ms.
func (b *rowBuilder) percentiles(prefix string, sorted []time.Duration, note string) {
	for _, q := range []struct {
		stat string
		q    float64
	}{{prefix + " p50", 0.5}, {prefix + " p99", 0.99}} {
		b.add(q.stat, ms(Percentile(sorted, q.q)), "ms", func(x *Row) {
			x.Samples = int64(len(sorted))
			x.Note = note
		})
	}
}

// heldRows: the fleet held, and its heartbeats.
func (r *Result) heldRows(b *rowBuilder) {
	held := r.HostsConnected == r.Workers && r.Lost == 0 && r.Reached >= PhaseVerified
	// A hold shorter than two intervals sees too few beats per worker
	// for a rate: the figure is printed, not judged.
	judgeHB := r.Hold >= 2*r.HeartbeatInterval
	hbOK := !judgeHB || r.HeartbeatRate >= 0.9*r.HeartbeatOffered
	b.phase = PhaseStarted
	b.add("hosts held", float64(r.HostsConnected), "hosts", func(x *Row) {
		x.Goal = fmt.Sprintf("%d × %d runs at %s heartbeats", r.Workers, r.RunsPerWorker, dur(r.HeartbeatInterval))
		x.Met = benchtable.Ptr(held && hbOK)
		x.Samples = int64(r.Runs)
		x.Note = fmt.Sprintf("%d runs asked for; connected in %s, serve first start %s", r.Runs, secs(r.ConnectTime), secs(r.ServeStart))
	})
	b.phase = PhaseHeld
	b.add("heartbeats", r.HeartbeatRate, "heartbeats/s", func(x *Row) {
		x.Baseline, x.BaselineName = benchtable.Ptr(round(r.HeartbeatOffered)), "offered"
		x.Goal = "≥ 90 % of offered"
		if judgeHB {
			x.Met = benchtable.Ptr(hbOK)
		}
		x.Samples = int64(len(r.HeartbeatAck))
		x.Note = fmt.Sprintf("acked during a %s hold, every %s per worker", dur(r.Hold), dur(r.HeartbeatInterval))
	})
	b.percentiles("heartbeat ack", r.HeartbeatAck, "heartbeat sent → heartbeat_ack, during the hold")
}

// dispatchRows: how fast and how evenly the runs were placed.
func (r *Result) dispatchRows(b *rowBuilder) {
	b.phase = PhaseDispatched
	b.add("dispatch rate", r.DispatchRate, "runs/s", func(x *Row) {
		x.Baseline, x.BaselineName = benchtable.Ptr(round(r.CreateRate)), "POST /runs rate"
		x.Samples = int64(r.Runs)
		x.Note = "first POST /runs of a batch → started of its last run (half the runs, then the rest)"
	})
	b.add("journal writes, dispatching", float64(r.DispatchEvents)/max(1, float64(r.Runs)), "events/run", func(x *Row) {
		x.Samples = int64(r.DispatchEvents)
		x.Note = fmt.Sprintf("%d events journaled while the runs were created, placed and started", r.DispatchEvents)
	})
	b.percentiles("dispatch", r.DispatchLatency, "POST /runs → run_dispatch at the worker, while every run is being created")
	spread := 0.0
	if r.SpreadMin > 0 {
		spread = float64(r.SpreadMax) / float64(r.SpreadMin)
	}
	b.add("dispatch spread", spread, "×", func(x *Row) {
		// Half full is a run per host at least only from 2 runs per
		// worker up; below that the ratio says nothing.
		x.Goal = "≤ 2×"
		if r.RunsPerWorker >= 2 {
			x.Met = benchtable.Ptr(r.SpreadMin > 0 && spread <= 2)
		}
		x.Samples = int64(r.Workers)
		x.Note = fmt.Sprintf("most / fewest runs on one equal host, fleet half full: %d / %d", r.SpreadMax, r.SpreadMin)
	})
	b.add("serve CPU, dispatching", r.ServeCPUDispatch, "core-%", func(x *Row) {
		x.Note = fmt.Sprintf("database %.0f core-%%", r.DBCPUDispatch)
	})
}

// resourceRows: what serve and its database took.
func (r *Result) resourceRows(b *rowBuilder) {
	b.phase = PhaseHeld
	b.add("serve CPU, holding", r.ServeCPUHold, "core-%", func(x *Row) {
		x.Note = fmt.Sprintf("database %.1f core-%%", r.DBCPUHold)
	})
	b.phase = PhaseStarted
	b.add("serve RSS, peak", mib(r.ServeRSSPeak), "MiB", func(x *Row) {
		x.Note = "sampled every 250 ms"
		if r.Reached >= PhaseHeld {
			x.Note = fmt.Sprintf("%.0f MiB at the end of the hold (Go heap %.0f MiB, stacks %.0f MiB, %.0f goroutines, %.0f uplinks); ",
				mib(r.ServeRSSHold), r.Runtime.HeapInuse/(1<<20), r.Runtime.StackInuse/(1<<20), r.Runtime.Goroutines, r.Runtime.Uplinks) + x.Note
		}
	})
	b.add("database connections", float64(r.DBBackendsMax), "connections", func(x *Row) {
		x.Note = "most client backends of the embedded PostgreSQL seen"
	})
}

// outcomeRows: the reconnect storm, and whether every run ran once.
func (r *Result) outcomeRows(b *rowBuilder) {
	b.phase = PhaseRestarted
	if r.Restarted {
		b.add("reconnect storm settle", r.Settle.Seconds(), "s", func(x *Row) {
			x.Baseline, x.BaselineName = benchtable.Ptr(round(r.ServeRestart.Seconds())), "serve restart alone"
			x.Goal, x.Met = "< 60 s", benchtable.Ptr(r.SettleHosts == r.Workers && r.Settle < time.Minute)
			x.Samples = int64(r.SettleHosts)
			x.Note = fmt.Sprintf("serve stopped, down %s, started → every worker admitted again, with the worker's own backoff and jitter", dur(r.Down))
		})
	}
	b.phase = PhaseVerified
	b.add("runs lost", float64(r.Lost), "runs", func(x *Row) {
		x.Goal, x.Met, x.Samples = "0", benchtable.Ptr(r.Lost == 0), int64(r.Runs)
		x.Note = "runs not read back exited 0 at attempt 1 after every session finished"
	})
	b.add("runs duplicated", float64(r.Duplicates), "runs", func(x *Row) {
		x.Goal, x.Met, x.Samples = "0", benchtable.Ptr(r.Duplicates == 0), int64(r.Runs)
		x.Note = "runs offered to two hosts or at a second attempt"
	})
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// WriteTable writes rows as the human table of `pam-bench fleet`, then
// the anomalies and first errors, if any.
func (r *Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%d workers × %d runs, heartbeat every %s, %d snapshots sent\n\n", r.Workers, r.RunsPerWorker, dur(r.HeartbeatInterval), r.SnapshotsSent)
	fmt.Fprintln(tw, "STAT\tVALUE\tBASELINE\tGOAL\tMET\tNOTE")
	for _, x := range r.Rows() {
		base, goal, met := "", "", ""
		if x.Baseline != nil {
			base = num(*x.Baseline) + " (" + x.BaselineName + ")"
		}
		goal = x.Goal
		if x.Met != nil {
			met = map[bool]string{true: "yes", false: "NO"}[*x.Met]
		}
		fmt.Fprintf(tw, "%s\t%s %s\t%s\t%s\t%s\t%s\n", x.Stat, num(x.Value), x.Unit, base, goal, met, x.Note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Anomalies) > 0 {
		fmt.Fprintln(w, "\ncounted along the way:")
		keys := make([]string, 0, len(r.Anomalies))
		for k := range r.Anomalies {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "  %s: %d\n", k, r.Anomalies[k])
		}
	}
	if len(r.Errors) > 0 {
		fmt.Fprintln(w, "\nfirst errors:")
		for _, e := range r.Errors {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
	return nil
}

// round keeps three decimals: figures, not noise.
func round(v float64) float64 {
	f, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'f', 3, 64), 64)
	return f
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s" }

func dur(d time.Duration) string { return d.String() }
