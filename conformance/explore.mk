# The explorer's page (outlive explore) is tested in a real headless browser: Debian's chromium
# and its chromedriver, driven by selenium from the dev extras. Installed once, like PostgreSQL for
# langgraph+postgres; the test starts its own browser and server and stops both by their handles.
ENGINE_TARGETS += engine-browser

.PHONY: engine-browser

engine-browser:
	@{ command -v chromium && command -v chromedriver; } >/dev/null 2>&1 \
	  && echo "browser for the explorer test: $$(chromium --version 2>/dev/null)" \
	  || { echo "installing chromium and chromium-driver (Debian packages) for the explorer's browser test"; \
	       apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; }

# The page itself, for a person: http://127.0.0.1:8765/ (Ctrl-C stops it).
.PHONY: explore
explore: install
	$(VENV)/bin/outlive explore
