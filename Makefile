# The two commands a new user needs:
#   make demo   the worker on an embedded Kafka-protocol broker, no services needed
#   make test   every test: starts a real Apache Kafka (integration/kafka/kafka.sh)
#               and PostgreSQL (integration/postgres/postgres.sh), runs unit +
#               integration tests against them, fuzzes the codecs briefly
GO        ?= go
KAFKA     := integration/kafka/kafka.sh
POSTGRES  := integration/postgres/postgres.sh
# A count, not a duration: a duration-based -fuzztime fails spuriously with
# "context deadline exceeded" in Go 1.26 (golang/go#75804, fixed in 1.27).
FUZZTIME  ?= 200000x
# -p 1: the integration, chaos and benchmark-smoke packages share one broker
# and two cores; run packages one after another so their timings hold.
TESTFLAGS ?= -p 1
# The Go modules vet and the tests run in, each in its own directory: ./... stops
# at a directory with a go.mod of its own. bench/ and deploy/ are such modules, so
# the benchmark's Redis, PostgreSQL and plotting clients and the Kubernetes and
# Compose libraries the deployment tests decode with stay out of the worker's go.mod.
MODULES   ?= . bench deploy

.PHONY: all build demo test unit integration fuzz kafka-up kafka-down postgres-up postgres-down vet

all: build

# `processor version` and dedup_build_info name the build by git describe, the
# commit and the time of the build: Go records no commit in a linked worktree
# or with -buildvcs=false. Without git, or outside a checkout, VERSION and
# COMMIT stay empty and the binary reports what Go recorded.
# `make build VERSION=v1.2.0` names it yourself.
VERSION    = $(shell git describe --tags --always --dirty 2>/dev/null)
COMMIT     = $(shell git describe --always --dirty --abbrev=40 --exclude='*' 2>/dev/null)
BUILD_TIME = $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
BUILDINFO  := github.com/dedupkit/dedup/internal/buildinfo
build:
	$(GO) build -ldflags "-X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).commit=$(COMMIT) \
	  -X $(BUILDINFO).buildTime=$(BUILD_TIME)" -o bin/processor ./cmd/processor

# A cold build takes a minute or two, so it says so before it starts.
demo:
	@echo "make demo: building the demo (a minute or two the first time), then running it"
	@$(GO) build -o bin/demo ./cmd/demo
	bin/demo

# The linters run at the versions internal/tools/go.mod pins, a module of its
# own: their dependencies stay out of the library's go.mod (a `tool` directive
# there would add them to the requirements every user of the library inherits),
# and `go tool -modfile` builds them from that file in any module's directory,
# cached after the first run.
TOOL := $(GO) tool -modfile=$(CURDIR)/internal/tools/go.mod

# Dead code: `deadcode -test` lists each function that no program, test or
# example of a module reaches, and every one of them fails the check except
#  - exported functions and methods of the library's public packages
#    (API_PACKAGES: the root package and those below), which users call even
#    where nothing here does (deduptest's Driver.SetNow, for one), and
#  - Example functions without an Output comment: documentation, never run.
# So unused code in internal/, the commands, examples/ and bench/ fails, and so
# do unexported functions anywhere. A new public package goes into API_PACKAGES.
API_PACKAGES := ^github[.]com/dedupkit/dedup(/(codecs|deduptest|inbox|processor|redrive))?$$
DEADCODE_FORMAT := {{range .Funcs}}{{printf "%s\t%s\t%s\n" $$.Path .Name .Position}}{{end}}
DEADCODE_KEEP := ($$1 ~ api && $$2 !~ /(^|[.])[^A-Z]/) || $$2 ~ /^Example/

# The public API, one declaration per line (internal/tools/apifile): make api
# writes api/dedup.txt after a deliberate change; make vet fails while the
# packages and the file differ, so every API change is a diff in review, and
# while an exported interface has more than three methods.
APIFILE = $(GO) -C $(CURDIR)/internal/tools run ./apifile -root $(CURDIR)
.PHONY: api
api:
	$(APIFILE) -write

vet:
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	@echo "public API: api/dedup.txt"; $(APIFILE)
	@set -e; for m in $(MODULES); do \
	  echo "vet, staticcheck, deadcode: $$m"; cd $(CURDIR)/$$m; \
	  $(GO) vet ./...; \
	  $(TOOL) staticcheck ./...; \
	  dead=$$($(TOOL) deadcode -test -f '$(DEADCODE_FORMAT)' ./...); \
	  printf '%s' "$$dead" | awk -F '\t' -v api='$(API_PACKAGES)' \
	    '!($(DEADCODE_KEEP)) { print $$3 ": unreachable func: " $$2; n++ } END { exit n > 0 }'; \
	done

# go test runs under gotestsum (pinned in internal/tools/go.mod): a line per
# package as it ends and the whole output of each failing test; then each
# skipped test with its output, normally its t.Skip reason (integration tests
# skip without a broker, where plain go test says only "ok"), each failed test
# with its output, a DONE line with the counts, and last a table of passed,
# skipped and failed tests per package (internal/tools/pkgtable.awk over the
# events gotestsum kept in bin/test.json). It exits with go test's status.
GOTESTSUM = $(TOOL) gotestsum --format-icons text --format-hide-empty-pkg \
  --jsonfile $(CURDIR)/bin/test.json --post-run-command 'awk -f "$(CURDIR)/internal/tools/pkgtable.awk"'
# In a loop over $(MODULES) with the module directory in $$m.
GOTEST    = $(GOTESTSUM) --format pkgname-and-test-fails --raw-command -- $(GO) -C $$m test -json -count=1

# Unit tier only: integration tests skip without KAFKA_BROKERS (and
# DEDUP_POSTGRES_DSN).
unit:
	for m in $(MODULES); do $(GOTEST) $(TESTFLAGS) ./... || exit 1; done

# Starts Kafka unless one is already running for this checkout, and stops it
# afterwards only if it started it. KAFKA_BROKERS set by the caller wins:
# then no local broker is started at all (and the multi-broker tests run only
# if that cluster has three brokers and KAFKA_PROXY_ROUTES routes them; the
# TLS/SASL tests only if KAFKA_SECURE_BROKERS and the rest of `kafka.sh
# secure-env`'s variables are set).
# PostgreSQL (the inbox's tests) likewise, with or without KAFKA_BROKERS:
# postgres.sh's server (127.0.0.1:15432) unless it is already running for this
# checkout, stopped afterwards (after a failure too) only if started here, its
# address in DEDUP_POSTGRES_DSN. DEDUP_POSTGRES_DSN set by the caller wins: then
# no local server is started.
# Then the multi-broker tests run against a three-node cluster of their own.
test: vet test-rules
	@set -e; \
	pgstarted=; trap 'if [ -n "$$pgstarted" ]; then $(POSTGRES) down; fi' EXIT; \
	if [ -n "$$DEDUP_POSTGRES_DSN" ]; then \
	  echo "make test: using the caller's DEDUP_POSTGRES_DSN"; \
	else \
	  if ! $(POSTGRES) status 2>/dev/null | grep -q alive; then pgstarted=1; $(POSTGRES) up; fi; \
	  DEDUP_POSTGRES_DSN=$$($(POSTGRES) dsn); export DEDUP_POSTGRES_DSN; \
	fi; \
	if [ -n "$$KAFKA_BROKERS" ]; then \
	  echo "make test: using KAFKA_BROKERS=$$KAFKA_BROKERS"; \
	  for m in $(MODULES); do $(GOTEST) -timeout 15m $(TESTFLAGS) ./...; done; \
	else \
	  started=; \
	  if ! $(KAFKA) status 2>/dev/null | grep -q alive; then $(KAFKA) up; started=1; fi; \
	  status=0; \
	  for m in $(MODULES); do \
	    KAFKA_BROKERS=$$($(KAFKA) brokers) KAFKA_PROXY_ROUTES=$$($(KAFKA) proxy-routes) \
	      env $$($(KAFKA) secure-env) $(GOTEST) -timeout 15m $(TESTFLAGS) -skip '$(CLUSTER_TESTS)' ./... || status=$$?; \
	  done; \
	  if [ -n "$$started" ]; then $(KAFKA) down; fi; \
	  if [ -n "$$pgstarted" ]; then pgstarted=; $(POSTGRES) down; fi; \
	  [ $$status = 0 ] || exit $$status; \
	  $(MAKE) --no-print-directory test-cluster; \
	fi
	$(MAKE) --no-print-directory fuzz

# The deployment artefacts (deploy/k8s, docker-compose.yml) checked against the
# worker, alone (make test runs them as one of $(MODULES)). Needs no broker.
.PHONY: test-deploy
test-deploy:
	m=deploy; $(GOTEST) ./...

# The tests that need several brokers (a worker cut off from one broker only)
# against a three-node cluster on 127.0.0.1:11092-11094 (data in .kafka-cluster,
# deleted afterwards; never the broker above). `make test` runs it.
CLUSTER_KAFKA := KAFKA_NODES=3 KAFKA_PORT=11092 KAFKA_DATA=$(CURDIR)/.kafka-cluster $(KAFKA)
CLUSTER_TESTS := ^TestPartialPartition
.PHONY: test-cluster
test-cluster:
	@set -e; trap '$(CLUSTER_KAFKA) clean' EXIT; $(CLUSTER_KAFKA) up; \
	KAFKA_BROKERS=$$($(CLUSTER_KAFKA) brokers) KAFKA_PROXY_ROUTES=$$($(CLUSTER_KAFKA) proxy-routes) \
	  $(GOTESTSUM) --format standard-verbose --raw-command -- \
	  $(GO) test -json -count=1 -timeout 15m -run '$(CLUSTER_TESTS)' ./integration

# The alert rules of deploy/prometheus, with the promtool internal/tools/go.mod
# pins (its first build takes minutes).
.PHONY: test-rules
test-rules:
	$(TOOL) promtool check rules deploy/prometheus/rules.yml
	$(TOOL) promtool test rules deploy/prometheus/rules_test.yml

# Bounded fuzzing of the codecs and the engine's decode and dead-letter paths
# (about 10 s each here): garbage must never panic, and a dead letter always fits.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecoder$$' -fuzztime $(FUZZTIME) ./codecs
	$(GO) test -run '^$$' -fuzz '^FuzzSeen$$' -fuzztime $(FUZZTIME) ./codecs
	$(GO) test -run '^$$' -fuzz '^FuzzScanObject$$' -fuzztime $(FUZZTIME) ./codecs
	$(GO) test -run '^$$' -fuzz '^FuzzPrepare$$' -fuzztime $(FUZZTIME) ./internal/engine
	$(GO) test -run '^$$' -fuzz '^FuzzFitDeadLetter$$' -fuzztime $(FUZZTIME) ./internal/engine

# A single local broker on 127.0.0.1:$${KAFKA_PORT:-9092} (KAFKA_NODES=3 for three).
kafka-up:
	$(KAFKA) up

kafka-down:
	$(KAFKA) down

# A local PostgreSQL on 127.0.0.1:15432 (POSTGRES_PORT; data in .postgres), the
# server `make test` starts; a package's tests by hand against it:
#   DEDUP_POSTGRES_DSN=$(integration/postgres/postgres.sh dsn) go test ./inbox
postgres-up:
	$(POSTGRES) up

postgres-down:
	$(POSTGRES) down

# The fault suite at scale (docs/reliability.md). Starts its own 3-broker
# cluster on 127.0.0.1:19092-19094 (data in .kafka-chaos, wiped first; never the
# broker of `make test`), produces 500k events with 20% duplicates and 5k malformed
# records while it SIGKILLs workers 30 times, scales them, kills two brokers, makes a
# zombie, cuts a worker off the brokers twice and wipes a state dir; exactly-once is
# asserted, best-effort (goka's runtime) reported.
# Logs of every worker incarnation in .chaos/run-*. Extra flags: CHAOSFLAGS=...
CHAOSFLAGS ?=
.PHONY: chaos chaos-short
chaos:
	$(GO) run ./integration/chaos $(CHAOSFLAGS)

# The short version on a single broker of its own (TestChaosShort runs the same
# preset against KAFKA_BROKERS in `make test`).
chaos-short:
	$(GO) run ./integration/chaos --preset short $(CHAOSFLAGS)

# The benchmark (docs/benchmarks.md): starts a broker of its own on
# 127.0.0.1:29092 (data in .kafka-bench, deleted afterwards; never the broker of
# `make test`), Redis and PostgreSQL on 26379/25432 (apt-get installed when missing),
# runs every contender 3 times on 1M events, measures latency, restore and memory,
# and writes docs/benchmarks.md and its charts. The page says how long its run took.
# Then it runs make bench-slow (docs/benchmarks-slow.md, below).
# The Kafka Streams contenders need java (17) and mvn: the harness builds
# bench/kstreams/target/dedup-kstreams.jar with `mvn -q -B package` when it is
# missing or older than its sources.
# bench-smoke: the same at toy size in about a minute (Kafka Streams only as
# kstreams-repartition: each JVM start costs about 10 s), no doc; it fails unless every
# contender delivered every event exactly once. Extra flags: BENCHFLAGS=...
# make bench then runs make bench-slow (below) with SLOWFLAGS as its BENCHFLAGS.
BENCHFLAGS  ?=
SLOWFLAGS   ?=
BENCH_KAFKA := KAFKA_PORT=29092 KAFKA_DATA=$(CURDIR)/.kafka-bench $(KAFKA)
.PHONY: bench bench-smoke bench-failover bench-slow
bench bench-smoke:
	$(GO) -C bench build -o $(CURDIR)/bin/bench ./cmd/bench
	@set -e; trap '$(BENCH_KAFKA) clean' EXIT; $(BENCH_KAFKA) up; \
	BENCH_COMMAND="make $@$(if $(BENCHFLAGS), BENCHFLAGS='$(BENCHFLAGS)')" \
	  bin/bench $(if $(filter bench-smoke,$@),smoke,run) -brokers 127.0.0.1:29092 \
	  -kafka-data $(CURDIR)/.kafka-bench $(BENCHFLAGS)
	$(if $(filter bench,$@),@$(MAKE) --no-print-directory bench-slow BENCHFLAGS='$(SLOWFLAGS)')

# The slow-handler benchmark (docs/benchmarks-slow.md), about 15 minutes: on a broker
# of its own on 127.0.0.1:29092 (as make bench, one after the other), a handler that
# sleeps 100 ms (a backlog of 1M records) and 3 s (20k records), 12 partitions, one
# instance of each contender: the worker at Concurrency 1, 100 and 1,000, Kafka Streams
# at 1 and 12 stream threads, Confluent's Parallel Consumer (built into the Kafka Streams
# jar by Maven). Each row's rate over a 40 s window after a 10 s warm-up, exactly-once
# checked against the group's committed offsets. Smaller or longer:
# BENCHFLAGS='-cases 100ms:200000,3s:20000 -window 20s -warmup 5s'; '-contenders' picks rows.
bench-slow:
	$(GO) -C bench build -o $(CURDIR)/bin/bench ./cmd/bench
	@set -e; trap '$(BENCH_KAFKA) clean' EXIT; $(BENCH_KAFKA) up; \
	BENCH_COMMAND="make $@$(if $(BENCHFLAGS), BENCHFLAGS='$(BENCHFLAGS)')" \
	  bin/bench slow -brokers 127.0.0.1:29092 -kafka-data $(CURDIR)/.kafka-bench $(BENCHFLAGS)

# The failover benchmark (docs/benchmarks-failover.md): on a broker of its own on
# 127.0.0.1:17092 (data in .kafka-failover, deleted afterwards), 3 exactly-once
# instances with 2M seen IDs under 4,000 events/s; each event (kill -9, kill -9 and
# restart, SIGTERM and restart, a 4th instance joins, an instance stopped for good)
# 5 times, the pause it causes read from the group's committed offsets, the output
# checked exactly-once after each scenario. Smaller: BENCHFLAGS='-ids 200000 -repeat 2',
# or '-quick'; '-scenarios kill,scale-out' picks events, '-contenders eos,kstreams' kinds.
FAILOVER_KAFKA := KAFKA_PORT=17092 KAFKA_DATA=$(CURDIR)/.kafka-failover $(KAFKA)
bench-failover:
	$(GO) -C bench build -o $(CURDIR)/bin/bench ./cmd/bench
	@set -e; trap '$(FAILOVER_KAFKA) clean' EXIT; $(FAILOVER_KAFKA) up; \
	BENCH_COMMAND="make $@$(if $(BENCHFLAGS), BENCHFLAGS='$(BENCHFLAGS)')" \
	  bin/bench failover -brokers 127.0.0.1:17092 -kafka-data $(CURDIR)/.kafka-failover $(BENCHFLAGS)
