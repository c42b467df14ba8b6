// Package benchtable builds the one table `make bench` prints
// (docs/bench.md): every figure the project promises, next to its baseline
// measured in the same run, its goal and whether it is met, from two
// sources — the output of `go test -bench` and the JSON reports of the
// load drivers (`pam-bench load --json`, `pam-bench fleet --json`).
//
// The names and units it reads are a convention shared with the
// benchmarks themselves (specs.go); a benchmark it does not know is not
// dropped but listed raw under the table.
package benchtable

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
)

// Row is one figure: what the load drivers print, one per line of the
// table. Baseline, Met and the strings may be empty: not every figure has
// a baseline or a goal. Samples is how many measurements a percentile or
// a rate comes from (0 when that does not apply).
type Row struct {
	Figure       string   `json:"figure"`
	Stat         string   `json:"stat"`
	Value        float64  `json:"value"`
	Unit         string   `json:"unit"`
	Baseline     *float64 `json:"baseline"`
	BaselineName string   `json:"baseline_name"`
	Goal         string   `json:"goal"`
	Met          *bool    `json:"met"`
	Samples      int64    `json:"samples"`
	Note         string   `json:"note"`

	// Ratio is value ÷ baseline, or the benchmark's own ratio metric;
	// filled by the table when it can be, never read from JSON.
	Ratio *float64 `json:"-"`
	// Missing marks a figure the run did not produce: its value means
	// nothing and the note says why.
	Missing bool `json:"-"`
}

// Report is the JSON a load driver prints: {"figures":[Row,...]}.
type Report struct {
	Figures []Row `json:"figures"`
}

// DecodeReport reads one load driver's report.
func DecodeReport(r io.Reader) (Report, error) {
	var rep Report
	if err := json.NewDecoder(r).Decode(&rep); err != nil {
		return Report{}, fmt.Errorf("decode figures: %w", err)
	}
	for i, row := range rep.Figures {
		if row.Figure == "" {
			return Report{}, fmt.Errorf("decode figures: row %d has no figure name", i)
		}
	}
	return rep, nil
}

// Ptr returns a pointer to v, for the optional fields of a Row.
func Ptr[T any](v T) *T { return &v }

// Judge is the met of a row: nil when there is no goal to judge by.
func Judge(hasGoal, ok bool) *bool {
	if !hasGoal {
		return nil
	}
	return &ok
}

// Finite replaces NaN and ±Inf (no samples, a zero baseline) by 0, which
// JSON can carry; the row's note must then say why.
func Finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}
