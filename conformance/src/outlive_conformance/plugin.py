"""pytest plugin: ``--outlive-backend URL`` picks the backend the conformance suite runs on."""

from __future__ import annotations

import pytest

__all__ = ["pytest_addoption", "pytest_configure", "outlive_backend_url"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("outlive")
    group.addoption("--outlive-backend", action="store", default=None, metavar="URL",
                    help="backend URL for outlive's conformance suite (default memory://)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "outlive_requires(*features): the test needs these backend features "
        "(outlive_conformance.requirements.FEATURES); skipped with the reason otherwise")


@pytest.fixture(scope="session")
def outlive_backend_url(request: pytest.FixtureRequest) -> str:
    """The URL given with --outlive-backend, or memory://."""
    value = request.config.getoption("--outlive-backend")
    return str(value) if value else "memory://"
