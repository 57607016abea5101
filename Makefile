# aos: every target sets up its own virtualenv first, so a fresh clone needs only `make demo`
# or `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-fast lint bench bench-full clean

setup: $(STAMP) $(VENV)/mypy-path/aos

$(VENV)/mypy-path/aos: $(STAMP)
	@mkdir -p $@
	@ln -sfn ../../../kernel $@/kernel
	@ln -sfn ../../../cli $@/cli

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,build]'
	@touch $(STAMP)

demo: setup
	$(BIN)/python -m aos.cli.demo

lint: setup
	$(BIN)/ruff check kernel cli modules tests bench
	$(BIN)/ruff format --check kernel cli modules tests bench
	MYPYPATH=$(VENV)/mypy-path $(BIN)/mypy -p aos.kernel -p aos.cli

test: lint
	$(BIN)/python -m pytest

test-fast: setup
	$(BIN)/python -m pytest -x -q

bench: setup
	$(BIN)/python -m bench.run --quick

bench-full: setup
	$(BIN)/python -m bench.run --full

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache .aos-demo
