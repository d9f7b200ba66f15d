# Restate: the server comes from the npm package @restatedev/restate-server (version pinned),
# installed into the git-ignored .engines/restate/. Tests, sweeps and benchmarks start it
# themselves through outlive_restate.server (free loopback ports, own base dir, stopped by PID).
RESTATE_VERSION := 1.7.12
RESTATE_DIR := .engines/restate
RESTATE_BIN := $(RESTATE_DIR)/node_modules/@restatedev/restate-server-linux-x64/bin/restate-server

ENGINE_TARGETS += engine-restate
BENCH_TARGETS += bench-restate

.PHONY: engine-restate sweep-restate sweep-restate-client bench-restate

engine-restate: $(RESTATE_DIR)/.installed-$(RESTATE_VERSION)

$(RESTATE_DIR)/.installed-$(RESTATE_VERSION):
	mkdir -p $(RESTATE_DIR)
	test -f $(RESTATE_DIR)/package.json || echo '{"name":"outlive-engines-restate","private":true}' > $(RESTATE_DIR)/package.json
	cd $(RESTATE_DIR) && npm install --no-audit --no-fund --save-exact @restatedev/restate-server@$(RESTATE_VERSION)
	$(RESTATE_BIN) --version | grep -q "$(RESTATE_VERSION)"
	touch $@

# The 864 runs with every attempt inside a Restate handler (restate+handler://), each compared
# with memory://; sweep-restate-client drives the attempts from the client instead.
sweep-restate: install engine-restate
	$(PY) -m outlive_restate.server -- $(VENV)/bin/outlive sweep --backend {handler_url}

sweep-restate-client: install engine-restate
	$(PY) -m outlive_restate.server -- $(VENV)/bin/outlive sweep --backend {url}

bench-restate: install engine-restate
	$(PY) adapters/restate/bench/bench_restate.py
