# pam: one Go binary for every role (docs/architecture.md).
#
#   make          build bin/pam
#   make up       install missing Debian packages, build, run `pam up`
#   make test     vet and the whole test suite with the race detector
#   make lint     gofmt, go vet and staticcheck
#   make cover    the suite's coverage, including the pam processes it starts
#   make fuzz     every fuzz target for FUZZTIME each
#   make bench    every benchmark for BENCHTIME each

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c

GO        ?= go
FUZZTIME  ?= 20s
BENCHTIME ?= 1s
# Arguments for `pam up`, e.g. make up ARGS='--port 0'.
ARGS      ?=

.DEFAULT_GOAL := build
.PHONY: build deps up test test-short fuzz bench lint clean

build:
	$(GO) build -o bin/pam ./cmd/pam

deps:
	@bash scripts/deps.sh

up: deps build
	exec ./bin/pam up $(ARGS)

test: deps
	$(GO) vet ./...
	$(GO) test -race -count=1 -p 2 -timeout 20m ./...

# make cover: the suite's coverage, counting what the pam processes it
# starts execute too, into COVERDIR (default cover/); see scripts/cover.sh.
.PHONY: cover
cover: deps
	GO=$(GO) bash scripts/cover.sh

test-short: deps
	$(GO) test -short -count=1 -p 2 -timeout 10m ./...

# Fuzz targets are discovered (scripts/fuzz.sh), so new ones are fuzzed
# without editing this; each runs for FUZZTIME.
fuzz: deps
	@GO='$(GO)' FUZZTIME='$(FUZZTIME)' bash scripts/fuzz.sh

bench: deps
	$(GO) test -run '^$$' -bench . -benchmem -benchtime=$(BENCHTIME) -timeout 30m ./...

# gofmt, go vet and staticcheck (the version go.mod pins as a tool).
lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

clean:
	rm -rf bin
