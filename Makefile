# tabd: the two commands are `make run` and `make test`; each installs what is missing.
SWIFT      ?= swift
# The project's own virtual environment (scripts/install-python-env makes it).
PYTHON     ?= $(CURDIR)/.venv/bin/python
HOST       ?= 127.0.0.1
PORT       ?= 8080
# Warnings are errors here, as in CI.
SWIFTFLAGS ?= -Xswiftc -warnings-as-errors
TSAN_DIR   ?= .build-tsan

# The commit this build is of, for `--version` (Sources/CBuildInfo/build_commit.h, written
# only when it changed): before any target, on every make run.
BUILD_INFO := $(shell scripts/build-info)

.PHONY: help deps test-deps build release run cluster install install-build deb uninstall test test-swift test-tsan test-e2e test-browser test-web test-long soak bench clean fuzz test-fuzz

help:
	@echo "make run    install what is missing, build (release) and start tabd on $(HOST):$(PORT)"
	@echo "make test   install what is missing and run every test (unit, stress, TSan, end to end, browser)"
	@echo "make cluster  three NATS JetStream servers and three tabd nodes on loopback (docs/CLUSTER.md)"
	@echo "make install PREFIX=/usr/local  build (release) and install tabd, tabctl, the web page, docs and the systemd unit; DESTDIR is honoured"
	@echo "make uninstall PREFIX=/usr/local  remove what make install put there"
	@echo "make deb   build (release) the Debian package .build/deb/tabd_VERSION_ARCH.deb (apt install ./… on a machine without Swift)"
	@echo "make test-long  the crash loop for 50 rounds, 50 random cluster fault rounds, the shard CAS race for 20,000 rounds and 10 leader kills, a minute of fuzzing per target, ten minutes of connection churn"
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
	$(SWIFT) build -c release $(SWIFTFLAGS) --product tabctl

## Start tabd in the foreground; it prints the URL to open. ARGS="--log-level debug" adds options.
run: release
	@echo "Starting tabd (Ctrl-C stops it)."
	.build/release/tabd --host $(HOST) --port $(PORT) $(ARGS)

## Three NATS JetStream servers and three tabd nodes on loopback ports 8080-8082 (PORT is
## the first); prints the URLs; Ctrl-C stops everything. ARGS go to every node.
cluster: release
	scripts/install-pinned && TABD_BIN=$(CURDIR)/.build/release/tabd scripts/cluster --port $(PORT) --host $(HOST) $(if $(ARGS),-- $(ARGS))

## Install under PREFIX (DESTDIR is put in front of every path, for packagers):
##   PREFIX/bin/tabd, PREFIX/bin/tabctl         the executables (release build)
##   PREFIX/share/tabd/web/                     the page; an installed tabd finds it by itself
##   PREFIX/share/tabd/contrib/                 the systemd unit (its paths set to PREFIX) and how to use it
##                                              (not enabled: copying it is the operator's choice)
##   PREFIX/share/doc/tabd/                     README.md, LICENSE, docs/
## BIN_DIR=DIR installs the executables already in DIR instead of building them;
## INSTALL_PRODUCTS chooses which.
PREFIX           ?= /usr/local
DESTDIR          ?=
BIN_DIR          ?=
INSTALL_PRODUCTS ?= tabd tabctl
INSTALL          ?= install
# The page's files; web/package.json describes the npm package (npm pack in web/), not the page.
WEB_FILES   = $(filter-out web/package.json,$(wildcard web/*))
DOC_FILES   = README.md LICENSE
# docs/ as it is (the pages, and the pictures they show), so the links keep working.
DOCS_DIRS   = docs $(patsubst %/,%,$(sort $(dir $(wildcard docs/*/*))))

# The installed executables carry the Swift runtime and Foundation in them
# (--static-swift-stdlib), so they run without the toolchain; their own scratch path keeps
# `make run`'s build as it is.
INSTALL_SCRATCH ?= .build-install
install-build: deps
	for p in $(INSTALL_PRODUCTS); do $(SWIFT) build -c release --static-swift-stdlib $(SWIFTFLAGS) --scratch-path $(INSTALL_SCRATCH) --product $$p || exit 1; done

install: $(if $(BIN_DIR),,install-build)
	$(INSTALL) -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/tabd/web $(DESTDIR)$(PREFIX)/share/tabd/contrib \
	  $(foreach d,$(DOCS_DIRS),$(DESTDIR)$(PREFIX)/share/doc/tabd/$(d))
	for p in $(INSTALL_PRODUCTS); do $(INSTALL) -m 755 $(or $(BIN_DIR),$(INSTALL_SCRATCH)/release)/$$p $(DESTDIR)$(PREFIX)/bin/ || exit 1; done
	$(INSTALL) -m 644 $(WEB_FILES) $(DESTDIR)$(PREFIX)/share/tabd/web/
	sed 's|/usr/local/|$(PREFIX)/|g' contrib/tabd.service > $(DESTDIR)$(PREFIX)/share/tabd/contrib/tabd.service
	chmod 644 $(DESTDIR)$(PREFIX)/share/tabd/contrib/tabd.service
	$(INSTALL) -m 644 contrib/README.md $(DESTDIR)$(PREFIX)/share/tabd/contrib/
	$(INSTALL) -m 644 $(DOC_FILES) $(DESTDIR)$(PREFIX)/share/doc/tabd/
	for d in $(DOCS_DIRS); do $(INSTALL) -m 644 $$(find $$d -maxdepth 1 -type f) $(DESTDIR)$(PREFIX)/share/doc/tabd/$$d/ || exit 1; done
	@echo "installed under $(DESTDIR)$(PREFIX); start it with $(PREFIX)/bin/tabd, or as a service: $(PREFIX)/share/tabd/contrib/README.md"

## The Debian package, .build/deb/tabd_VERSION_ARCH.deb: tabd and tabctl (stripped, the Swift
## runtime in them), the page, the systemd unit (the package's `tabd` user), /etc/default/tabd
## as a conffile, man pages from --help, the docs (scripts/make-deb). `apt install
## ./.build/deb/tabd_….deb` installs it on a Debian without the toolchain. BIN_DIR=DIR packs
## the executables already in DIR (a release build with --static-swift-stdlib).
DEB_DIR ?= .build/deb
deb: $(if $(BIN_DIR),,install-build)
	@scripts/install-deps binutils
	scripts/make-deb $(or $(BIN_DIR),$(INSTALL_SCRATCH)/release) $(DEB_DIR)

uninstall:
	rm -f $(foreach p,$(INSTALL_PRODUCTS),$(DESTDIR)$(PREFIX)/bin/$(p))
	rm -rf $(DESTDIR)$(PREFIX)/share/tabd $(DESTDIR)$(PREFIX)/share/doc/tabd

## Every suite in turn, each one's time printed at the end (test-output/suite-times.txt), and
## the whole run's. The fuzzers' build (a sanitized release build of its own) runs beside the
## browser tests, which leave a core mostly idle; test-fuzz then waits for it.
SUITES = test-swift test-web test-tsan test-e2e test-browser test-fuzz
test: test-deps
	@mkdir -p test-output test-output/fuzz; rm -f test-output/suite-times.txt
	@begin=$$(date +%s); fuzzbuild=; \
	for s in $(SUITES); do \
	  if [ $$s = test-browser ]; then scripts/fuzz --build-only > test-output/fuzz/build-beside-browser.log 2>&1 & fuzzbuild=$$!; fi; \
	  if [ $$s = test-fuzz ] && [ -n "$$fuzzbuild" ]; then wait $$fuzzbuild || { cat test-output/fuzz/build-beside-browser.log; exit 1; }; fi; \
	  start=$$(date +%s); \
	  $(MAKE) --no-print-directory $$s; rc=$$?; \
	  echo "$$s: $$(( $$(date +%s) - start )) s$$( [ $$s = test-browser ] && echo ' (the fuzzers built beside it)')$$( [ $$rc -eq 0 ] || echo ', failed' )" >> test-output/suite-times.txt; \
	  if [ $$rc -ne 0 ]; then [ -z "$$fuzzbuild" ] || wait $$fuzzbuild; echo "make test: $$s failed"; cat test-output/suite-times.txt; exit $$rc; fi; \
	done; \
	echo "all: $$(( $$(date +%s) - begin )) s" >> test-output/suite-times.txt
	@echo "make test: all suites passed"; cat test-output/suite-times.txt

## The long runs (about an hour and a half): the crash loop and the power cuts (the state file on a
## file system that drops what was not synced) for 50 rounds each, 50 random rounds mixing
## the cluster's faults (Tests/e2e/test_cluster_faults.py), two writers racing one
## per-subject expectation on a shard stream for 20,000 rounds while its leader is SIGKILLed
## 10 times (Tests/e2e/test_shard_cas.py; figures in test-output/shard-cas/summary.json), a
## running cluster of the tabd before shards (built by scripts/build-tabd-before-shards) moved
## into shards node by node (Tests/e2e/test_cluster_move.py), each
## fuzz target for 60 s, and the churn soak: ten minutes of waves of 2,000 clients over 200
## rooms that come and go, RSS flat after the first minute (test-output/churn/churn.json and
## churn.png; docs/RELIABILITY.md "Churn"). `make test` runs 4 crash rounds, 3 power cuts,
## 2,000 shard rounds with 3 kills, 10 s of each fuzz target and a short churn.
test-long: test-deps
	$(SWIFT) build $(SWIFTFLAGS) --product tabd
	TABD_BIN=$(CURDIR)/.build/debug/tabd TABD_CRASH_ROUNDS=50 $(PYTHON) -m pytest -q -p no:cacheprovider Tests/e2e/test_crash_loop.py
	TABD_BIN=$(CURDIR)/.build/debug/tabd TABD_POWER_CUT_ROUNDS=50 $(PYTHON) -m pytest -q -p no:cacheprovider Tests/e2e/test_power_cut.py
	TABD_BIN=$(CURDIR)/.build/debug/tabd TABD_FAULT_RANDOM_ROUNDS=50 $(PYTHON) -m pytest -q -s -p no:cacheprovider Tests/e2e/test_cluster_faults.py -k random_rounds
	TABD_SHARD_CAS_ROUNDS=20000 TABD_SHARD_CAS_KILLS=10 $(PYTHON) -m pytest -q -s -p no:cacheprovider Tests/e2e/test_shard_cas.py -k racing
	TABD_BIN=$(CURDIR)/.build/debug/tabd TABD_OLD_BIN=$$(scripts/build-tabd-before-shards) $(PYTHON) -m pytest -q -s -p no:cacheprovider Tests/e2e/test_cluster_move.py
	scripts/fuzz 60
	$(SWIFT) build -c release $(SWIFTFLAGS) --product tabd
	$(SWIFT) build -c release $(SWIFTFLAGS) --product tabbench
	@scripts/install-python-env 'matplotlib:matplotlib'
	$(PYTHON) bench/soak --churn --duration 600 --out $(CURDIR)/test-output/churn

## Ten minutes of churn against a release tabd, sampled every 10 s (docs/RELIABILITY.md):
## writes test-output/soak/soak.json and soak.png; fails if RSS or open files keep growing.
## ARGS="--duration 120" for a shorter run.
soak: test-deps release
	@scripts/install-python-env 'matplotlib:matplotlib'
	$(PYTHON) bench/soak $(ARGS)

## A test process that crashed can leave `swift test` waiting for ever (seen once, after a
## ThreadSanitizer runtime CHECK): each run is bounded, ten times its usual time. Past it,
## `timeout` kills the whole process group (tabd and nats-server children included) and
## the suite fails with 124.
BOUNDED = scripts/bounded
## Unit, scenario and stress tests of the Swift targets. The minute of 3-second tokens
## (FreshTokensRunTests) runs beside the rest in a test process of its own: in the same
## process the stress suites' long stretches of work could hold both of Swift's cooperative
## threads past a refresh's lead (0.75 s), and its client would see its token run out (seen
## once on CI). `--ignore-lock`: both read the same build.
test-swift:
	$(SWIFT) build --build-tests $(SWIFTFLAGS)
	@mkdir -p test-output
	@$(BOUNDED) 900 $(SWIFT) test --skip-build --ignore-lock $(SWIFTFLAGS) --filter FreshTokensRunTests > test-output/fresh-tokens.log 2>&1 & tokens=$$!; \
	$(BOUNDED) 900 $(SWIFT) test --skip-build --ignore-lock $(SWIFTFLAGS) --skip FreshTokensRunTests; rc=$$?; \
	wait $$tokens; trc=$$?; echo "== the token run (test-output/fresh-tokens.log)"; grep -E "fresh tokens run|✘|Test run" test-output/fresh-tokens.log; \
	if [ $$trc -ne 0 ]; then cat test-output/fresh-tokens.log; fi; [ $$rc -eq 0 ] && [ $$trc -eq 0 ]

## The concurrency suites again under ThreadSanitizer (own scratch path, so the normal build stays).
## Any report fails the run.
TSAN_FILTER ?= CoordinatorTests|StateStoreTests|WebSocketsTests|StressTests|ClusterTests|TabdClientTests|TabdServerTests
test-tsan:
	$(SWIFT) build --build-tests --sanitize=thread --scratch-path $(TSAN_DIR)
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$(CURDIR)/Tests/tsan-suppressions.txt" TABD_STRESS_SEEDS=1,2 TABD_STRESS_COMMANDS=100 \
	  TABD_TOKEN_LIFETIME=10 TABD_TOKEN_RUN_SECONDS=30 \
	  $(BOUNDED) 1500 $(SWIFT) test --skip-build --sanitize=thread --scratch-path $(TSAN_DIR) --filter '$(TSAN_FILTER)'

## The benchmark of docs/BENCHMARKS.md: tabd beside the C mirror and a Python server (minutes).
bench:
	bench/run $(ARGS)

## End-to-end tests: a real tabd on free ports, real WebSocket clients (Python).
## The fairness test (test_fairness.py) holds the release build to its latency bound, and the
## churn test (test_churn.py) the release tabd, driven by the release tabbench, to its memory bound.
## Much of a test's time is waiting (on tabd, the engine, timeouts): they run E2E_WORKERS at
## a time (pytest-xdist; 3 took 5 minutes here where one at a time took 15), the longest
## first; those marked `serial` (a latency bound) run alone after them.
E2E_WORKERS ?= 3
## The release builds are those `make install` and `make deb` make (the Swift runtime linked
## in, INSTALL_SCRATCH): the package test (test_deb.py) packs and installs them.
E2E_ENV = TABD_BIN=$(CURDIR)/.build/debug/tabd TABCTL_BIN=$(CURDIR)/.build/debug/tabctl TABD_RELEASE_BIN=$(CURDIR)/$(INSTALL_SCRATCH)/release/tabd \
	  TABBENCH_RELEASE_BIN=$(CURDIR)/$(INSTALL_SCRATCH)/release/tabbench
test-e2e: test-deps
	@scripts/install-deps binutils
	$(SWIFT) build $(SWIFTFLAGS) --product tabd
	$(SWIFT) build $(SWIFTFLAGS) --product tabctl
	for p in tabd tabctl tabbench; do $(SWIFT) build -c release --static-swift-stdlib $(SWIFTFLAGS) --scratch-path $(INSTALL_SCRATCH) --product $$p || exit 1; done
	$(E2E_ENV) $(PYTHON) -m pytest -q -p no:cacheprovider -n $(E2E_WORKERS) --dist worksteal -m "not serial"
	$(E2E_ENV) $(PYTHON) -m pytest -q -p no:cacheprovider -m serial

## Browser tests: headless Chromium drives web/ against a real tabd (screenshots: test-output/screenshots/).
test-browser:
	@scripts/install-browser-deps
	$(SWIFT) build $(SWIFTFLAGS) --product tabd
	TABD_BIN=$(CURDIR)/.build/debug/tabd $(PYTHON) -m pytest -q -p no:cacheprovider Tests/browser

## The page's event fold (web/model.js) under node's own test runner, against the golden
## streams the Swift tests write to test-output/golden/ (it fails when there are none); the
## JavaScript client (web/tabd.js) against a scripted transport, and the scripted sessions of
## Tests/sessions/ that the Swift client runs too (SharedSessionTests); the modules' types
## (web/*.d.ts) with TypeScript, over a usage file.
NODE ?= node
test-web:
	$(SWIFT) build --build-tests $(SWIFTFLAGS)
	rm -rf $(CURDIR)/test-output/golden
	TABD_GOLDEN_DIR=$(CURDIR)/test-output/golden $(SWIFT) test --skip-build $(SWIFTFLAGS) --filter GoldenStreamTests
	TABD_GOLDEN_DIR=$(CURDIR)/test-output/golden $(NODE) --test $(wildcard Tests/web/*.test.mjs)
	tsc -p Tests/web/types

clean:
	rm -rf .build $(TSAN_DIR) $(INSTALL_SCRATCH)

## Coverage-guided fuzzing (libFuzzer, -sanitize=fuzzer,address; scripts/fuzz): each target for
## SECONDS seconds, one at a time; crash inputs in test-output/fuzz/. `make test-fuzz`: ~10 s each (CI).
SECONDS ?= 60
fuzz:
	scripts/fuzz $(SECONDS)

test-fuzz:
	scripts/fuzz 10
