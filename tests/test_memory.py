"""``memory://``: the same answers as the pure ledger folded over whole states, at a cost that does
not grow with the journal."""

from __future__ import annotations

from typing import Any

import pytest

import outlive
from outlive import _memory
from outlive import ledger as L
from outlive.hashing import content_hash, input_key
from outlive.records import WorkState


def _step(i: int, attempt: int, token: int) -> L.RecordSteps:
    src = {"x": content_hash(i % 250)}   # steps repeat: a retried write is found, not added
    key = input_key(f"s{i % 250}", src)
    return L.RecordSteps(attempt=attempt, token=token, at=i, entries=(L.StepWrite(
        step=f"s{i % 250}", sources=src, input_key=key, result={"i": i % 250},
        result_id=L.result_id("w", f"s{i % 250}", key, attempt), external=("x",)),))


async def test_a_step_write_sees_only_the_entries_it_reads_and_the_state_is_the_ledgers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    real = _memory.apply

    def spy(state: WorkState | None, cmd: Any, **kw: Any) -> Any:
        if isinstance(cmd.command if isinstance(cmd, L.Checked) else cmd, L.RecordSteps):
            assert state is not None
            seen.append(len(state.journal))
        return real(state, cmd, **kw)

    monkeypatch.setattr(_memory, "apply", spy)
    b = await outlive.open_backend("memory://")
    whole: WorkState | None = None
    cmds: list[Any] = [L.OpenWork(), L.PublishInput(version="v1", parts={"p": "0" * 64}, at=0),
                       L.Admit(at=0)]
    for cmd in cmds:
        await b.execute("w", cmd)
        whole, _ = L.apply(whole, cmd, work_id="w")
    assert whole is not None and whole.current_attempt is not None
    att = whole.current_attempt
    for i in range(600):
        cmd = _step(i, att.number, att.token)
        got = await b.execute("w", cmd)
        whole, want = L.apply(whole, cmd, work_id="w")
        assert got.kind == want.kind and got.seq == want.seq
    # 250 distinct steps journaled; each write was applied to at most the one entry it names.
    assert len(whole.journal) == 250 and max(seen) <= 1
    loaded = await b.load("w")
    assert loaded is not None
    assert loaded == whole
