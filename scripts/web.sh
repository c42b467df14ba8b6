#!/usr/bin/env bash
# web.sh builds the web dashboard (web/) into internal/webui/dist, which
# the next go build embeds: npm ci when node_modules is missing or older
# than the lockfile, then web/build.mjs when a source is newer than the
# last build. Without npm it says how to get it and exits 0, so a plain
# build still works (the binary then serves a page explaining how to build
# the dashboard); with --require (make test) a missing npm is an error,
# and the sources' JSDoc types are checked (tsc, npm run typecheck).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../web"

require=false
[ "${1:-}" = "--require" ] && require=true

if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
	msg="Node.js and npm are not installed: the dashboard is not built (install them with: apt-get install -y nodejs npm, or make deps as root)"
	if $require; then
		echo "web: $msg" >&2
		exit 1
	fi
	echo "web: $msg; pam is built without it" >&2
	exit 0
fi

if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
	npm ci --no-audit --no-fund --loglevel=error
fi

# make test (--require) also checks the sources' types: tsc reads the
# JSDoc of web/src (npm run typecheck; web/tsconfig.json), emitting nothing.
if $require; then
	npm run --silent typecheck
fi

out=../internal/webui/dist/index.html
if [ -f "$out" ] && [ -z "$(find src build.mjs package.json package-lock.json -newer "$out" -print -quit)" ]; then
	exit 0
fi
node build.mjs
