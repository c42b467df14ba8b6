package benchtable

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Bench is one result line of `go test -bench`: a benchmark's name
// (without the -GOMAXPROCS suffix), its iteration count and every
// metric it reported by unit.
type Bench struct {
	Pkg     string
	Name    string
	N       int64
	Metrics map[string]float64
	Line    string // as printed, for the raw section
}

// GoBench is what one `go test -bench` output holds.
type GoBench struct {
	Benches []Bench
	// Failed names what failed: "--- FAIL: BenchmarkX" lines and the
	// packages whose run ended in FAIL.
	Failed []string
	// Skipped names the benchmarks that skipped ("--- SKIP: ..."), with
	// the reason on the following line when there is one.
	Skipped []string
}

var (
	// benchLine: name, iterations, then value/unit pairs.
	benchLine = regexp.MustCompile(`^(Benchmark\S+)\s+(\d+)\s+(.*)$`)
	// resultOnly: the results of a benchmark whose name was printed on an
	// earlier line (something wrote to stdout while it ran).
	resultOnly = regexp.MustCompile(`^\s*(\d+)\s+(\S+ \S+.*)$`)
	// nameFirst: a line that starts with a benchmark's name but holds no
	// results (they come on a later line).
	nameFirst  = regexp.MustCompile(`^(Benchmark\S+)(\s|$)`)
	procSuffix = regexp.MustCompile(`-\d+$`)
	failLine   = regexp.MustCompile(`^\s*--- FAIL: (Benchmark\S+)`)
	skipLine   = regexp.MustCompile(`^\s*--- SKIP: (Benchmark\S+)`)
	failPkg    = regexp.MustCompile(`^FAIL\s+(\S+)`)
)

// ParseGoBench reads the output of `go test -bench` (several packages,
// interleaved with whatever the tests printed) and keeps its result lines.
func ParseGoBench(r io.Reader) (GoBench, error) {
	var out GoBench
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	pkg, pending := "", ""
	skipReason := -1 // index in out.Skipped awaiting its reason line
	for sc.Scan() {
		line := sc.Text()
		if skipReason >= 0 {
			if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "---") {
				out.Skipped[skipReason] += ": " + t
			}
			skipReason = -1
		}
		switch {
		case strings.HasPrefix(line, "pkg: "):
			pkg = strings.TrimSpace(strings.TrimPrefix(line, "pkg: "))
			continue
		case failLine.MatchString(line):
			out.Failed = append(out.Failed, trimProcs(failLine.FindStringSubmatch(line)[1]))
			continue
		case skipLine.MatchString(line):
			out.Skipped = append(out.Skipped, trimProcs(skipLine.FindStringSubmatch(line)[1]))
			skipReason = len(out.Skipped) - 1
			continue
		case failPkg.MatchString(line):
			out.Failed = append(out.Failed, "package "+failPkg.FindStringSubmatch(line)[1])
			continue
		}
		if m := benchLine.FindStringSubmatch(line); m != nil {
			if b, ok := parseResult(pkg, m[1], m[2], m[3], line); ok {
				out.Benches = append(out.Benches, b)
				pending = ""
				continue
			}
		}
		if m := nameFirst.FindStringSubmatch(line); m != nil {
			pending = m[1]
			continue
		}
		if pending != "" {
			if m := resultOnly.FindStringSubmatch(line); m != nil {
				if b, ok := parseResult(pkg, pending, m[1], m[2], pending+" "+strings.TrimSpace(line)); ok {
					out.Benches = append(out.Benches, b)
					pending = ""
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("read go test output: %w", err)
	}
	return out, nil
}

// parseResult reads "N value unit value unit ..." of benchmark name.
func parseResult(pkg, name, n, rest, line string) (Bench, bool) {
	iters, err := strconv.ParseInt(n, 10, 64)
	if err != nil {
		return Bench{}, false
	}
	f := strings.Fields(rest)
	if len(f) < 2 || len(f)%2 != 0 {
		return Bench{}, false
	}
	b := Bench{Pkg: pkg, Name: trimProcs(name), N: iters, Metrics: map[string]float64{}, Line: strings.TrimSpace(line)}
	for i := 0; i < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return Bench{}, false
		}
		b.Metrics[f[i+1]] = v
	}
	return b, true
}

// trimProcs drops the -GOMAXPROCS suffix go test adds to a name when
// GOMAXPROCS is not 1.
func trimProcs(name string) string { return procSuffix.ReplaceAllString(name, "") }

// find returns the results of the benchmark named name (several with
// -count), in the order printed.
func (g GoBench) find(name string) []Bench {
	var out []Bench
	for _, b := range g.Benches {
		if b.Name == name {
			out = append(out, b)
		}
	}
	return out
}

// failed reports whether the benchmark (or a parent of it) failed.
func (g GoBench) failed(name string) bool {
	return slices.ContainsFunc(g.Failed, func(f string) bool { return f == name || strings.HasPrefix(name, f+"/") })
}

// skipped returns the skip line of the benchmark (or of a parent), if any.
func (g GoBench) skipped(name string) (string, bool) {
	for _, s := range g.Skipped {
		n, _, _ := strings.Cut(s, ":")
		if n == name || strings.HasPrefix(name, n+"/") {
			return s, true
		}
	}
	return "", false
}
