# LangGraph needs no server for langgraph+sqlite / langgraph+memory (the checkpointer is a file or
# process memory). langgraph+postgres needs PostgreSQL binaries: the tests and sweep-langgraph-pg
# start their own throwaway cluster (outlive_langgraph.pgserver: initdb in a temp dir, a free
# loopback port, stopped by PID). This target only makes sure the binaries are installed.
ENGINE_TARGETS += engine-langgraph
BENCH_TARGETS += bench-langgraph

.PHONY: engine-langgraph sweep-langgraph sweep-langgraph-pg bench-langgraph

engine-langgraph: install
	@$(PY) -c "from outlive_langgraph.pgserver import _bin_dir; print('PostgreSQL binaries:', _bin_dir())" 2>/dev/null \
	  || { echo "installing PostgreSQL (Debian package) for langgraph+postgres"; \
	       apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; }

# each run gets its own database in a fresh temporary directory (two checkouts sharing .engines
# would otherwise write one file), removed afterwards whatever the sweep's exit status
sweep-langgraph: install
	@d=$$(mktemp -d) && echo "sweep database: $$d/sweep.db" && \
	  { $(VENV)/bin/outlive sweep --quiet --backend langgraph+sqlite:///$$d/sweep.db; rc=$$?; rm -rf "$$d"; exit $$rc; }

sweep-langgraph-pg: engine-langgraph
	$(PY) -m outlive_langgraph.pgserver -- $(VENV)/bin/outlive sweep --quiet --backend {url}

bench-langgraph: install
	mkdir -p .bench
	$(PY) adapters/langgraph/bench/bench_langgraph.py --out .bench/langgraph.json
