# makerfleet: one binary, `maker`. `make` alone lists the targets.

SHELL    := /bin/bash
GO       ?= go
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X github.com/makerfleet/makerfleet/cmd/maker/cli.Version=$(VERSION)
FUZZTIME ?= 10s
GOFMT    ?= $(shell $(GO) env GOROOT)/bin/gofmt
# The newest staticcheck; v0.8.2 runs on Go 1.26.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

# The Node checks' packages: the official openai client (simllm), the
# MCP TypeScript SDK client and Inspector CLI (maker mcp), and the
# TypeScript client's compiler (clients/typescript).
NPM_DIRS := internal/simllm/testdata/npm cmd/maker/cli/testdata/mcp-npm clients/typescript
# npm ci writes node_modules/.package-lock.json: older than the lock file
# means the installed packages are stale.
NPM_STAMPS := $(addsuffix /node_modules/.package-lock.json,$(NPM_DIRS))

.DEFAULT_GOAL := help
.PHONY: help build nats-server test lint bench demo generate verify fuzz chaos chaos-long clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z][a-z-]*:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## build bin/maker, stripped (-s -w), version from git describe (dev outside git)
	@echo "building bin/maker $(VERSION) (the first build compiles every dependency: a few minutes; later ones take seconds)"
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o bin/maker ./cmd/maker
	@echo "built bin/maker: run bin/maker --help, or put bin/ on your PATH"

# maker bench --processes runs a real nats-server: the version go.mod
# requires, built from the module cache (no network once go mod download
# has run), next to bin/maker where bench looks for it.
nats-server: ## build bin/nats-server, the version go.mod requires (for maker bench --processes)
	$(GO) build -trimpath -o bin/nats-server github.com/nats-io/nats-server/v2
	@bin/nats-server --version

test: $(NPM_STAMPS) ## install the Node checks' packages if npm exists, then go test -race ./...
	@echo "go test -race ./...: 10 to 15 minutes on 2 cores (the Node checks' packages above are installed by npm ci when their lock files change)"
	@command -v redis-server >/dev/null 2>&1 || echo "NOTE: redis-server not found: the tests use the embedded miniredis instead (MAKER_REQUIRE_REDIS=1 makes that an error)"
	$(GO) test -race -count=1 ./...

# Skipped with a note when npm is missing; the Node test then skips too
# (or fails, with MAKER_REQUIRE_NODE=1).
%/node_modules/.package-lock.json: %/package.json %/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		echo "npm ci --prefix $*"; \
		npm ci --prefix $* --no-audit --no-fund && touch $@ || \
			echo "NOTE: npm ci failed: the Node check of $* will skip (MAKER_REQUIRE_NODE=1 makes that an error)"; \
	else \
		echo "npm not found: not installing $* (its test will skip)"; \
	fi

lint: ## go vet, gofmt and staticcheck
	$(GO) vet ./...
	@out="$$($(GOFMT) -l .)"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) run $(STATICCHECK) ./...

bench: build ## run every Go benchmark once, then bin/maker bench
	$(GO) test -run='^$$' -bench=. -benchtime=1x ./...
	bin/maker bench

# The fault suite: real processes, faults by PID, by Redis command, through
# a TCP proxy and on the wire; each scenario checks the oracle in
# e2e/chaos_test.go and the last line sums up. A few minutes.
chaos: ## run the fault suite (real processes, injected faults, oracle checks)
	$(GO) test -tags chaos -count=1 -v -timeout 30m -run '^TestChaos' ./e2e/ 2>&1 | \
		grep -E '^(=== RUN|--- |PASS|FAIL|ok|chaos:)|chaos_test.go' ; exit $${PIPESTATUS[0]}

chaos-long: ## the fault suite's marathon: a 15-disk job (32,767 steps) with faults throughout
	MAKER_CHAOS_DISKS=15 $(GO) test -tags chaos -count=1 -v -timeout 90m -run '^TestChaosMarathon$$|^TestChaosSummary$$' ./e2e/ 2>&1 | \
		grep -E '^(=== RUN|--- |PASS|FAIL|ok|chaos:)|chaos_test.go' ; exit $${PIPESTATUS[0]}

demo: ## solve 10-disk Towers of Hanoi on an in-process fleet
	$(GO) run ./cmd/maker run --task hanoi --disks 10

# The API's OpenAPI document is built from schemas' doc comments
# (schemas/docs_gen.go): schemas first.
generate: ## regenerate generated files (schemas/jsonschema, internal/schemagen/docs_gen.go, internal/api/openapi.json and docs/openapi.json, clients/typescript/src/openapi.ts, judge/guard/gitleaks_rules.go)
	$(GO) generate ./schemas/...
	$(GO) generate ./...

# Drift is judged against schemas/ as it was before generating (a copy, so
# this works in a dirty tree or outside git too); in a clean clone it is the
# same as `git diff --exit-code -- schemas/`.
verify: ## go mod verify, fail on generated-file drift (schemas, openapi.json, the guard's gitleaks rules) and on go mod tidy changes
	$(GO) mod verify
	@snap="$$(mktemp -d)"; trap 'rm -rf "$$snap"' EXIT; cp -R schemas docs/openapi.json judge/guard/gitleaks_rules.go internal/schemagen/docs_gen.go "$$snap/"; \
	cp internal/api/openapi.json "$$snap/openapi.embedded.json"; \
	$(GO) generate ./schemas/... && $(GO) generate ./... || exit 1; \
	if ! diff -r "$$snap/schemas" schemas || ! diff "$$snap/openapi.json" docs/openapi.json || \
		! diff "$$snap/openapi.embedded.json" internal/api/openapi.json || ! diff "$$snap/docs_gen.go" internal/schemagen/docs_gen.go || \
		! diff "$$snap/gitleaks_rules.go" judge/guard/gitleaks_rules.go; then \
		echo "generated files drifted: run 'make generate' and commit the result"; exit 1; \
	fi
	$(GO) mod tidy -diff

# Go 1.26's fuzz coordinator can end a clean run with "context deadline
# exceeded" when -fuzztime runs out (golang/go#75804, fixed in Go 1.27).
# Such a run wrote no failing input, so it passes here with a note; a run
# that wrote one, or failed any other way, fails.
fuzz: ## run each fuzz target for FUZZTIME (default 10s)
	@for pkg in $$($(GO) list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./...); do \
		list="$$($(GO) test -list '^Fuzz' $$pkg)" || { echo "$$list"; exit 1; }; \
		for fz in $$(echo "$$list" | grep '^Fuzz'); do \
			echo "== $$pkg $$fz"; \
			out="$$($(GO) test -run='^$$' -fuzz="^$$fz\$$" -fuzztime=$(FUZZTIME) $$pkg 2>&1)"; rc=$$?; \
			echo "$$out"; \
			if [ $$rc -ne 0 ]; then \
				if echo "$$out" | grep -q 'Failing input written to' || ! echo "$$out" | grep -q 'context deadline exceeded'; then exit 1; fi; \
				echo "(not a failure: no failing input was written; golang/go#75804)"; \
			fi; \
		done; \
	done

clean: ## remove bin/ and coverage output
	rm -rf bin/ dist/ coverage*
