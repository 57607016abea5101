# aos: every target sets up its own virtualenv first, so a fresh clone needs only `make demo`
# or `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The bench's own environment: the peers it runs against (bench/bench_peers.py), kept out of
# the project's virtualenv so that `make test` never needs them.
BENCH_VENV := .venv-bench
BENCH_STAMP := $(BENCH_VENV)/.installed
# NoETL, the peer of bench/bench_playbooks.py, needs Python 3.12: its own virtualenv, made only
# by `make bench-noetl-setup` (a large download); `make bench` runs bench_playbooks when it is
# there and says so when it is not.
# The first python3.12 that runs (a pyenv shim on PATH may exist and refuse to run); looked
# for only when that target runs.
PYTHON312 ?= $(shell for p in $$(command -v python3.12) $(HOME)/.pyenv/versions/3.12*/bin/python3.12; do \
	"$$p" -c pass 2>/dev/null && { echo "$$p"; break; }; done)
NOETL_VENV := .venv-noetl
NOETL_STAMP := $(NOETL_VENV)/.installed
# Restate, the peer of bench/bench_restate.py: its server from npm into a folder of the bench's,
# its Python SDK in a virtualenv of its own; made only by `make bench-restate-setup` (~250 MB),
# and `bench.run` leaves the module out, saying so, when they are not there.
RESTATE_SERVER_VERSION ?= 1.7.12
RESTATE_DIR := .bench-restate
RESTATE_STAMP := $(RESTATE_DIR)/.installed-$(RESTATE_SERVER_VERSION)
RESTATE_VENV := .venv-restate
RESTATE_VENV_STAMP := $(RESTATE_VENV)/.installed

.PHONY: setup compile demo test test-fast test-slow coverage test-ui test-scale chromium install-check interpreter-pin lint docs test-docs bench bench-full bench-setup bench-noetl-setup bench-restate-setup bench-restate conformance-noetl conformance-noetl-quick conformance-littleflow littleflow-graphs fault fault-ci fault-pg clean

setup: $(STAMP) $(VENV)/mypy-path/aos
	@$(MAKE) --no-print-directory compile

# The kernel's hot path compiled by mypyc with the system's C compiler (spec/09 §5;
# aos.kernel.compiled_build): ~2 minutes on 2 cores into an empty cache, under a second cached
# ($$AOS_CACHE_DIR or ~/.cache/aos, under mypyc/). Never fails: without a compiler it says so in
# one line and the kernel runs as pure Python; AOS_PURE_PYTHON=1 skips it (and turns it off).
compile: $(STAMP)
	@$(BIN)/python -m aos.kernel.compiled_build

$(VENV)/mypy-path/aos: $(STAMP)
	@mkdir -p $@
	@ln -sfn ../../../kernel $@/kernel
	@ln -sfn ../../../cli $@/cli
	@ln -sfn ../../../flows $@/flows
	@for f in api/*.py api/testing; do ln -sfn ../../../$$f $@/; done

# The packages the flow interpreter is built with are those the wheel's build pins
# (pyproject.toml [build-system]), so that the interpreter built here is the pinned one. The
# editable install builds nothing (its flow worlds build the interpreter through the cache),
# so it needs no isolated build environment.
$(STAMP): pyproject.toml setup.py
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip 'setuptools>=77' wheel
	$(BIN)/python -c 'import tomllib; print(*(r for r in tomllib.load(open("pyproject.toml", "rb"))["build-system"]["requires"] if "==" in r), sep="\n")' > $(VENV)/build-pins.txt
	$(BIN)/python -m pip install --quiet --no-build-isolation -e '.[dev,build]' -c $(VENV)/build-pins.txt
	@touch $(STAMP)

demo: setup
	$(BIN)/python -m aos.cli.demo

lint: setup
	$(BIN)/ruff check api kernel cli flows modules tests bench setup.py
	$(BIN)/ruff format --check api kernel cli flows modules tests bench setup.py
	MYPYPATH=$(VENV)/mypy-path $(BIN)/mypy -p aos
	MYPYPATH=modules/flow:modules/sdk $(BIN)/mypy -p aos_flow

# Two workers (pytest-xdist): most tests wait on a process, a socket or a build, so two
# workers on two cores take the suite from ~28 to ~14 minutes. TEST_JOBS=0 runs it in one.
# Hypothesis runs its `ci` profile here (tests/conftest.py: bounded, derandomized), `dev` when
# pytest is run by hand. Each test has 300 s (pyproject's `timeout`), so the flow interpreter
# is built first (1-3 minutes into an empty cache, ~2 s cached), outside any test's time.
TEST_JOBS ?= 2
TEST_ENV := HYPOTHESIS_PROFILE=ci
WARM_INTERPRETER := $(BIN)/python -c 'from aos.flows.interpreter import InterpreterSources; \
	InterpreterSources.installed().build()'
test: lint
	$(WARM_INTERPRETER)
	$(TEST_ENV) $(BIN)/python -m pytest -m "not ui and not docs" -n $(TEST_JOBS)

# The guide (docs/, mkdocs.yml) into build/docs, strict: a link to a page or file that does
# not exist fails. The `docs` extra (pyproject.toml) is installed into .venv on first use.
DOCS_STAMP := $(VENV)/.installed-docs

$(DOCS_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["docs"], sep="\n")' > $(VENV)/docs-requirements.txt
	$(BIN)/python -m pip install --quiet -r $(VENV)/docs-requirements.txt
	@touch $@

docs: $(DOCS_STAMP)
	$(BIN)/mkdocs build --strict --quiet

# The shell blocks of README.md and docs/*.md run top to bottom, page by page, each page in a
# scratch folder with a fresh HOME and no AOS_* variables (tests/test_docs_run.py; ~13 minutes
# on 2 busy cores, so marked `docs` and left out of `make test`). TEST_DOCS_PAGES picks pages
# (a pytest -k expression): .ci/run runs the README and the worlds page.
TEST_DOCS_PAGES ?=
test-docs: setup
	$(BIN)/python -m pytest -q -p no:cacheprovider -m docs tests/test_docs_run.py $(if $(TEST_DOCS_PAGES),-k "$(TEST_DOCS_PAGES)")

test-fast: setup
	$(BIN)/python -m pytest -x -q

# The tests marked `slow` alone (2 today, the Python counter built with componentize-py: ~20 s
# into an empty cache, under a second cached). `make test` runs them too: a test leaves it only
# when it takes over ~60 s alone, and then .ci/run runs this target.
test-slow: setup
	$(TEST_ENV) $(BIN)/python -m pytest -m slow -n $(TEST_JOBS)

# Line coverage of kernel/, flows/ and cli/ over what `make test` runs (slower than it:
# coverage.py traces every line, in the xdist workers and in the nodes, adapters and `aos`
# commands the tests start); prints the total and each package's figure and writes
# build/coverage/html/index.html. The guest's code (modules/: the flow interpreter, the SDK)
# runs inside WASM, where coverage.py cannot see it, so it is not measured. No gate. Tracing
# makes CPU-bound tests several times slower (a fuzz test of ~7 s took 165 s here on a loaded
# machine), so each test has 900 s instead of 300; a test that fails under tracing (one that
# races a process it started) is listed, make says "(ignored)", and the figures still print.
COVERAGE_DATA := build/coverage/.coverage
coverage: setup
	rm -rf build/coverage && mkdir -p build/coverage
	$(WARM_INTERPRETER)
	-$(TEST_ENV) $(BIN)/python -m pytest -m "not ui and not docs" -n $(TEST_JOBS) --timeout=900 --cov --cov-report=
	$(BIN)/coverage html --data-file=$(COVERAGE_DATA) --quiet
	@for package in kernel flows cli; do \
		printf '%-7s %s%%\n' $$package \
			"$$($(BIN)/coverage report --data-file=$(COVERAGE_DATA) --include="$$package/*" --format=total)"; \
	done
	@printf '%-7s %s%%\n' total "$$($(BIN)/coverage report --data-file=$(COVERAGE_DATA) --format=total)"
	@echo "per file: build/coverage/html/index.html"

# The web inspector in a real browser (~45 s alone, minutes on a busy machine, so not part of
# `make test`; .ci/run runs it): Playwright drives the system's chromium, never a browser of
# its own (`playwright install` is not used).
CHROMIUM ?= /usr/bin/chromium

chromium:
	@test -x $(CHROMIUM) || { echo "the browser tests need chromium: apt-get install -y chromium" >&2; exit 1; }

test-ui: setup chromium
	$(BIN)/python -m pytest -m ui -q tests/inspector

# The journal browser on a world of >100 000 records (~2-3 minutes, mostly making the world):
# prints how long each read takes.
test-scale: setup chromium
	$(BIN)/python -m pytest -q -s tests/inspector/scale_check.py

# A real install (.ci/install_check.sh, 13-17 minutes on 2 busy cores, most of it the
# builds and pip): from a fresh copy of the checkout, build the wheel (which rebuilds the
# interpreter into an empty cache and checks it against its pin); rebuild the interpreter,
# and the counter module, from a second copy holding __pycache__ folders and editor files
# (same hashes); install the wheel without extras into a fresh virtualenv and run flows;
# then, with the build extra, a world with a Python module built from source: create, send,
# replay --verify. Prints the wheel's and the virtualenv's sizes.
install-check: setup
	PYTHON=$(PYTHON) .ci/install_check.sh

# The flow interpreter component a wheel carries is pinned (flows/interpreter.pin.json):
# after its sources (modules/flow, the SDK, the WIT world) change, rebuild and re-pin it
# (~1-3 minutes; tests/test_interpreter_pin.py says when the pin is stale).
interpreter-pin: setup
	$(BIN)/python -m aos.flows.interpreter pin

# Fault injection (tests/fault): SIGKILL a workload at random and named points, reopen, check
# that no acknowledged input is lost, replay verifies, and no intent is lost or doubled.
# The flow slice (--workload flows) kills flow executions (forks, joins, parallel loops,
# retries, signals, cancels) and checks each ends once and no tool call is issued twice.
FAULT_KILLS ?= 1000
FAULT_CI_KILLS ?= 200
FAULT_FLOW_KILLS ?= 300
FAULT_CI_FLOW_KILLS ?= 50
# The PostgreSQL slice (--store pg): the kernel workload's worlds on a throwaway cluster
# (tests/pg_cluster.py; a non-root owner when run as root), SIGKILLs as on LMDB, and restarts
# of the server (pg_ctl restart -m fast / immediate) under a running child.
FAULT_PG_KILLS ?= 200
FAULT_PG_RESTARTS ?= 30
FAULT_CI_PG_KILLS ?= 40
FAULT_CI_PG_RESTARTS ?= 5

fault: setup
	$(BIN)/python -m tests.fault.harness --kills $(FAULT_KILLS) --jobs 2 --quiet
	$(BIN)/python -m tests.fault.harness --workload flows --kills $(FAULT_FLOW_KILLS) --jobs 2 --quiet

fault-ci: setup
	$(BIN)/python -m tests.fault.harness --kills $(FAULT_CI_KILLS) --jobs 2 --quiet
	$(BIN)/python -m tests.fault.harness --workload flows --kills $(FAULT_CI_FLOW_KILLS) --jobs 2 --quiet
	$(BIN)/python -m tests.fault.harness --store pg --kills $(FAULT_CI_PG_KILLS) --restarts $(FAULT_CI_PG_RESTARTS) --jobs 2 --quiet

fault-pg: setup
	$(BIN)/python -m tests.fault.harness --store pg --kills $(FAULT_PG_KILLS) --restarts $(FAULT_PG_RESTARTS) --jobs 2 --quiet

bench-setup: setup $(BENCH_STAMP)

$(BENCH_STAMP): bench/peers/requirements.txt
	@test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(BENCH_VENV)/bin/python -m pip install --quiet -r bench/peers/requirements.txt
	@touch $(BENCH_STAMP)

bench-noetl-setup: setup $(NOETL_STAMP)

$(NOETL_STAMP): bench/peers/noetl-requirements.txt
	@test -n "$(PYTHON312)" || { echo "bench-noetl-setup: no Python 3.12 found; set PYTHON312=/path/to/python3.12" >&2; exit 1; }
	@test -x $(NOETL_VENV)/bin/python || $(PYTHON312) -m venv $(NOETL_VENV)
	$(NOETL_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(NOETL_VENV)/bin/python -m pip install --quiet -r bench/peers/noetl-requirements.txt
	@touch $(NOETL_STAMP)

bench-restate-setup: setup $(RESTATE_STAMP) $(RESTATE_VENV_STAMP)

# --ignore-scripts: the package's only install script is a dependency's usage report.
$(RESTATE_STAMP):
	@command -v npm >/dev/null || { echo "bench-restate-setup: npm is needed (apt-get install -y npm)" >&2; exit 1; }
	@mkdir -p $(RESTATE_DIR)
	npm install --prefix $(RESTATE_DIR) --no-save --no-audit --no-fund --ignore-scripts \
		@restatedev/restate-server@$(RESTATE_SERVER_VERSION)
	$(BIN)/python -c "from bench.peers import restate_stack as r; print(r.versions()['restate_server'])" \
		> $@

$(RESTATE_VENV_STAMP): bench/peers/restate-requirements.txt
	@test -x $(RESTATE_VENV)/bin/python || $(PYTHON) -m venv $(RESTATE_VENV)
	$(RESTATE_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(RESTATE_VENV)/bin/python -m pip install --quiet -r bench/peers/restate-requirements.txt
	@touch $@

# aos against Restate alone (~4 minutes quick): `bench.run --only restate`; add BENCH_MODE=--full.
BENCH_MODE ?= --quick
bench-restate: bench-restate-setup
	$(BIN)/python -m bench.run $(BENCH_MODE) --only restate

# NoETL as a differential oracle (tests/conformance/run.py; spec/12 §11): every playbook of the
# corpus (the upstream fixtures, the seed examples, one per behaviour and rule) run on NoETL
# 2.13.1 and on aos, the final status and step results compared; fails on a difference that
# tests/conformance/expected.yaml does not list. ~20 min on 2 cores (NoETL takes 1-2 s a step);
# not part of `make test` or .ci/run (it needs `make bench-noetl-setup`, a 1.4 GB download).
conformance-noetl: bench-noetl-setup
	$(BIN)/python -m tests.conformance.run

# Its CI slice (tests/conformance/cases.py QUICK): ~3 min once .venv-noetl is built.
conformance-noetl-quick: bench-noetl-setup
	$(BIN)/python -m tests.conformance.run --quick

# littleflow (seed 004's reference implementation) as an oracle of the flow language. It lives in
# the bench's virtualenv, never the project's: `make test` compares with its graphs recorded as
# data (tests/flowlang/littleflow_graphs.json), which `littleflow-graphs` writes again when a
# compared text or the corpus changes (a test says when they are stale); random texts of its
# grammar are compared live by `conformance-littleflow` (~1 min).
littleflow-graphs: bench-setup
	$(BENCH_VENV)/bin/python tests/flowlang/littleflow_graphs.py

conformance-littleflow: bench-setup
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/flowlang/live_littleflow.py

bench: bench-setup
	$(BIN)/python -m bench.run --quick

bench-full: bench-setup
	$(BIN)/python -m bench.run --full

clean:
	rm -rf $(VENV) $(BENCH_VENV) $(NOETL_VENV) $(RESTATE_VENV) $(RESTATE_DIR) build *.egg-info .pytest_cache .mypy_cache .ruff_cache .aos-demo .aos-demo-flows
