# LangGraph needs no server: the checkpointer is a file (SqliteSaver) or process memory.
ENGINE_TARGETS += engine-langgraph
BENCH_TARGETS += bench-langgraph

LANGGRAPH_DIR := .engines/langgraph

.PHONY: engine-langgraph sweep-langgraph bench-langgraph

engine-langgraph:
	@true

sweep-langgraph: install
	mkdir -p $(LANGGRAPH_DIR)
	rm -f $(LANGGRAPH_DIR)/sweep.db $(LANGGRAPH_DIR)/sweep.db-wal $(LANGGRAPH_DIR)/sweep.db-shm
	$(VENV)/bin/outlive sweep --quiet --backend langgraph+sqlite:///$(LANGGRAPH_DIR)/sweep.db

bench-langgraph: install
	mkdir -p .bench
	$(PY) -m outlive_langgraph.bench --out .bench/langgraph.json
