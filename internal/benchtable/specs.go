package benchtable

// spec says how one row of the table comes out of `go test -bench`: the
// benchmark and metric (unit) that hold its value, the one that holds its
// baseline, and the goal of docs/bench.md with the rule that judges it.
// The names and units are the convention the benchmarks report with
// (b.ReportMetric); renaming one on either side empties the row, which
// then says so.
type spec struct {
	figure, stat string
	bench        string // name without the -GOMAXPROCS suffix
	metric       string // the unit passed to b.ReportMetric
	unit         string // how the value is shown
	// The baseline: a metric of baseBench (bench itself when empty).
	baseBench, baseMetric, baseName string
	// ratioMetric is the benchmark's own ratio to its baseline, computed
	// per run; without it the ratio is value ÷ baseline.
	ratioMetric string
	goal        string
	// met judges value (and the ratio, nil when unknown); nil when there
	// is no goal.
	met  func(v float64, ratio *float64) bool
	note string
}

func atMost(limit float64) func(float64, *float64) bool {
	return func(v float64, _ *float64) bool { return v <= limit }
}

func atLeast(limit float64) func(float64, *float64) bool {
	return func(v float64, _ *float64) bool { return v >= limit }
}

func ratioAtMost(limit float64) func(float64, *float64) bool {
	return func(_ float64, r *float64) bool { return r != nil && *r <= limit }
}

// specs are the rows of the Go benchmarks, in the order of the table.
var specs = []spec{
	{figure: "capture CPU, 100 changing sessions at 1 Hz", stat: "control mode",
		bench: "BenchmarkCapture/control-mode", metric: "core-%", unit: "% core",
		baseBench: "BenchmarkCapture/exec-per-poll", baseMetric: "core-%", baseName: "exec-per-poll",
		goal: "≤ 2 % of one core, ≥ 10× cheaper than exec-per-poll",
		met:  func(v float64, r *float64) bool { return v <= 2 && r != nil && *r <= 0.1 }},
	{figure: "signal ingest", stat: "uplink",
		bench: "BenchmarkSignalIngest/uplink", metric: "signals/s", unit: "signals/s",
		baseBench: "BenchmarkSignalIngest/plain-sql", baseMetric: "signals/s", baseName: "plain SQL",
		goal: "≥ 5,000 signals/s", met: atLeast(5000)},
	{figure: "signal ingest", stat: "http",
		bench: "BenchmarkSignalIngest/http", metric: "signals/s", unit: "signals/s",
		baseBench: "BenchmarkSignalIngest/plain-sql", baseMetric: "signals/s", baseName: "plain SQL",
		goal: "≥ 3,500 signals/s", met: atLeast(3500)},
	{figure: "attach round trip", stat: "p50",
		bench: "BenchmarkAttachRoundTrip", metric: "relay-p50-ms", unit: "ms",
		baseMetric: "direct-p50-ms", baseName: "direct tmux attach", ratioMetric: "ratio-p50",
		goal: "≤ 1.5× direct tmux attach", met: ratioAtMost(1.5)},
	{figure: "attach round trip", stat: "p99",
		bench: "BenchmarkAttachRoundTrip", metric: "relay-p99-ms", unit: "ms",
		baseMetric: "direct-p99-ms", baseName: "direct tmux attach", ratioMetric: "ratio-p99",
		goal: "≤ 1.5× direct tmux attach", met: ratioAtMost(1.5)},
	{figure: "POST /runs → CLI started", stat: "p50",
		bench: "BenchmarkDispatchToSession", metric: "p50-ms", unit: "ms",
		goal: "≤ 20 ms", met: atMost(20)},
	{figure: "POST /runs → CLI started", stat: "p99",
		bench: "BenchmarkDispatchToSession", metric: "p99-ms", unit: "ms",
		goal: "≤ 60 ms", met: atMost(60)},
	{figure: "dispatch latency, idle", stat: "p50",
		bench: "BenchmarkDispatchLatency", metric: "p50-ms", unit: "ms",
		note: "POST /runs → run_dispatch at a worker, nothing else running; under load: the load driver's rows"},
	{figure: "dispatch latency, idle", stat: "p99",
		bench: "BenchmarkDispatchLatency", metric: "p99-ms", unit: "ms"},
	{figure: "SSE fan-out, 100 subscribers", stat: "events/s",
		bench: "BenchmarkSSEFanout100", metric: "events/s", unit: "events/s",
		goal: "≥ 1,000 events/s", met: atLeast(1000),
		note: "the journal's full rate, every event to all 100 subscribers"},
	{figure: "SSE fan-out, 100 subscribers", stat: "deliveries/s",
		bench: "BenchmarkSSEFanout100", metric: "deliveries/s", unit: "deliveries/s"},
	{figure: "SSE fan-out, 100 subscribers", stat: "delivery p99",
		bench: "BenchmarkSSEFanout100", metric: "delivery-p99-ms", unit: "ms",
		note: "commit → subscriber at the journal's full rate (queues full); the goal (< 50 ms at 1,000 events/s) is judged on the load driver's row"},
	{figure: "pane fan-out", stat: "deliveries/s",
		bench: "BenchmarkPaneFanout", metric: "deliveries/s", unit: "deliveries/s"},
	{figure: "pane cache, 1,000 runs of 220×50 colour screens", stat: "heap",
		bench: "BenchmarkPaneCache1000", metric: "MiB-held", unit: "MiB"},
}

// known reports whether a benchmark feeds a row of specs.
func known(name string) bool {
	for _, s := range specs {
		if s.bench == name || s.baseBench == name {
			return true
		}
	}
	return false
}
