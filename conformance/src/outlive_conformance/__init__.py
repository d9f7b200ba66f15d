"""The outlive conformance suite: the q3-report scenario, harness, invariants and pytest plugin."""
