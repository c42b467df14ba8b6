# pam: one Go binary for every role (docs/architecture.md).
#
#   make          build the dashboard bundle (when npm is there), then bin/pam
#   make web      only the dashboard bundle (web/ → internal/webui/dist)
#   make up       install missing Debian packages, build, run `pam up`
#   make test     vet and the whole test suite with the race detector, then
#                 the end-to-end suite again with the pty executor
#   make lint     gofmt, go vet and staticcheck
#   make cover    the suite's coverage, including the pam processes it starts
#   make fuzz     every fuzz target for FUZZTIME each
#   make bench    every benchmark for BENCHTIME each, the load drivers, and
#                 one table of every figure (docs/bench.md)
#   make release  static, version-stamped binaries for linux/amd64,
#                 linux/arm64 and darwin/arm64 and their SHA256SUMS, in dist/
#   make image    the container image of pam serve, FROM scratch, with buildah
#                 (docs/operations.md)

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c

GO        ?= go
FUZZTIME  ?= 20s
BENCHTIME ?= 1s
# make bench: which benchmarks and packages, and the load drivers' flags
# (e.g. LOAD_ARGS='--duration 5s --cached-runs 100' with BENCHTIME=1x for
# a quick pass).
BENCH     ?= .
BENCHPKGS ?= ./...
LOAD_ARGS ?=
FLEET_ARGS ?=
# Arguments for `pam up`, e.g. make up ARGS='--port 0'.
ARGS      ?=

.DEFAULT_GOAL := build
.PHONY: build web deps deps-test up test test-short fuzz bench lint clean release image
# make release and make image: what `pam version` says (default: git
# describe, and the commit checked out).
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT    ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)

build: web
	$(GO) build -o bin/pam ./cmd/pam

# The dashboard bundle, embedded by the next go build. Without npm it says
# so and the binary serves a page that explains how to build it.
web:
	@bash scripts/web.sh

deps:
	@bash scripts/deps.sh

# What the tests need on top: Chromium for the dashboard's browser tests,
# jq, and the pinned agent CLIs (npm ci in internal/agentrig/testdata/clis
# when the installed tree is not the lockfile's; docs/agents.md).
deps-test:
	@bash scripts/deps.sh --test

up: deps build
	exec ./bin/pam up $(ARGS)

# The browser tests drive the dashboard that the pam binary they build
# embeds, so the bundle is built (and required) first.
test: deps-test
	@bash scripts/web.sh --require
	$(GO) vet ./...
	$(GO) test -race -count=1 -p 2 -timeout 20m ./...
	$(MAKE) test-pty

# The end-to-end suite a second time, every worker on the built-in PTY
# holder instead of tmux (PAM_EXECUTOR=pty; docs/architecture.md#the-pty-holder).
# Tests that are about tmux itself skip, saying so.
.PHONY: test-pty
test-pty:
	PAM_EXECUTOR=pty $(GO) test -race -count=1 -p 2 -timeout 20m ./internal/e2e

# make cover: the suite's coverage, counting what the pam processes it
# starts execute too, into COVERDIR (default cover/); see scripts/cover.sh.
.PHONY: cover
cover: deps
	GO=$(GO) bash scripts/cover.sh

test-short: deps
	@bash scripts/web.sh
	$(GO) test -short -count=1 -p 2 -timeout 10m ./...

# Fuzz targets are discovered (scripts/fuzz.sh), so new ones are fuzzed
# without editing this; each runs for FUZZTIME.
fuzz: deps
	@GO='$(GO)' FUZZTIME='$(FUZZTIME)' bash scripts/fuzz.sh

# The Go benchmarks one package at a time, then pam-bench load and
# pam-bench fleet (cmd/pam-bench, a tool apart from bin/pam), printed as
# one table (scripts/bench.sh, docs/bench.md).
bench: deps
	@GO='$(GO)' BENCHTIME='$(BENCHTIME)' BENCH='$(BENCH)' BENCHPKGS='$(BENCHPKGS)' \
		LOAD_ARGS='$(LOAD_ARGS)' FLEET_ARGS='$(FLEET_ARGS)' bash scripts/bench.sh

# The release binaries embed the dashboard, so its bundle is required.
release:
	@bash scripts/web.sh --require
	GO='$(GO)' VERSION='$(VERSION)' COMMIT='$(COMMIT)' bash scripts/release.sh

# The image of pam serve (IMAGE=…, default pam-serve:$(VERSION)); buildah
# comes from Debian's package (make deps-test installs it).
image:
	@bash scripts/web.sh --require
	GO='$(GO)' VERSION='$(VERSION)' COMMIT='$(COMMIT)' bash scripts/image.sh

# gofmt, go vet and staticcheck (the version go.mod pins as a tool).
lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

clean:
	rm -rf bin dist
