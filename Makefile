# idem's tasks. `make help` lists them.
GO        ?= go
PKGS      ?= ./...
FUZZTIME  ?= 30s
BENCHTIME ?= 2s
# The goal run's arguments (make bench-goals); BENCHMARKS.md prints the
# command it was written by.
BENCH_GOALS_ARGS ?= -rounds 1 -duration 2s -scale quick -duel-pairs 16 -call-pairs 16 -append-pairs 16 -churn -footprint file=10000000,pebble=1000000,redis=1000000,postgres=1000000

.DEFAULT_GOAL := help
.PHONY: help test test-race test-short test-deps vet fmt-check lint bench bench-stores bench-builds bench-load bench-goals bench-scale fuzz long services demo build clean static bench-wake scale-file temporal crash bench-pgtx bench-seal

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*## "}{printf "  %-12s %s\n", $$1, $$2}'

test: test-deps vet fmt-check ## the test command: installs what tests need, then vet, gofmt, and every test with the race detector
	./scripts/dynalite.sh run $(GO) test -race -count=1 -timeout 15m $(PKGS)
	cd trigger/temporal && $(GO) vet ./... && ../../scripts/temporal.sh run $(GO) test -race -count=1 -timeout 10m ./...
	cd bench && $(GO) vet ./... && $(GO) test -race -count=1 -timeout 5m ./...
	cd rpc && $(GO) vet ./... && $(GO) test -race -count=1 -timeout 5m ./...
	cd examples/routers && $(GO) vet ./... && $(GO) test -race -count=1 -timeout 5m ./...

test-deps: ## install what the tests need beyond Go and the services (versitygw, promtool, chromium, ...), once; cached
	./scripts/test-deps.sh

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

bench-builds: ## duel the gateway built from BASE (default HEAD) against the working tree, first calls on the file store: throughput ratio and CPU per request, pair by pair
	./bench/builds.sh $(or $(BASE),HEAD)

bench-load: ## the load harness: idem next to a plain proxy and the peers; writes BENCHMARKS.md and its charts
	./bench/run.sh

bench-goals: ## the run behind BENCHMARKS.md's goal table: rounds, duels, the middleware against its reference, the file store's log against one synced append, churn, and the stores at scale (file at 10^7 keys), about 60 min
	./bench/run.sh $(BENCH_GOALS_ARGS)

bench-scale: ## the stores at SCALE_KEYS live keys (default 10^7): memory per key, restart after Close and after kill -9, for file, pebble, redis (appendfsync always) and postgres; writes BENCHMARKS.md with that section only
	./bench/run.sh -skip-load -scale off -footprint file=$(or $(SCALE_KEYS),10000000),pebble=$(or $(SCALE_KEYS),10000000),redis=$(or $(SCALE_KEYS),10000000),postgres=$(or $(SCALE_KEYS),10000000)

fuzz: ## run every fuzz target for FUZZTIME each (corpus in testdata/fuzz)
	$(GO) test -run '^$$' -fuzz '^FuzzCanonicalJSON$$' -fuzztime $(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz '^FuzzValidateKey$$' -fuzztime $(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz '^FuzzParseKey$$' -fuzztime $(FUZZTIME) ./internal/httpfield
	$(GO) test -run '^$$' -fuzz '^FuzzMiddleware$$' -fuzztime $(FUZZTIME) ./idemhttp
	$(GO) test -run '^$$' -fuzz '^FuzzOpen$$' -fuzztime $(FUZZTIME) ./seal
	$(GO) test -run '^$$' -fuzz '^FuzzParseKeyring$$' -fuzztime $(FUZZTIME) ./seal

long: ## long runs (IDEM_LONG=1), not part of `make test`: cleanup of 1M expired among 1M live on PostgreSQL, `go install @version` of a zip of the checkout, brokers' consumers killed at length
	IDEM_LONG=1 $(GO) test -count=1 -timeout 60m -v -run 'Long|Million' $(PKGS)

.PHONY: chaos
chaos: ## the fault suite, long version (IDEM_CHAOS=long): kill -9 and SIGSTOP of gateways on PostgreSQL, Redis and the file store, upstream faults, history checked
	$(GO) test -race -count=1 ./internal/gateway/chaos
	IDEM_CHAOS=long $(GO) test -race -count=1 -timeout 60m -v -run '^TestChaos$$' ./cmd/idem

services: ## start PostgreSQL and Redis if they are not running
	./scripts/services.sh

demo: ## run the gateway demo
	$(GO) run ./cmd/idem demo

build: ## build bin/idem
	$(GO) build -o bin/idem ./cmd/idem

static: ## build bin/idem as the container image does: static, no cgo (deploy/Containerfile)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags="-s -w" -o bin/idem ./cmd/idem

clean: ## remove build output and the demo's data
	rm -rf bin idem-data

# The TypeScript client (clients/typescript): `make test` runs its tests too.
.PHONY: test-ts
test: test-ts
test-ts: ## the TypeScript client's tests (node --test; installs node_modules and chromium when missing)
	./scripts/ts-test.sh

scale-file: ## the file store at SCALE_KEYS live keys (default 10M; ~7 GB of log under SCALE_DIR, default /tmp): index bytes per key (RSS growth), restart from the index snapshot, after a kill, and from the whole log (docs/bench/FILE-INDEX.md)
	./bench/filescale.sh $(or $(SCALE_KEYS),10000000)

bench-wake: ## how soon a waiting duplicate gets its replay after the holder's completion (p50/p99/max), in process and across two clients, on memory, the file store, PostgreSQL and Redis, one store at a time
	$(GO) test -p 1 -run '^TestWake$$' -count=1 -v ./store/memory ./store/file ./store/postgres ./store/redis | grep -E 'replay after|^(ok|FAIL|---)'

temporal: ## build (once, cached) and start the Temporal dev server that trigger/temporal's tests use, and leave it running (make test starts and stops its own; scripts/temporal.sh stop)
	./scripts/temporal.sh start

crash: test-deps ## crash tests at length: the ledger example killed with SIGKILL 300 times, seed 004's submitter killed between its task and its record, the file store with OneSync killed 80 times between reservations and completions
	IDEM_LONG=1 $(GO) test -race -count=1 -timeout 30m -v -run 'TestCrash|TestTaskQueueCrash|TestSnapshotCrashOneSync' ./examples/ledger ./store/s3 ./store/file

bench-pgtx: ## exactly-once path (pgtx) next to the plain reserve/complete path on PostgreSQL, c1 and c16, five interleaved rounds (benchstat the output)
	mkdir -p bin && $(GO) test -c -o bin/pgtx.test ./store/postgres/pgtx
	cd store/postgres/pgtx && for i in 1 2 3 4 5; do ../../../bin/pgtx.test -test.run '^$$' -test.bench Pairs -test.benchtime 1s; done

bench-seal: ## the seal's cost per reserve+complete pair next to the bare memory and PostgreSQL stores
	$(GO) test -run '^$$' -bench 'ReserveComplete' -count 6 ./seal
