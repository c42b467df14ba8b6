package spool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"pam/internal/wire"
)

const fuzzRun = "0a0a0a0a-1111-4111-8111-111111111111"

var (
	// fileNameRe is the oracle's own spelling of a spool file name (docs/architecture.md#configuration-and-files-on-disk).
	fileNameRe = regexp.MustCompile(`^[0-9]{20}-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-[1-9][0-9]*-(started|finished|completed|failed|progress)\.json$`)
	numbersRe  = regexp.MustCompile(`^([0-9]{20})-.{36}-([0-9]+)-`)
)

// FuzzParseName feeds hostile file names to the parser that decides what
// in the spool folder is a signal. Whatever the input: no panic; a name
// it takes is one Write could have made (a canonical run id, attempt 1 or
// more, a signal kind) and prints back as exactly itself, so that every
// file listed is the file read and deleted.
func FuzzParseName(f *testing.F) {
	for _, s := range []string{
		fmt.Sprintf("%020d-%s-1-started.json", 1, fuzzRun),
		fmt.Sprintf("%020d-%s-12-progress.json", 99, fuzzRun),
		fmt.Sprintf("%020d-%s-3-finished.json", uint64(18446744073709551615), fuzzRun),
		fmt.Sprintf("%020d-%s-1-exploded.json", 1, fuzzRun),
		fmt.Sprintf("%020d-%s-1-started.json.tmp", 1, fuzzRun),
		"1-x-1-started.json", ".seq", ".lock", "README", "",
		"99999999999999999999-" + fuzzRun + "-1-started.json", // seq past uint64
		"00000000000000000001-" + fuzzRun + "-99999999999999999999-started.json",
		// Found by this target: an attempt 0, or one with a leading zero,
		// was taken and printed back as another file's name.
		"00000000001000000000-00000000-0000-0000-0000-000000000000-0-progress.json",
		"00000000000000000001-" + fuzzRun + "-01-started.json",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, ok := parseName(s)
		if !ok {
			if fileNameRe.MatchString(s) {
				// In range and well formed, it must be taken.
				m := numbersRe.FindStringSubmatch(s)
				_, err1 := strconv.ParseUint(m[1], 10, 64)
				_, err2 := strconv.Atoi(m[2])
				if err1 == nil && err2 == nil {
					t.Fatalf("well-formed name %q refused", s)
				}
			}
			return
		}
		if !fileNameRe.MatchString(s) || n.attempt < 1 || !wire.ValidUUID(n.runID) {
			t.Fatalf("parseName(%q) took %+v", s, n)
		}
		if n.String() != s {
			t.Fatalf("parseName(%q) prints back as %q: another file than the one listed", s, n.String())
		}
		if back, ok := parseName(n.String()); !ok || back != n {
			t.Fatalf("parseName(%q) = %+v, %v; want %+v", n.String(), back, ok, n)
		}
	})
}

// FuzzReadSpoolFile puts hostile content, torn and corrupt files among
// them, into a spool folder under a signal file's name, and lists it as
// the worker's replay does. Whatever the content: no panic, and no error
// for the listing; the file is either a signal or set aside as bad, never
// both; a signal taken agrees with its file name, has a kind and an
// attempt, and encodes back to content that reads as the same signal.
func FuzzReadSpoolFile(f *testing.F) {
	attempt := 2
	good, err := json.Marshal(Entry{RunID: fuzzRun, Token: "pst1.x.2.abc", APIURL: "http://127.0.0.1:7898",
		Signal: wire.Signal{Kind: wire.SignalFinished, Attempt: &attempt, Source: wire.SourceWrapper, Payload: json.RawMessage(`{"exit_code":3}`)}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	for _, cut := range []int{0, 1, len(good) / 2, len(good) - 1} {
		f.Add(good[:cut]) // torn
	}
	for _, s := range []string{
		`null`, `{}`, `[]`, `{"run_id":"` + fuzzRun + `"}`,
		`{"run_id":"` + fuzzRun + `","signal":{"kind":"finished","attempt":null}}`,
		`{"run_id":"` + fuzzRun + `","signal":{"kind":"finished","attempt":0}}`,
		`{"run_id":"` + fuzzRun + `","signal":{"kind":"started","attempt":2}}`,
		`{"run_id":"0A0A0A0A-1111-4111-8111-111111111111","signal":{"kind":"finished","attempt":2}}`,
		`{"run_id":"` + fuzzRun + `","signal":{"kind":"finished","attempt":2,"payload":{"exit_code": 1}}} trailing`,
		`{"run_id":"` + fuzzRun + `","signal":{"kind":"finished","attempt":2,"timestamp":"2025-01-02T03:04:05+01:00"}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, fmt.Sprintf("%020d-%s-2-finished.json", 7, fuzzRun))
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		files, bad, err := List(dir)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if len(files)+len(bad) != 1 {
			t.Fatalf("one file listed as %d signals and %d bad", len(files), len(bad))
		}
		if len(bad) == 1 {
			if bad[0].Path != path || bad[0].Err == nil || errors.Is(bad[0].Err, os.ErrNotExist) {
				t.Fatalf("bad = %+v", bad[0])
			}
			return
		}
		got := files[0]
		if got.Path != path || got.Seq != 7 || got.RunID != fuzzRun || got.Signal.Kind != wire.SignalFinished ||
			got.Signal.Attempt == nil || *got.Signal.Attempt != 2 {
			t.Fatalf("listed %+v for content %q", got, data)
		}
		again, err := json.Marshal(got.Entry)
		if err != nil {
			t.Fatalf("encode %+v: %v", got.Entry, err)
		}
		n, _ := parseName(filepath.Base(path))
		back, err := decodeEntry(again, n)
		if err != nil {
			t.Fatalf("re-encoded %s does not read back: %v", again, err)
		}
		third, err := json.Marshal(back)
		if err != nil || !bytes.Equal(third, again) {
			t.Fatalf("round trip changed the signal:\n%s\n%s (%v)", again, third, err)
		}
	})
}
