from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import outlive
from outlive import backend as backend_mod
from outlive.errors import BackendUnavailable, ConfigError, MissingExtra, UnknownBackend


async def test_unknown_scheme_names_the_known_ones() -> None:
    with pytest.raises(UnknownBackend) as info:
        await outlive.open_backend("nosuch://x")
    assert "sqlite" in info.value.message


async def test_a_missing_extra_gives_the_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    # as on a machine without the adapter: no entry point, and the table's module is absent
    monkeypatch.setattr(backend_mod.metadata, "entry_points", lambda **_: [])
    monkeypatch.setitem(backend_mod.BACKENDS, "temporal", "outlive_not_installed.backend:Nope")
    with pytest.raises(MissingExtra) as info:
        await outlive.open_backend("temporal://127.0.0.1:1")
    assert info.value.install == "pip install 'outlive[temporal]'"
    assert "pip install 'outlive[temporal]'" in info.value.message


async def test_a_scheme_with_an_extra_but_no_registration_names_the_extra(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(backend_mod.KNOWN_EXTRAS, "fakeengine", "fake")
    with pytest.raises(MissingExtra) as info:
        await outlive.open_backend("fakeengine://127.0.0.1:1")
    assert info.value.install == "pip install 'outlive[fake]'"


def test_the_registry_imports_nothing_until_a_url_asks() -> None:
    """No cycle: backend.py names the embedded backends as strings and never imports them."""
    code = ("import sys, outlive, outlive.cli; "
            "assert 'outlive._memory' not in sys.modules and 'outlive._sqlite' not in sys.modules; "
            "bad = [m for m in sys.modules if m.startswith(('outlive_', 'pytest', '_pytest'))]; "
            "assert not bad, bad")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


def test_the_core_imports_nothing_from_conformance_or_adapters() -> None:
    src = Path(outlive.__file__).parent
    for path in src.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [])
            assert not [n for n in names if n.startswith("outlive_")], f"{path}: {names}"
        if path.name == "backend.py":
            assert "_memory import" not in path.read_text() and "_sqlite import" not in path.read_text()


@pytest.mark.parametrize("url,needle", [
    ("memory://?durability=exit", "unknown option 'durability'"),
    ("sqlite:///x.db?durabilty=exit", "unknown option 'durabilty' (allowed: mode)"),
    ("sqlite:///x.db?mode=sometimes", "mode must be ro or rw"),
    ("sqlite:///x.db?mode=ro&mode=rw", "given twice"),
    ("langgraph+sqlite:///x.db?durabilty=exit", "unknown option 'durabilty'"),
    ("langgraph+memory://?durability=exit&x=1", "unknown option 'x'"),
    ("temporal://127.0.0.1:1?heartbeat=5", "unknown option 'heartbeat'"),
    ("restate://127.0.0.1:1?admn=9070", "unknown option"),
])
async def test_unknown_url_options_are_refused(url: str, needle: str, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        await outlive.open_backend(url)
    assert needle in info.value.message
    assert not (tmp_path / "x.db").exists()


async def test_read_only_sqlite_neither_creates_nor_writes(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailable):
        await outlive.open_backend(f"sqlite:///{tmp_path / 'none.db'}?mode=ro")
    assert not (tmp_path / "none.db").exists()
    async with await outlive.open_backend(f"sqlite:///{tmp_path / 'o.db'}") as rw:
        await outlive.Controller(rw).open_work("w")
    async with await outlive.open_backend(f"sqlite:///{tmp_path / 'o.db'}?mode=ro") as ro:
        assert (await ro.load("w")) is not None and await ro.works() == ["w"]
        with pytest.raises(ConfigError):
            await outlive.Controller(ro).open_work("w2")


@pytest.mark.parametrize("url", ["", "sqlite", "sqlite://host/x.db", "sqlite:///"])
async def test_malformed_urls_are_config_errors(url: str) -> None:
    with pytest.raises(ConfigError):
        await outlive.open_backend(url)


async def test_the_adapters_entry_points_match_the_registry() -> None:
    """The string table and the adapters' own entry points name the same classes."""
    from importlib import metadata

    ours = [ep for ep in metadata.entry_points(group="outlive.backends")
            if ep.dist is not None and ep.dist.name in
            {"outlive-temporal", "outlive-restate", "outlive-langgraph"}]
    assert ours
    for ep in ours:
        module, _, name = backend_mod.BACKENDS[ep.name].partition(":")
        assert getattr(importlib.import_module(module), name) is ep.load(), ep.name


def test_errors_survive_a_round_trip() -> None:
    err = outlive.StaleOwner("old", token=41, epoch=42)
    back = outlive.errors.error_from_dict(err.to_dict())
    assert type(back) is outlive.StaleOwner and back.details == {"token": 41, "epoch": 42}
    m = outlive.errors.error_from_dict(MissingExtra("x", install="pip y").to_dict())
    assert isinstance(m, MissingExtra) and m.install == "pip y"


async def test_async_with_on_an_opened_backend_starts_it_once(tmp_path: object) -> None:
    calls = []

    class Counting(outlive.Backend):
        async def start(self) -> None:
            calls.append(1)

        async def execute(self, work_id: str, command: object) -> object:  # type: ignore[override]
            raise NotImplementedError

        async def load(self, work_id: str) -> None:
            return None

    outlive.register_backend("counting", Counting)
    async with await outlive.open_backend("counting://x") as b:
        assert b.started
    async with Counting("counting://y"):
        pass
    assert calls == [1, 1]

