// Package pamtest is the one harness pam's tests share: it builds the pam
// binary once per test process (with -race when the tests run with it,
// with -cover when coverage is collected), starts `pam serve`, `pam
// worker` and private tmux servers as real processes, and cleans every
// one of them up with t.Cleanup. Tests wait on conditions through package
// eventually; databases come from internal/store/storetest.
//
// It is a leaf package (the standard library only), so that any package's
// own tests can import it, including those of internal/tmux, embeddb and
// storetest that it must not depend on. It refuses to load outside a test
// binary.
package pamtest

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
)

func init() {
	if !testing.Testing() {
		panic("pamtest is imported by a program that is not a test binary")
	}
}

var (
	mainMu  sync.Mutex
	inMain  bool
	atExit  []func()
	skipped = map[string]int{} // tool → tests skipped because it is missing
)

// Main runs the tests of a package, then what AtExit registered (the
// process's copy of the pam binary, storetest's cluster), prints which
// tests were skipped for want of a tool, and exits with the tests' code.
// Call it from TestMain in every package that starts pam processes;
// storetest.Main calls it.
func Main(m *testing.M) { os.Exit(M(m).Run()) }

// M wraps m so that its Run does what Main does but returns the code
// instead of exiting, for a TestMain that hands m to something that exits
// itself (goleak.VerifyTestMain checks for leaks after Run returns).
func M(m *testing.M) interface{ Run() int } { return runner{m} }

type runner struct{ m *testing.M }

func (r runner) Run() int {
	mainMu.Lock()
	inMain = true
	mainMu.Unlock()
	code := r.m.Run()
	mainMu.Lock()
	fns := atExit
	atExit = nil
	summary := skipSummary()
	mainMu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
	if summary != "" {
		fmt.Fprint(os.Stderr, summary)
	}
	return code
}

// AtExit registers f to run once the package's tests have finished, in
// reverse order of registration, for what outlives a single test (a
// cluster shared by the test binary, the pam binary). Without Main it
// never runs.
func AtExit(f func()) {
	mainMu.Lock()
	defer mainMu.Unlock()
	atExit = append(atExit, f)
}

// skipSummary is the closing line naming what was skipped for lack of a
// tool, so that a local run says it did not test everything. Called with
// mainMu held.
func skipSummary() string {
	if len(skipped) == 0 {
		return ""
	}
	names := make([]string, 0, len(skipped))
	for n := range skipped {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "pamtest: %d test(s) SKIPPED because %s is missing; install it with: %s\n", skipped[n], n, tools[n].install)
	}
	return b.String()
}
