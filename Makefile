# Developer commands. Every target creates .venv and installs what it needs.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev

.PHONY: run demo test lint bench soak format clean venv

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,spark]'
	touch $(STAMP)

run: $(STAMP)  ## start a local cluster on loopback, in the foreground; Ctrl-C stops it
	$(BIN)/python deploy/local_cluster.py

demo: $(STAMP)  ## a failover to watch, on its own cluster under var/demo
	$(BIN)/python deploy/demo.py

test: $(STAMP)  ## the test suite (soak tests excluded)
	$(BIN)/python -m pytest -q

lint: $(STAMP)  ## ruff, the import contracts (pyproject [tool.importlinter]) and mypy
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-logo
	$(BIN)/mypy protocol storage remoting daemon broker client rmqctl controller pipeline

bench: $(STAMP)  ## benchmarks: figures and ratios, never asserted
	$(BIN)/python bench/run.py

soak: $(STAMP)  ## long soaks and big simulations
	$(BIN)/python -m pytest -q -m soak

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf var .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
