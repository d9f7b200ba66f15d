"""pytest plugin: ``--outlive-backend URL`` picks the backend the conformance suite runs on.

The URL is checked once, when pytest starts (its scheme resolved, its backend's module imported,
its options read, nothing connected): a bad one is one usage error and exit status 4, as pytest
does for its own options, not one error per test.
"""

from __future__ import annotations

import pytest

from outlive.backend import make_backend
from outlive.errors import OutliveError

__all__ = ["pytest_addoption", "pytest_configure", "outlive_backend_url"]

#: pytest-asyncio warns at every run while this is unset. The suite's fixtures and tests name their
#: own loop scopes; when the caller's configuration leaves it unset the plugin sets it to
#: "fixture-scope", pytest-asyncio's behaviour for unset, so nobody's fixtures change.
_LOOP_SCOPE = "asyncio_default_fixture_loop_scope"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("outlive")
    group.addoption("--outlive-backend", action="store", default=None, metavar="URL",
                    help="backend URL for outlive's conformance suite (default memory://)")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "outlive_requires(*features): the test needs these backend features "
        "(outlive_conformance.requirements.FEATURES); skipped with the reason otherwise")
    _default_loop_scope(config)
    url = config.getoption("--outlive-backend")
    if url:
        try:
            make_backend(str(url))
        except OutliveError as exc:
            where = "--outlive-backend" if str(url) in exc.message else f"--outlive-backend {url}"
            raise pytest.UsageError(f"{where}: {exc.message}") from None


def _default_loop_scope(config: pytest.Config) -> None:
    """Set pytest-asyncio's default fixture loop scope when nobody did. pytest has no public
    setter for another plugin's ini value, so its ini cache is written (the value ``getini``
    returns); without that cache the warning is left as it was."""
    try:
        if config.getini(_LOOP_SCOPE):
            return
    except ValueError:          # pytest-asyncio is not loaded: nothing to set
        return
    cache = getattr(config, "_inicache", None)
    if isinstance(cache, dict):
        cache[_LOOP_SCOPE] = "fixture-scope"


@pytest.fixture(scope="session")
def outlive_backend_url(request: pytest.FixtureRequest) -> str:
    """The URL given with --outlive-backend, or memory://."""
    value = request.config.getoption("--outlive-backend")
    return str(value) if value else "memory://"
