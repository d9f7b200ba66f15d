# outlive — every setup step lives here, so a fresh clone needs only python3, make and node/npm.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
STAMP := $(VENV)/.installed-stamp
DIST ?= dist
# Editable installs of every distribution with every extra the tests use; exact versions come
# from constraints.txt (the distributions themselves declare compatible ranges).
PKGS := -e ".[dev,otel,postgres,docs]" -e conformance -e "adapters/temporal[devserver]" \
	-e adapters/restate -e "adapters/langgraph[postgres]" -e examples/jsonfile_backend \
	-e "adapters/agents[langgraph,pydantic-ai,openai-agents]"
CONSTRAINTS := -c constraints.txt --build-constraint constraints.txt

.PHONY: install demo test test-long lint typecheck bench bench-core-cpu bench-runtime sweep crashpoints engines clean dist constraints

install: $(STAMP)

$(STAMP): pyproject.toml conformance/pyproject.toml $(wildcard adapters/*/pyproject.toml) \
		examples/jsonfile_backend/pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q uv==0.13.8
	$(UV) pip install -q --python $(PY) $(CONSTRAINTS) $(PKGS)
	touch $@

# A wheel of every distribution into $(DIST)/; then, in any venv:
#   pip install --find-links $(DIST) "outlive[temporal]"
# Needs no dev venv: a throwaway venv holding only the build front end (uv), whose build backend
# (hatchling) is pinned by constraints.txt.
BUILD_VENV ?= .build-venv
dist:
	test -x $(BUILD_VENV)/bin/uv || { python3 -m venv $(BUILD_VENV) && \
	  $(BUILD_VENV)/bin/python -m pip install -q --disable-pip-version-check uv==0.13.8; }
	rm -rf $(DIST)
	$(BUILD_VENV)/bin/uv build -q --wheel --all-packages --build-constraint constraints.txt -o $(DIST)
	ls $(DIST)

# The docs site into site/ (MkDocs Material; the API reference from the docstrings by
# mkdocstrings). --strict: a broken link, anchor or reference fails the build.
docs: install
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet -d site
	@echo "site/index.html"

# Rewrite constraints.txt from what the venv holds (after changing a range: make constraints test).
constraints: install
	{ sed -n '/^#/p' constraints.txt; echo "hatchling==1.27.0"; \
	  $(UV) pip freeze --python $(PY) --exclude-editable | grep -v '^uv=='; } > constraints.tmp
	mv constraints.tmp constraints.txt

# postgresql:// (core) needs PostgreSQL's binaries: tests, the sweep and the benchmark start their
# own throwaway cluster (outlive._pgserver: initdb in a temp dir, a free loopback port, stopped by
# PID). This target only makes sure Debian's package is installed.
ENGINE_TARGETS += engine-postgres
.PHONY: engine-postgres sweep-postgres

engine-postgres: install
	@$(PY) -c "from outlive._pgserver import _bin_dir; print('PostgreSQL binaries:', _bin_dir())" 2>/dev/null \
	  || { echo "installing PostgreSQL (Debian package) for postgresql://"; \
	       apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; }

sweep-postgres: engine-postgres
	$(PY) -m outlive._pgserver -- $(VENV)/bin/outlive sweep --quiet --backend {url}

# Engine fragments (server installs, sweeps, benchmarks) live beside each adapter.
-include adapters/temporal/engine.mk
-include adapters/restate/engine.mk
-include adapters/langgraph/engine.mk
-include adapters/agents/engine.mk
# The explorer's browser test needs a headless browser (conformance/explore.mk).
-include conformance/explore.mk

engines: install $(ENGINE_TARGETS)

demo: install
	$(VENV)/bin/outlive demo

# The whole suite but the tests marked `long` (the SQLite and PostgreSQL 864-run sweeps, a
# second story's sweep, the thousand 20 KB Temporal steps): those run in `make test-long`.
# Two test processes: most of the suite's time is spent waiting on servers and processes, and
# every test starts its own servers on free ports and works in its own temporary directory.
TEST_PROCS ?= 2
test: engines
	$(PY) -m pytest -n $(TEST_PROCS) -m "not long"

test-long: engines
	$(PY) -m pytest -m long

lint: install
	$(VENV)/bin/ruff check .

typecheck: install
	$(VENV)/bin/mypy

bench: engines
	$(PY) -m outlive_conformance.bench
	$(PY) bench/supervision.py --out .bench/supervision.json
	$(PY) bench/runtime_vs_dbos.py --out .bench/runtime.json
	$(MAKE) --no-print-directory $(BENCH_TARGETS)

# The runtime beside DBOS (latency, throughput, idle works; SQLite and PostgreSQL): also in `bench`.
bench-runtime: engine-postgres
	$(PY) bench/runtime_vs_dbos.py --out .bench/runtime.json

# The core's CPU per command (µs per Worker.step on memory://, per ledger.apply): not in `bench`,
# a quick before/after for changes to the ledger, the worker and their checks and copies.
bench-core-cpu: install
	$(PY) bench/core_cpu.py
	@if command -v valgrind >/dev/null; then $(PY) bench/core_cpu.py --instructions; \
	else echo "valgrind not found: instructions per call not counted"; fi

sweep: install
	$(VENV)/bin/outlive sweep --backend memory://

# Every crash point x {SIGKILL, SIGSTOP+SIGCONT} x {input changed, not} with attempts as real
# processes, on every backend reachable here (make test runs a bounded subset).
crashpoints: engines
	OUTLIVE_CRASHPOINTS=full $(PY) -m pytest -q -p no:cacheprovider tests/test_crashpoints.py

clean:
	rm -rf $(VENV) $(BUILD_VENV) .engines .bench $(DIST) site
