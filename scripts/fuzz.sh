#!/usr/bin/env bash
# fuzz.sh runs every fuzz target of the module for FUZZTIME each (make fuzz).
#
# Targets are discovered, so a new one is fuzzed without editing anything:
# every Fuzz function declared in a _test.go file, each run on its own,
# since `go test -fuzz` takes one package and one target at a time (so a
# package with several targets is built once and fuzzed once per target).
#
# Every target runs even after one fails; the run fails at the end if any
# did. Go writes an input that fails to <package>/testdata/fuzz/<target>/,
# the only file a run leaves in the tree; the inputs it finds interesting
# go to its cache, outside the tree.
#
# A duration -fuzztime can end with "context deadline exceeded" and no
# failing input: a race in Go's fuzz coordinator when its own deadline
# passes (go.dev/issue/75804, fixed in Go 1.27). The target ran its whole
# time without a finding, so that ending is reported and not a failure.
#
# Go minimizes every input that finds new coverage, for up to
# -fuzzminimizetime (60 s by default) and without counting those runs:
# one long interesting input (a TOML table name of 500 control bytes)
# kept both workers minimizing for the rest of a 10 s budget, 21,000
# execs where 210,000 fit. FUZZMINIMIZETIME bounds it (default 2s): the
# budget goes to new inputs, and a failing one is still written, if less
# reduced.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

GO=${GO:-go}
FUZZTIME=${FUZZTIME:-20s}
FUZZMINIMIZETIME=${FUZZMINIMIZETIME:-2s}

# One "<package dir>:<target>" per line, found in the test files' source:
# no package is built to list them.
targets=$(grep -rHoE --include='*_test.go' --exclude-dir=.git --exclude-dir=node_modules '^func Fuzz[A-Za-z0-9_]*' . |
	sed -E 's|^(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)$|\1:\2|' | sort)
if [ -z "$targets" ]; then
	echo "no fuzz targets"
	exit 0
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed=()
raced=()
n=0
start=$SECONDS
for t in $targets; do
	pkg=${t%%:*}
	name=${t##*:}
	n=$((n + 1))
	echo "==> fuzz $pkg $name for $FUZZTIME"
	t0=$SECONDS
	if "$GO" test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" -fuzzminimizetime "$FUZZMINIMIZETIME" "$pkg" 2>&1 | tee "$log"; then
		echo "==> $name: $((SECONDS - t0))s with the build"
		continue
	fi
	if ! grep -q 'Failing input written to' "$log" && tail -n 5 "$log" | grep -q 'context deadline exceeded'; then
		echo "==> $name ran its $FUZZTIME without a finding; Go's fuzz coordinator then missed its own deadline (go.dev/issue/75804): not a failure"
		raced+=("$pkg $name")
		continue
	fi
	failed+=("$pkg $name")
done

echo "== fuzz: $n targets, ${#failed[@]} failed, ${#raced[@]} ended on go.dev/issue/75804, $((SECONDS - start))s"
for f in "${failed[@]}"; do
	echo "FAIL fuzz $f"
done
if [ ${#failed[@]} -gt 0 ]; then
	echo "failing inputs (go test -run=<target>/<file> replays one):"
	git status --porcelain --untracked-files=all -- '*/testdata/fuzz/*' || true
	exit 1
fi
