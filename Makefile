# tabd: the two commands are `make run` and `make test`; each installs what is missing.
SWIFT      ?= swift
# The project's own virtual environment (scripts/install-python-env makes it).
PYTHON     ?= $(CURDIR)/.venv/bin/python
HOST       ?= 127.0.0.1
PORT       ?= 8080
# Warnings are errors here, as in CI.
SWIFTFLAGS ?= -Xswiftc -warnings-as-errors
TSAN_DIR   ?= .build-tsan

.PHONY: help deps test-deps build release run cluster test test-swift test-tsan test-e2e test-browser test-web test-long soak bench clean fuzz test-fuzz

help:
	@echo "make run    install what is missing, build (release) and start tabd on $(HOST):$(PORT)"
	@echo "make test   install what is missing and run every test (unit, stress, TSan, end to end, browser)"
	@echo "make cluster  three NATS JetStream servers and three tabd nodes on loopback (docs/CLUSTER.md)"
	@echo "make test-long  the crash loop for 50 rounds and a minute of fuzzing per target"
	@echo "make fuzz SECONDS=N  each fuzz target for N seconds"
	@echo "make soak   ten minutes of churn, memory and open files sampled (docs/RELIABILITY.md)"
	@echo "make bench  run the benchmark against the C mirror and a Python server"
	@echo "make clean  remove build products"

deps:
	@scripts/install-deps

test-deps:
	@scripts/install-test-deps

build: deps
	$(SWIFT) build $(SWIFTFLAGS)

release: deps
	$(SWIFT) build -c release $(SWIFTFLAGS) --product tabd

## Start tabd in the foreground; it prints the URL to open. ARGS="--log-level debug" adds options.
run: release
	@echo "Starting tabd (Ctrl-C stops it)."
	.build/release/tabd --host $(HOST) --port $(PORT) $(ARGS)

## Three NATS JetStream servers and three tabd nodes on loopback ports 8080-8082 (PORT is
## the first); prints the URLs; Ctrl-C stops everything. ARGS go to every node.
cluster: release
	TABD_BIN=$(CURDIR)/.build/release/tabd scripts/cluster --port $(PORT) --host $(HOST) $(if $(ARGS),-- $(ARGS))

test: test-deps test-swift test-web test-tsan test-e2e test-browser test-fuzz
	@echo "make test: all suites passed"

## The long runs (about 15 minutes): the crash loop for 50 rounds, and each fuzz target for
## 60 s. `make test` runs 4 rounds and 10 s each.
test-long: test-deps
	$(SWIFT) build $(SWIFTFLAGS) --product tabd
	TABD_BIN=$(CURDIR)/.build/debug/tabd TABD_CRASH_ROUNDS=50 $(PYTHON) -m pytest -q -p no:cacheprovider Tests/e2e/test_crash_loop.py
	scripts/fuzz 60

## Ten minutes of churn against a release tabd, sampled every 10 s (docs/RELIABILITY.md):
## writes test-output/soak/soak.json and soak.png; fails if RSS or open files keep growing.
## ARGS="--duration 120" for a shorter run.
soak: test-deps release
	@scripts/install-python-env 'matplotlib:matplotlib'
	$(PYTHON) bench/soak $(ARGS)

## Unit, scenario and stress tests of the Swift targets.
test-swift:
	$(SWIFT) build --build-tests $(SWIFTFLAGS)
	$(SWIFT) test --skip-build $(SWIFTFLAGS)

## The concurrency suites again under ThreadSanitizer (own scratch path, so the normal build stays).
## Any report fails the run.
TSAN_FILTER ?= CoordinatorTests|StateStoreTests|WebSocketsTests|StressTests|ClusterTests
test-tsan:
	$(SWIFT) build --build-tests --sanitize=thread --scratch-path $(TSAN_DIR)
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/Tests/tsan-suppressions.txt" TABD_STRESS_SEEDS=1,2 TABD_STRESS_COMMANDS=100 \
	  $(SWIFT) test --skip-build --sanitize=thread --scratch-path $(TSAN_DIR) --filter '$(TSAN_FILTER)'

## The benchmark of docs/BENCHMARKS.md: tabd beside the C mirror and a Python server (minutes).
bench:
	bench/run $(ARGS)

## End-to-end tests: a real tabd on free ports, real WebSocket clients (Python).
## The fairness test (test_fairness.py) holds the release build to its latency bound.
test-e2e: test-deps
	$(SWIFT) build $(SWIFTFLAGS) --product tabd
	$(SWIFT) build -c release $(SWIFTFLAGS) --product tabd
	TABD_BIN=$(CURDIR)/.build/debug/tabd TABD_RELEASE_BIN=$(CURDIR)/.build/release/tabd \
	  $(PYTHON) -m pytest -q -p no:cacheprovider

## Browser tests: headless Chromium drives web/ against a real tabd (screenshots: test-output/screenshots/).
test-browser:
	@scripts/install-browser-deps
	$(SWIFT) build $(SWIFTFLAGS) --product tabd
	TABD_BIN=$(CURDIR)/.build/debug/tabd $(PYTHON) -m pytest -q -p no:cacheprovider Tests/browser

## The page's event fold (web/model.js) under node's own test runner, against the golden
## streams the Swift tests write to test-output/golden/ (it fails when there are none).
NODE ?= node
test-web:
	$(SWIFT) build --build-tests $(SWIFTFLAGS)
	rm -rf $(CURDIR)/test-output/golden
	TABD_GOLDEN_DIR=$(CURDIR)/test-output/golden $(SWIFT) test --skip-build $(SWIFTFLAGS) --filter GoldenStreamTests
	TABD_GOLDEN_DIR=$(CURDIR)/test-output/golden $(NODE) --test $(wildcard Tests/web/*.test.mjs)

clean:
	rm -rf .build $(TSAN_DIR)

## Coverage-guided fuzzing (libFuzzer, -sanitize=fuzzer,address; scripts/fuzz): each target for
## SECONDS seconds, one at a time; crash inputs in test-output/fuzz/. `make test-fuzz`: ~10 s each (CI).
SECONDS ?= 60
fuzz:
	scripts/fuzz $(SECONDS)

test-fuzz:
	scripts/fuzz 10
