"""Roles: the controller's commands carry the controller's credential; a worker's token cannot
issue them (issue 40, item 1). Each hostile move of the issue, on every embedded backend."""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path
from typing import Any

import pytest

import outlive
from outlive import Contract, Controller, Worker, _credential
from outlive import errors as E
from outlive import ledger as L
from outlive.records import AttemptState
from outlive.supervisor import Assignment, WorkDefinition

C = Contract(name="form", version="1", assessor="test")
V1 = {"s1": "Intro.", "s2": "Revenue was 4.1 million."}


def summ(**kw: str) -> dict[str, str]:
    (text,) = kw.values()
    return {"summary": text[:12]}


async def started(b: outlive.Backend, credential: str = "the-controller") -> tuple[Controller, Worker]:
    ctl = Controller(b, clock=lambda: 0, credential=credential)
    await ctl.open_work("w")
    await ctl.publish("w", "v1", V1)
    w = Worker(b, await ctl.admit("w"), V1, clock=lambda: 0)
    await w.start()
    return ctl, w


async def candidate(w: Worker) -> str:
    for k, v in V1.items():
        await w.step(k, summ, **{k: v})
    return (await w.candidate()).digest


async def test_a_fenced_out_worker_cannot_mark_its_successor_unknown_nor_admit_itself(
        backend: outlive.Backend) -> None:
    ctl, w1 = await started(backend)
    await ctl.mark_unknown("w", 1)
    successor = await ctl.admit("w")
    before = await backend.load("w")
    # the old worker holds its own token and secret, and the backend URL: not the controller's
    for cmd in (L.MarkUnknown(attempt=successor.number, at=1),
                L.MarkUnknown(attempt=successor.number, at=1, credential=w1.attempt.secret),
                L.MarkStopped(attempt=successor.number, at=1),
                L.Admit(at=1, key_hash=L.key_hash("mine"))):
        with pytest.raises(E.NotController):
            await backend.execute("w", cmd)
    assert await backend.load("w") == before
    assert (await ctl.state("w")).current_attempt == dataclasses.replace(successor, secret=None)


async def test_a_worker_cannot_accept_its_own_candidate(backend: outlive.Backend) -> None:
    ctl, w = await started(backend)
    digest = await candidate(w)
    mine = Contract(name="none", version="0", assessor="myself")
    for cred in (None, w.attempt.secret, "guess"):
        with pytest.raises(E.NotController):
            await backend.execute("w", L.Accept(digest=digest, contract=mine, verdict=True, at=1,
                                                credential=cred))
    st = await ctl.state("w")
    assert st.acceptances == () and st.refusals == ()
    assert outlive.rules.dependable(st, outlive.StrictCurrent()) is None


async def test_a_worker_cannot_publish_a_version_of_its_own(backend: outlive.Backend) -> None:
    ctl, _w = await started(backend)
    with pytest.raises(E.NotController):
        await backend.execute("w", L.PublishInput(version="v9", parts={"s1": "0" * 64}, at=1))
    assert (await ctl.state("w")).current_version == "v1"


async def test_another_controller_cannot_take_the_work_over(backend: outlive.Backend) -> None:
    ctl, _w = await started(backend)
    other = Controller(backend, clock=lambda: 0, credential="someone-else")
    with pytest.raises(E.NotController):
        await other.open_work("w")
    with pytest.raises(E.NotController):
        await other.publish("w", "v2", V1)
    await ctl.open_work("w")       # the same controller again: idempotent


async def test_a_work_opened_without_a_key_keeps_taking_unauthenticated_commands(
        backend: outlive.Backend) -> None:
    await backend.execute("legacy", L.OpenWork())
    await backend.execute("legacy", L.PublishInput(version="v1", parts={"s1": "0" * 64}, at=0))
    # a keyed controller arriving later does not lock anyone out of a work opened keyless
    ctl = Controller(backend, clock=lambda: 0, credential="late")
    await ctl.open_work("legacy")
    att = (await backend.execute("legacy", L.Admit(at=0))).record
    st = await ctl.state("legacy")
    assert st.controller_key_hash is None and att.number == 1


async def test_a_refused_candidate_leaves_a_record_and_is_not_judged_again(
        backend: outlive.Backend) -> None:
    ctl, w = await started(backend)
    digest = await candidate(w)
    calls: list[str] = []

    def no(c: Any, v: Any) -> tuple[bool, str]:
        calls.append(c.digest)
        return False, "quotes the wrong quarter"

    with pytest.raises(E.ContractFailed, match="quotes the wrong quarter"):
        await ctl.assess("w", digest, C, no)
    st = await ctl.state("w")
    (ref,) = st.refusals
    assert (ref.digest, ref.contract, ref.reason, ref.attempt) == (digest, C, "quotes the wrong quarter", 1)
    with pytest.raises(E.ContractFailed):   # refused again from the record, not re-judged
        await ctl.assess("w", digest, C, lambda c, v: (True, "ok"))
    assert calls == [digest] and st.acceptances == ()


async def test_a_candidate_of_a_stopped_attempt_is_never_accepted(backend: outlive.Backend) -> None:
    ctl, w = await started(backend)
    digest = await candidate(w)
    await ctl.stop("w", 1)
    with pytest.raises(E.AttemptStopped):
        await ctl.assess("w", digest, C, lambda c, v: (True, "ok"))
    with pytest.raises(E.AttemptStopped):
        await backend.execute("w", ctl.stamp(L.Accept(digest=digest, contract=C, verdict=True,
                                                      at=1)))
    assert (await ctl.state("w")).acceptances == ()


async def test_the_credential_is_never_handed_to_a_runner(backend: outlive.Backend) -> None:
    ctl, w = await started(backend, credential="s3cret-of-the-controller")
    d = WorkDefinition(work_id="w", attempt="tests.test_roles:summ", contract=C)
    a = Assignment.of(backend, d, w.attempt)
    text = repr(a) + repr(dataclasses.asdict(a)) + repr(w.attempt) + repr(ctl)
    assert "s3cret-of-the-controller" not in text
    assert w.attempt.secret is not None and w.attempt.state is AttemptState.ADMITTED


def test_the_default_credential_is_a_private_per_user_file(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(_credential.ENV_KEY, raising=False)
    path = tmp_path / "cfg" / "controller.key"
    monkeypatch.setenv(_credential.ENV_KEY_FILE, str(path))
    first = _credential.default_credential()
    assert path.read_text().strip() == first and len(first) == 64
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    _credential._CACHE.clear()
    assert _credential.default_credential() == first          # read back, not made anew
    monkeypatch.setenv(_credential.ENV_KEY, "from-the-environment")
    assert _credential.default_credential() == "from-the-environment"


def test_a_controller_refuses_a_credential_that_is_not_a_string() -> None:
    with pytest.raises(E.InvalidRecord):
        Controller(None, credential=b"bytes")  # type: ignore[arg-type]
