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

.PHONY: setup demo test test-fast test-ui test-scale chromium install-check lint bench bench-full bench-setup bench-noetl-setup conformance-noetl conformance-noetl-quick fault fault-ci fault-pg clean

setup: $(STAMP) $(VENV)/mypy-path/aos

$(VENV)/mypy-path/aos: $(STAMP)
	@mkdir -p $@
	@ln -sfn ../../../kernel $@/kernel
	@ln -sfn ../../../cli $@/cli
	@ln -sfn ../../../flows $@/flows

$(STAMP): pyproject.toml setup.py
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,build]'
	@touch $(STAMP)

demo: setup
	$(BIN)/python -m aos.cli.demo

lint: setup
	$(BIN)/ruff check kernel cli flows modules tests bench setup.py
	$(BIN)/ruff format --check kernel cli flows modules tests bench setup.py
	MYPYPATH=$(VENV)/mypy-path $(BIN)/mypy -p aos.kernel -p aos.cli -p aos.flows

test: lint
	$(BIN)/python -m pytest -m "not ui"

test-fast: setup
	$(BIN)/python -m pytest -x -q

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

# A real install (~85 s): build the wheel, install it into a fresh virtualenv outside the
# checkout, create a world with a Python module built from source, send, replay --verify.
install-check: setup
	PYTHON=$(PYTHON) .ci/install_check.sh

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

bench: bench-setup
	$(BIN)/python -m bench.run --quick

bench-full: bench-setup
	$(BIN)/python -m bench.run --full

clean:
	rm -rf $(VENV) $(BENCH_VENV) $(NOETL_VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache .aos-demo .aos-demo-flows
