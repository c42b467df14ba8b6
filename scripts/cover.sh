#!/usr/bin/env bash
# cover.sh measures the test suite's coverage including what the pam
# processes the tests start (serve, workers, the wrappers and hooks in
# their tmux sessions, CLI commands) execute, not only the test binaries.
#
# The tests run with -cover and -coverpkg=./..., keeping their raw
# counters in $COVERDIR/unit (-test.gocoverdir); PAM_COVERDIR makes the
# test harness (internal/pamtest) build pam with -cover and give every
# process GOCOVERDIR=$COVERDIR/procs. go tool covdata merges the two.
#
# It prints the unit-test-only total and the total with the processes,
# and leaves $COVERDIR/cover.out (go tool cover -html=...) behind. Test
# helpers (pamtest, storetest, eventually) are left out of both totals.
# A failing test still gets its coverage printed; the exit status is the
# tests'.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

GO=${GO:-go}
out=${COVERDIR:-cover}
pkgs=${PKGS:-./...} # a subset, e.g. PKGS=./internal/serve/, measures faster
rm -rf "$out"
mkdir -p "$out/unit" "$out/procs"
dir=$(cd "$out" && pwd)

status=0
PAM_COVERDIR="$dir/procs" $GO test -count=1 -p 2 -timeout 30m -cover -coverpkg=./... $pkgs \
	-args -test.gocoverdir="$dir/unit" || status=$?

# helpers are test code: leave them out of what is measured.
product() { grep -v -e '^pam/internal/pamtest/' -e '^pam/internal/store/storetest/' -e '^pam/internal/eventually/'; }
total() { $GO tool cover -func="$1" | awk '$1 == "total:" { print $NF }'; }

$GO tool covdata textfmt -i="$dir/unit" -o "$dir/unit.raw"
product <"$dir/unit.raw" >"$dir/unit.out"
mkdir -p "$dir/merged"
$GO tool covdata merge -pcombine -i="$dir/unit,$dir/procs" -o "$dir/merged"
$GO tool covdata textfmt -i="$dir/merged" -o "$dir/cover.raw"
product <"$dir/cover.raw" >"$dir/cover.out"
rm -f "$dir/unit.raw" "$dir/cover.raw"

echo "process coverage files: $(find "$dir/procs" -name 'covcounters.*' | wc -l) counter files from $(find "$dir/procs" -name 'covmeta.*' | wc -l) binaries"
echo "unit-test coverage (tests only): $(total "$dir/unit.out")"
echo "total coverage (tests + processes): $(total "$dir/cover.out")"
exit "$status"
