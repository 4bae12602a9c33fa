# idem's tasks. `make help` lists them.
GO        ?= go
PKGS      ?= ./...
FUZZTIME  ?= 30s
BENCHTIME ?= 2s

.DEFAULT_GOAL := help
.PHONY: help test test-race test-short vet fmt-check lint bench bench-stores bench-load fuzz long services demo build clean bench-wake

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*## "}{printf "  %-12s %s\n", $$1, $$2}'

test: vet fmt-check ## the test command: vet, gofmt, and every test with the race detector
	$(GO) test -race -count=1 -timeout 15m $(PKGS)

test-race: test ## same as test (the race detector is always on)

test-short: ## tests without the race detector, for a quick loop
	$(GO) test -count=1 $(PKGS)

vet: ## go vet
	$(GO) vet $(PKGS)

fmt-check: ## fail if a file is not gofmt-formatted
	@out=$$(gofmt -l . | grep -v '^testdata/' || true); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

lint: vet fmt-check ## staticcheck (installed on first use)
	@command -v staticcheck >/dev/null || $(GO) install honnef.co/go/tools/cmd/staticcheck@v0.8.2
	staticcheck $(PKGS)

bench: ## go test benchmarks: engine on each store (first execution, replay; c1, c64), group commit, middleware
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) -count 1 ./store/memory ./store/file ./idemhttp

bench-stores: ## engine, stores and middleware benchmarks, PostgreSQL next to pgbench, Redis next to raw EVALSHA: docs/bench/STORES.md (LONG=1 adds the 1M cleanup)
	./bench/stores.sh

bench-load: ## the load harness: idem next to a plain proxy and the peers; writes BENCHMARKS.md and its charts
	./bench/run.sh

fuzz: ## run every fuzz target for FUZZTIME each (corpus in testdata/fuzz)
	$(GO) test -run '^$$' -fuzz '^FuzzCanonicalJSON$$' -fuzztime $(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz '^FuzzValidateKey$$' -fuzztime $(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz '^FuzzParseKey$$' -fuzztime $(FUZZTIME) ./idemhttp
	$(GO) test -run '^$$' -fuzz '^FuzzMiddleware$$' -fuzztime $(FUZZTIME) ./idemhttp

long: ## long scale runs (IDEM_LONG=1), not part of `make test`: cleanup of 1M expired among 1M live on PostgreSQL
	IDEM_LONG=1 $(GO) test -count=1 -timeout 60m -v -run 'Long|Million' $(PKGS)

.PHONY: chaos
chaos: ## the fault suite, long version (IDEM_CHAOS=long): kill -9 and SIGSTOP of gateways on PostgreSQL, Redis and the file store, upstream faults, history checked
	$(GO) test -race -count=1 ./internal/chaos
	IDEM_CHAOS=long $(GO) test -race -count=1 -timeout 60m -v -run '^TestChaos$$' ./cmd/idem

services: ## start PostgreSQL and Redis if they are not running
	./scripts/services.sh

demo: ## run the gateway demo
	$(GO) run ./cmd/idem demo

build: ## build bin/idem
	$(GO) build -o bin/idem ./cmd/idem

clean: ## remove build output and the demo's data
	rm -rf bin idem-data

bench-wake: ## how soon a waiting duplicate gets its replay after the holder's completion (p50/p99/max), in process and across two clients, on memory, PostgreSQL and Redis
	$(GO) test -run '^TestWake$$' -count=1 -v ./store/memory ./store/postgres ./store/redis | grep -E 'replay after|^(ok|FAIL|---)'
