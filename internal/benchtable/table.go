package benchtable

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Source is one load driver's report, or why there is none.
type Source struct {
	// Name is what produced it, e.g. "pam-bench load".
	Name string
	Rows []Row
	// Skipped says why the driver did not run (its subcommand is not in
	// this binary, it failed); its rows are then empty.
	Skipped string
}

// Section is a group of rows from one source.
type Section struct {
	Name    string
	Rows    []Row
	Skipped string
}

// Table is what `make bench` prints.
type Table struct {
	Sections []Section
	// Raw holds the result lines of benchmarks no row reads.
	Raw []string
	// Failed names the benchmarks and packages that failed.
	Failed []string
}

// Build makes the table from the Go benchmarks' output and the drivers'
// reports. Every row of specs is present: one the output lacks says why.
func Build(g GoBench, sources []Source) Table {
	t := Table{Failed: slices.Clone(g.Failed)}
	var rows []Row
	for _, s := range specs {
		rows = append(rows, fewSamples(fromBench(g, s)))
	}
	t.Sections = append(t.Sections, Section{Name: "go test -bench", Rows: rows})
	for _, src := range sources {
		sec := Section{Name: src.Name, Skipped: src.Skipped}
		for _, r := range src.Rows {
			if r.Baseline != nil && *r.Baseline != 0 {
				r.Ratio = Ptr(r.Value / *r.Baseline)
			}
			sec.Rows = append(sec.Rows, fewSamples(r))
		}
		t.Sections = append(t.Sections, sec)
	}
	for _, b := range g.Benches {
		if !known(b.Name) {
			t.Raw = append(t.Raw, rawLine(b))
		}
	}
	return t
}

// rawLine names the package of an unknown benchmark's line.
func rawLine(b Bench) string {
	if b.Pkg == "" {
		return b.Line
	}
	return b.Pkg + ": " + b.Line
}

// fromBench is the row of s: the median over repeated runs (-count), the
// samples summed.
func fromBench(g GoBench, s spec) Row {
	r := Row{Figure: s.figure, Stat: s.stat, Unit: s.unit, Goal: s.goal, BaselineName: s.baseName, Note: s.note}
	res := g.find(s.bench)
	v, n, samples := median(res, s.metric)
	if n == 0 {
		r.Missing = true
		switch skip, skipped := g.skipped(s.bench); {
		case g.failed(s.bench):
			r.Note = joinNote("FAILED: " + s.bench)
		case skipped:
			r.Note = joinNote("skipped: " + skip)
		case len(res) > 0:
			r.Note = joinNote(fmt.Sprintf("%s reports no %q", s.bench, s.metric))
		default:
			r.Note = joinNote(s.bench + " not in the output")
		}
		return r
	}
	r.Value, r.Samples = v, samples
	if n > 1 {
		r.Note = joinNote(r.Note, fmt.Sprintf("median of %d runs", n))
	}
	if s.baseMetric != "" {
		baseBench := s.baseBench
		if baseBench == "" {
			baseBench = s.bench
		}
		if b, bn, _ := median(g.find(baseBench), s.baseMetric); bn > 0 {
			r.Baseline = Ptr(b)
		} else {
			r.Note = joinNote(r.Note, fmt.Sprintf("baseline %s %q not in the output", baseBench, s.baseMetric))
		}
	}
	if s.ratioMetric != "" {
		if x, xn, _ := median(res, s.ratioMetric); xn > 0 {
			r.Ratio = Ptr(x)
		}
	}
	if r.Ratio == nil && r.Baseline != nil && *r.Baseline != 0 {
		r.Ratio = Ptr(r.Value / *r.Baseline)
	}
	if s.met != nil {
		r.Met = Ptr(s.met(r.Value, r.Ratio))
	}
	return r
}

// median of metric over the results that report it, how many did, and
// the samples behind them: the "samples" metric where the benchmark
// reports one, else its iteration count.
func median(res []Bench, metric string) (v float64, n int, samples int64) {
	var vals []float64
	for _, b := range res {
		x, ok := b.Metrics[metric]
		if !ok {
			continue
		}
		vals = append(vals, x)
		if s, ok := b.Metrics["samples"]; ok {
			samples += int64(s)
		} else {
			samples += b.N
		}
	}
	if len(vals) == 0 {
		return 0, 0, 0
	}
	slices.Sort(vals)
	m := len(vals) / 2
	if len(vals)%2 == 0 {
		return (vals[m-1] + vals[m]) / 2, len(vals), samples
	}
	return vals[m], len(vals), samples
}

// minP99Samples is how many samples a p99 needs to be more than the
// largest of them.
const minP99Samples = 100

// fewSamples says so in the note of a p99 that stands on too few samples
// to be one.
func fewSamples(r Row) Row {
	if strings.Contains(r.Stat, "p99") && !r.Missing && r.Samples > 0 && r.Samples < minP99Samples {
		r.Note = joinNote(r.Note, fmt.Sprintf("only %d samples: a p99 needs %d or more to be more than their maximum", r.Samples, minP99Samples))
	}
	return r
}

func joinNote(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, "; ")
}

// Counts tallies the goals: met, not met, and with a goal but no value.
func (t Table) Counts() (met, missed, unmeasured int) {
	for _, s := range t.Sections {
		for _, r := range s.Rows {
			switch {
			case r.Goal == "":
			case r.Missing || r.Met == nil:
				unmeasured++
			case *r.Met:
				met++
			default:
				missed++
			}
		}
	}
	return met, missed, unmeasured
}

// Write prints the table: a header line, then figure, value, baseline,
// ratio, goal, met and samples per row, grouped by source, notes by
// number below, then the raw lines of unknown benchmarks and what failed.
func (t Table) Write(w io.Writer, header string) error {
	if header != "" {
		fmt.Fprintln(w, header)
		fmt.Fprintln(w)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FIGURE\tVALUE\tBASELINE\tRATIO\tGOAL\tMET\tSAMPLES\tNOTE")
	var notes []string
	for _, s := range t.Sections {
		fmt.Fprintf(tw, "[%s]\t\t\t\t\t\t\t\n", s.Name)
		if s.Skipped != "" {
			fmt.Fprintf(tw, "  (not run: %s)\t\t\t\t\t\t\t\n", s.Skipped)
		}
		for _, r := range s.Rows {
			ref := ""
			if r.Note != "" {
				notes = append(notes, fmt.Sprintf("[%d] %s: %s", len(notes)+1, label(r), r.Note))
				ref = fmt.Sprintf("[%d]", len(notes))
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", label(r), value(r), baseline(r), ratio(r), dash(r.Goal), met(r), samples(r), ref)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	m, x, u := t.Counts()
	fmt.Fprintf(w, "\ngoals: %d met, %d not met, %d not measured\n", m, x, u)
	if len(notes) > 0 {
		fmt.Fprintln(w, "\nnotes:")
		for _, n := range notes {
			fmt.Fprintln(w, "  "+n)
		}
	}
	if len(t.Raw) > 0 {
		fmt.Fprintln(w, "\nother benchmarks (not in the table):")
		for _, l := range t.Raw {
			fmt.Fprintln(w, "  "+l)
		}
	}
	if len(t.Failed) > 0 {
		fmt.Fprintln(w, "\nfailed:")
		for _, f := range t.Failed {
			fmt.Fprintln(w, "  "+f)
		}
	}
	return nil
}

// WriteRows prints rows alone as a table (what a load driver prints
// without --json).
func WriteRows(w io.Writer, name string, rows []Row) error {
	for i := range rows {
		if b := rows[i].Baseline; b != nil && *b != 0 && rows[i].Ratio == nil {
			rows[i].Ratio = Ptr(rows[i].Value / *b)
		}
	}
	return Table{Sections: []Section{{Name: name, Rows: rows}}}.Write(w, "")
}

func label(r Row) string {
	if r.Stat == "" {
		return r.Figure
	}
	return r.Figure + ": " + r.Stat
}

func value(r Row) string {
	if r.Missing {
		return "—"
	}
	return withUnit(r.Value, r.Unit)
}

func baseline(r Row) string {
	if r.Baseline == nil {
		return "—"
	}
	s := withUnit(*r.Baseline, r.Unit)
	if r.BaselineName != "" {
		s += " (" + r.BaselineName + ")"
	}
	return s
}

func ratio(r Row) string {
	if r.Ratio == nil || r.Missing {
		return "—"
	}
	return Number(*r.Ratio) + "×"
}

func met(r Row) string {
	switch {
	case r.Met == nil:
		return "—"
	case *r.Met:
		return "yes"
	default:
		return "NO"
	}
}

func samples(r Row) string {
	if r.Samples <= 0 || r.Missing {
		return "—"
	}
	return grouped(r.Samples)
}

func dash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func withUnit(v float64, unit string) string {
	if unit == "" {
		return Number(v)
	}
	return Number(v) + " " + unit
}

// Number prints a figure with as many decimals as its size deserves:
// 0.042, 3.21, 48.3, 1,285.
func Number(v float64) string {
	a := math.Abs(v)
	switch {
	case v == 0:
		return "0"
	case a < 0.1:
		return strconv.FormatFloat(v, 'f', 3, 64)
	case a < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case a < 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return grouped(int64(math.Round(v)))
	}
}

// grouped writes n with thousands separators: 12,345.
func grouped(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
