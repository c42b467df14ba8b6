# pam: one Go binary for every role (contract §1).
#
#   make          build bin/pam
#   make up       install missing Debian packages, build, run `pam up`
#   make test     vet and the whole test suite with the race detector
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

# Fuzz targets are discovered, so new ones are fuzzed without editing this.
# `go test -fuzz` takes one package and one target at a time.
fuzz: deps
	@targets=$$($(GO) test -list '^Fuzz' ./... | awk '/^Fuzz/ { f[n++] = $$1; next } /^ok[ \t]/ { for (i = 0; i < n; i++) print $$2 ":" f[i]; n = 0 }'); \
	if [ -z "$$targets" ]; then echo "no fuzz targets"; exit 0; fi; \
	for t in $$targets; do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "==> fuzz $$pkg $$name for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) "$$pkg"; \
	done

bench: deps
	$(GO) test -run '^$$' -bench . -benchmem -benchtime=$(BENCHTIME) -timeout 30m ./...

lint:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

clean:
	rm -rf bin
