# The agents integration needs no engine of its own (LangGraph's savers, the embedded ledger,
# DBOS on SQLite for pydantic-ai's durable baseline). Its benchmark runs with `make bench`.
BENCH_TARGETS += bench-agents

.PHONY: bench-agents

bench-agents: install
	mkdir -p .bench
	$(PY) adapters/agents/bench/bench_agents.py --out .bench/agents.json
