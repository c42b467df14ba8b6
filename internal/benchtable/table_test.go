package benchtable

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// byLabel finds a row of the table by "figure: stat".
func byLabel(t *testing.T, tb Table, l string) Row {
	t.Helper()
	for _, s := range tb.Sections {
		for _, r := range s.Rows {
			if label(r) == l {
				return r
			}
		}
	}
	t.Fatalf("no row %q", l)
	return Row{}
}

func load(t *testing.T) Table {
	t.Helper()
	f, err := os.Open("testdata/gobench.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	g, err := ParseGoBench(f)
	if err != nil {
		t.Fatal(err)
	}
	j, err := os.Open("testdata/load.json")
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	rep, err := DecodeReport(j)
	if err != nil {
		t.Fatal(err)
	}
	return Build(g, []Source{{Name: "pam-bench load", Rows: rep.Figures}, {Name: "pam-bench fleet", Skipped: "this pam has no bench fleet"}})
}

// A recorded go test -bench output (several packages, a result line cut
// by what a test printed, -count repeats, a failure, a skip, benchmarks
// no row reads) and a load driver's report make the table: each figure
// with its baseline, ratio, goal, met and samples.
func TestBuildFromRecordedOutput(t *testing.T) {
	tb := load(t)
	type want struct {
		value    float64
		baseline float64 // 0: none
		ratio    float64 // 0: none
		met      string  // yes, NO, —
		samples  int64
		note     string // a part of the note
	}
	for l, w := range map[string]want{
		"signal ingest: uplink":                      {4800, 6400, 0.75, "NO", 6000, ""},
		"signal ingest: http":                        {4000, 6400, 0.625, "yes", 4000, ""},
		"attach round trip: p50":                     {2.16, 1.2, 1.8, "NO", 200, ""},
		"attach round trip: p99":                     {4.34, 3.1, 1.4, "yes", 200, ""},
		"POST /runs → CLI started: p50":              {18.5, 0, 0, "yes", 50, ""},
		"POST /runs → CLI started: p99":              {55, 0, 0, "yes", 50, "only 50 samples"},
		"dispatch latency, idle: p50":                {2.5, 0, 0, "—", 1200, "median of 3 runs"},
		"dispatch latency, idle: p99":                {7, 0, 0, "—", 1200, "median of 3 runs"},
		"SSE fan-out, 100 subscribers: events/s":     {4000, 0, 0, "yes", 500000, ""},
		"SSE fan-out, 100 subscribers: delivery p99": {7.5, 0, 0, "—", 500000, ""},
		"pane fan-out: deliveries/s":                 {98765, 0, 0, "—", 1000, ""},
		"dispatch latency under load: p99":           {25, 5, 5, "NO", 1500, "probe host"},
		"serve RSS: peak":                            {80, 0, 0, "—", 60, "below the goal"},
	} {
		r := byLabel(t, tb, l)
		if r.Missing || r.Value != w.value || r.Samples != w.samples || met(r) != w.met {
			t.Errorf("%s: value %v samples %d met %s missing %v; want %v, %d, %s", l, r.Value, r.Samples, met(r), r.Missing, w.value, w.samples, w.met)
		}
		if (r.Baseline == nil) != (w.baseline == 0) || r.Baseline != nil && *r.Baseline != w.baseline {
			t.Errorf("%s: baseline %v, want %v", l, r.Baseline, w.baseline)
		}
		if (r.Ratio == nil) != (w.ratio == 0) || r.Ratio != nil && *r.Ratio != w.ratio {
			t.Errorf("%s: ratio %v, want %v", l, r.Ratio, w.ratio)
		}
		if !strings.Contains(r.Note, w.note) {
			t.Errorf("%s: note %q lacks %q", l, r.Note, w.note)
		}
	}
	if r := byLabel(t, tb, "capture CPU, 100 changing sessions at 1 Hz: control mode"); !r.Missing || !strings.Contains(r.Note, "skipped: BenchmarkCapture") || !strings.Contains(r.Note, "tmux not installed") {
		t.Errorf("a skipped benchmark's row: missing %v, note %q", r.Missing, r.Note)
	}
	if r := byLabel(t, tb, "POST /runs → CLI started: p50"); strings.Contains(r.Note, "samples") {
		t.Errorf("a p50 over 50 samples is noted as too few: %q", r.Note)
	}
	if met, missed, unmeasured := tb.Counts(); met != 7 || missed != 3 || unmeasured != 2 {
		t.Errorf("goals %d met, %d missed, %d unmeasured; want 7, 3, 2", met, missed, unmeasured)
	}
	if got := strings.Join(tb.Failed, "|"); got != "BenchmarkSafeSeq|package pam/internal/journal" {
		t.Errorf("failed %q", got)
	}
	raw := strings.Join(tb.Raw, "\n")
	for _, s := range []string{"pam/internal/e2e: BenchmarkPaneFanoutWithStalledViewer-2", "pam/internal/journal: BenchmarkJournalAppend/journal/fsync-off-2"} {
		if !strings.Contains(raw, s) {
			t.Errorf("raw section lacks %q:\n%s", s, raw)
		}
	}
	if strings.Contains(raw, "BenchmarkDispatchLatency") || strings.Contains(raw, "BenchmarkSignalIngest") {
		t.Errorf("raw section holds a benchmark a row reads:\n%s", raw)
	}
}

// The printed table has every row, the sections, the notes by number,
// the goal tally, the raw lines and what failed.
func TestWrite(t *testing.T) {
	var b bytes.Buffer
	if err := load(t).Write(&b, "pam figures (BENCHTIME=1s)"); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, s := range []string{
		"pam figures (BENCHTIME=1s)",
		"FIGURE", "BASELINE", "RATIO", "GOAL", "MET", "SAMPLES",
		"[go test -bench]", "[pam-bench load]", "[pam-bench fleet]", "(not run: this pam has no bench fleet)",
		"signal ingest: uplink", "4,800 signals/s", "6,400 signals/s (plain SQL)", "0.75×", "≥ 5,000 signals/s",
		"dispatch latency under load: p99", "25.0 ms", "5.00 ms (idle)", "≤ 20 ms", "1,500",
		"goals: 7 met, 3 not met, 2 not measured",
		"notes:", "median of 3 runs",
		"other benchmarks (not in the table):", "BenchmarkJournalAppend",
		"failed:", "BenchmarkSafeSeq",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("table lacks %q:\n%s", s, out)
		}
	}
	// The columns line up: the tabwriter counts runes (≤, ×, →) as one.
	col := func(line, s string) int { return len([]rune(line[:strings.Index(line, s)])) }
	var header, row string
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, "FIGURE"):
			header = l
		case strings.HasPrefix(l, "  POST /runs → CLI started: p50"):
			row = l
		}
	}
	if header == "" || row == "" || col(header, "VALUE") != col(row, "18.5 ms") || col(header, "GOAL") != col(row, "≤ 20 ms") {
		t.Errorf("columns misaligned:\n%s\n%s", header, row)
	}
}

func TestNumber(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 0.0423: "0.042", 3.214: "3.21", 48.26: "48.3", 1285.4: "1,285", 1234567: "1,234,567", -2.5: "-2.50"} {
		if got := Number(v); got != want {
			t.Errorf("Number(%v) = %q, want %q", v, got, want)
		}
	}
}

// A report without a figure name is refused, not printed as a blank row.
func TestDecodeReportRefusesNamelessRow(t *testing.T) {
	if _, err := DecodeReport(strings.NewReader(`{"figures":[{"value":1}]}`)); err == nil {
		t.Fatal("decoded a row without a figure")
	}
}
