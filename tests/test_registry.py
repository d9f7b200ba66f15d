from __future__ import annotations

import pytest

import outlive
from outlive import backend as backend_mod
from outlive.errors import ConfigError, MissingExtra, UnknownBackend


async def test_unknown_scheme_names_the_known_ones() -> None:
    with pytest.raises(UnknownBackend) as info:
        await outlive.open_backend("nosuch://x")
    assert "sqlite" in info.value.message


async def test_a_missing_extra_gives_the_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(backend_mod.KNOWN_EXTRAS, "fakeengine", "pip install outlive-fakeengine")
    with pytest.raises(MissingExtra) as info:
        await outlive.open_backend("fakeengine://127.0.0.1:1")
    assert info.value.install == "pip install outlive-fakeengine"


@pytest.mark.parametrize("url", ["", "sqlite", "sqlite://host/x.db", "sqlite:///"])
async def test_malformed_urls_are_config_errors(url: str) -> None:
    with pytest.raises(ConfigError):
        await outlive.open_backend(url)


async def test_registered_entry_points_resolve() -> None:
    from importlib import metadata

    names = {ep.name for ep in metadata.entry_points(group="outlive.backends")}
    for name in names:
        assert name in backend_mod.KNOWN_EXTRAS or name in {"memory", "sqlite"}, name


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
