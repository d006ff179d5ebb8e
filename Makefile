# Developer commands. Every target creates .venv and installs what it needs:
#   make run / make demo   the daemons and rmqctl only (the project, no extras)
#   make pipeline-deps     the spark extra on top (rmq-pipeline, the Spark data source)
#   make test, lint, ...   everything: the dev and spark extras
#   make bench             the bench extra on top (nats-py, py-spy)
# Each target that runs the project first compiles the hot modules with mypyc (make compiled,
# docs/compiled.md) where a C compiler and Python's headers are present; RMQ_PURE_PYTHON=1 runs
# the pure-Python modules instead.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
RUN_STAMP := $(VENV)/.installed-run
SPARK_STAMP := $(VENV)/.installed-spark
DEV_STAMP := $(VENV)/.installed-dev
BENCH_STAMP := $(VENV)/.installed-bench
# import-linter (make lint's import contracts) runs from a venv of its own under .venv: it
# requires rich, and with rich in the project's venv structlog imports it (and pygments, attrs)
# in every process the project starts, 70 ms of CPU each (a broker's whole start is 600 ms),
# thousands of times a test run. A production install has no rich either.
IMPORT_LINTER := import-linter>=2.1
LINT_VENV := $(VENV)/import-linter
LINT_STAMP := $(LINT_VENV)/.installed
# pip's own output (a line per package, progress bars on a terminal) shows the install moving.
PIP := $(BIN)/python -m pip install --disable-pip-version-check

.PHONY: run demo test test-pure lint bench soak format clean venv pipeline-deps protos console-assets compiled

venv: $(DEV_STAMP) compiled

pipeline-deps: $(SPARK_STAMP)  ## the spark extra, for rmq-pipeline and the Spark data source

$(BIN)/python:
	@echo "== creating $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip

$(RUN_STAMP): pyproject.toml | $(BIN)/python
	@echo "== installing the daemons and rmqctl into $(VENV) (no extras)"
	$(PIP) -e '.[compile]'
	touch $@

$(SPARK_STAMP): pyproject.toml | $(BIN)/python
	@echo "== installing the spark extra into $(VENV) (PySpark, pyarrow: a few hundred MB)"
	$(PIP) -e '.[spark,compile]'
	touch $@ $(RUN_STAMP)

$(DEV_STAMP): pyproject.toml | $(BIN)/python
	@echo "== installing the project with its dev and spark extras into $(VENV)"
	$(PIP) -e '.[dev,spark,compile]'
	touch $@ $(SPARK_STAMP) $(RUN_STAMP)

$(LINT_STAMP): Makefile | $(BIN)/python
	@echo "== installing import-linter into $(LINT_VENV)"
	$(BIN)/python -m venv $(LINT_VENV)
	$(LINT_VENV)/bin/python -m pip install --disable-pip-version-check '$(IMPORT_LINTER)'
	touch $@

$(BENCH_STAMP): pyproject.toml | $(BIN)/python
	@echo "== installing the project with its dev, spark and bench extras into $(VENV)"
	$(PIP) -e '.[dev,spark,bench,compile]'
	touch $@ $(DEV_STAMP) $(SPARK_STAMP) $(RUN_STAMP)

# Rebuilds what changed since the last build (quick when nothing did); without a C compiler or
# Python's headers it removes any old build and the pure-Python modules run. A compiled module
# older than its .py is never run: its import fails saying so (rmqbuild/hook.py).
compiled: $(RUN_STAMP)  ## compile the hot modules (mypyc) into .venv/compiled; RMQ_PURE_PYTHON=1 skips
	$(BIN)/python -m rmqbuild.build

run: $(RUN_STAMP) compiled  ## start a local cluster on loopback and its web console (http://127.0.0.1:8080/), in the foreground (SECURE=1: auth and TLS); Ctrl-C stops it
	$(BIN)/python deploy/local_cluster.py $(if $(filter 1 yes true,$(SECURE)),--secure)

demo: $(RUN_STAMP)  ## a failover to watch, on its own cluster under var/demo
	$(BIN)/python deploy/demo.py

# make test's parallel workers (pytest-xdist): most tests wait on daemons (start-up, elections,
# failovers), so more workers than cores pay; TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= 4

# Each test's time is kept in var/test-report.xml (JUnit XML), to see where the suite's time goes.
test: $(DEV_STAMP) compiled  ## the test suite (soak tests excluded) on TEST_WORKERS parallel workers
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --junitxml=var/test-report.xml

# The codec and core unit tests against the pure-Python modules (CI runs them after make test,
# which runs everything against the compiled build).
PURE_TESTS := tests/compiled tests/protocol tests/raft tests/ha/test_ha_codec.py \
	tests/ha/test_ha_batch.py tests/storage/test_store_replay.py tests/storage/test_timer_wheel.py

test-pure: $(DEV_STAMP)  ## the codec and core unit tests on the pure-Python modules (RMQ_PURE_PYTHON=1)
	RMQ_PURE_PYTHON=1 $(BIN)/python -m pytest -q -n $(TEST_WORKERS) $(PURE_TESTS)

lint: $(DEV_STAMP) $(LINT_STAMP)  ## ruff, the import contracts (pyproject [tool.importlinter]) and mypy
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(LINT_VENV)/bin/lint-imports --no-logo
	$(BIN)/mypy protocol storage remoting daemon broker client rmqctl controller pipeline console bench rmqbuild

bench: $(BENCH_STAMP) compiled  ## benchmarks: figures and ratios, never asserted
	$(BIN)/python bench/run.py

soak: $(DEV_STAMP) compiled  ## long soaks and big simulations, one at a time (some load the CPU on purpose); every property test with ten times its examples
	$(BIN)/python -m pytest -q -m 'soak or hypothesis' -n 0 --hypothesis-profile=soak

# The console's vendored htmx, fetched again from npm exactly as console/static/package-lock.json
# locks it (tests/console/test_console_assets.py checks the copy against the lockfile).
console-assets:  ## refresh console/static/htmx.min.js from npm with its lockfile (npm ci)
	tmp=$$(mktemp -d) && cp console/static/package.json console/static/package-lock.json $$tmp && \
	(cd $$tmp && npm ci --ignore-scripts --no-audit --no-fund) && \
	cp $$tmp/node_modules/htmx.org/dist/htmx.min.js console/static/htmx.min.js && rm -rf $$tmp

PROTOS := protocol/rocketmq_v2/definition.proto protocol/rocketmq_v2/service.proto

protos: $(DEV_STAMP)  ## regenerate protocol/rocketmq_v2/*_pb2*.py(i) from the .proto files
	$(BIN)/python -m grpc_tools.protoc -I . --python_out=. --pyi_out=. $(PROTOS)
	$(BIN)/python -m grpc_tools.protoc -I . --grpc_python_out=. protocol/rocketmq_v2/service.proto

format: $(DEV_STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf var .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
