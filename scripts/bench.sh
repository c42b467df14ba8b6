#!/usr/bin/env bash
# bench.sh is make bench (docs/bench.md): every Go benchmark for BENCHTIME,
# then the load drivers against real processes on loopback, then one table
# of every figure with its baseline, goal and sample count.
#
# The benchmarks run one package at a time (-p 1) so that they do not
# measure each other; their output goes to stderr as it comes. The table
# goes to stdout. The run fails (after the table) if a benchmark or a
# driver failed, not because a goal is missed: the table says that.
#
#   BENCHTIME   -benchtime of the Go benchmarks (1x: a quick pass)
#   BENCH       which benchmarks (-bench), default all
#   BENCHPKGS   which packages, default ./...
#   LOAD_ARGS   flags of pam-bench load, e.g. '--duration 5s --cached-runs 100'
#   FLEET_ARGS  flags of pam-bench fleet
#
# The drivers and the table are bin/pam-bench (cmd/pam-bench), a tool
# apart from the product; they start bin/pam, built next to it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

GO=${GO:-go}
BENCHTIME=${BENCHTIME:-1s}
BENCH=${BENCH:-.}
BENCHPKGS=${BENCHPKGS:-./...}
LOAD_ARGS=${LOAD_ARGS:-}
FLEET_ARGS=${FLEET_ARGS:-}

out=$(mktemp -d "${TMPDIR:-/tmp}/pam-bench.XXXXXX")
trap 'rm -rf "$out"' EXIT
status=0
started=$SECONDS

"$GO" build -o bin/pam ./cmd/pam
"$GO" build -o bin/pam-bench ./cmd/pam-bench

echo "== go test -bench '$BENCH' -benchtime=$BENCHTIME $BENCHPKGS" >&2
# shellcheck disable=SC2086 # BENCHPKGS is a list of packages
if ! "$GO" test -p 1 -run '^$' -bench "$BENCH" -benchmem -benchtime="$BENCHTIME" -timeout 30m $BENCHPKGS 2>&1 | tee "$out/go.txt" >&2; then
	status=1
fi

reports=()
echo "== pam-bench load $LOAD_ARGS" >&2
# shellcheck disable=SC2086 # LOAD_ARGS is a list of flags
if ! bin/pam-bench load --json $LOAD_ARGS >"$out/load.json"; then
	status=1
fi
reports+=("$out/load.json")
echo "== pam-bench fleet $FLEET_ARGS" >&2
# shellcheck disable=SC2086 # FLEET_ARGS is a list of flags
if ! bin/pam-bench fleet --json $FLEET_ARGS >"$out/fleet.json"; then
	status=1
fi
reports+=("$out/fleet.json")

echo >&2
bin/pam-bench table --benchtime "$BENCHTIME" "${reports[@]}" <"$out/go.txt"
echo "make bench took $((SECONDS - started))s" >&2
exit $status
