"""The user's own handlers run the attempts; Restate's timers and cancel drive takeover.

The session's server and one deployment of the user's app (``restate_app``), registered once. Clients only
start works; the tests then watch the ledger (read-only) while Restate does the rest.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from restate_support import HERE, SECTIONS, calls, finished, held, opened, until

import outlive
from outlive import Contract, Controller
from outlive import ledger as L
from outlive._launch import free_port, port_open, stop_process, wait_until
from outlive.controller import default_credential
from outlive.errors import InvalidRecord, StaleOwner
from outlive.records import AttemptState, EffectState, WorkState
from outlive.supervisor import Lease, Supervisor, WorkDefinition
from outlive_restate import RestateBackend, RestateDispatcher, _errors, _ledger
from outlive_restate._errors import from_message
from outlive_restate._ledger import EXECUTE, EXECUTE_LAZY
from outlive_restate.server import RestateServer

pytestmark = pytest.mark.asyncio(loop_scope="session")

FORM = Contract(name="form", version="1", assessor="test")


async def open_and_start(backend: RestateBackend, work: str, log: Path, *,
                         lease: timedelta = timedelta(seconds=30), **target: Any) -> Controller:
    ctl = await opened(backend, work)
    target.setdefault("service", "reports")
    target.setdefault("handler", "summarise")
    arg = {"sections": SECTIONS, "log": str(log), **target.pop("extra", {})}
    await backend.start_work(work, arg=arg, lease=lease, **target)
    return ctl


async def test_attempt_runs_in_the_users_handler(backend: RestateBackend, tmp_path: Path) -> None:
    work = f"handler/{uuid.uuid4().hex[:8]}"
    log = tmp_path / "calls"
    ctl = await open_and_start(backend, work, log)
    st = await until("the attempt to finish", lambda: finished(backend, work))
    assert calls(log) == ["1:s1", "1:s1:returned", "1:s2", "1:s2:returned"]
    assert [(e.step, e.attempt) for e in st.journal] == [("s1", 1), ("s2", 1)]
    assert st.attempts[0].last_heartbeat > 1_000_000_000_000   # journaled wall time, in ms
    (cand,) = st.candidates
    acc = await ctl.assess(work, cand.digest, FORM, lambda c, v: (True, "ok"))
    assert acc.version == "v1"
    status = await backend.lease(work)
    assert [d["attempt"] for d in status["history"]] == [1]


async def test_an_attempt_starts_with_its_claim_alone(backend: RestateBackend,
                                                     tmp_path: Path) -> None:
    """The claim (``Worker.start``) is the attempt's first sign of life and already refuses a
    replaced attempt: no heartbeat follows it (each is one more write to the ledger)."""
    work = f"handler/{uuid.uuid4().hex[:8]}"
    await open_and_start(backend, work, tmp_path / "calls", renew=False)
    st = await until("the attempt to finish", lambda: finished(backend, work))
    assert [(a.number, a.state, a.heartbeats) for a in st.attempts] == [
        (1, AttemptState.FINISHED, 0)]


async def test_pipelined_writes_give_the_same_journal(backend: RestateBackend,
                                                     tmp_path: Path) -> None:
    """write="send": each step's fenced write leaves as a one-way send; the candidate (an
    awaited call that checks its parts against the journal) finds every entry in place."""
    work = f"handler/{uuid.uuid4().hex[:8]}"
    await open_and_start(backend, work, tmp_path / "calls", extra={"write": "send"})
    st = await until("the attempt to finish", lambda: finished(backend, work))
    assert [(e.step, e.attempt) for e in st.journal] == [("s1", 1), ("s2", 1)]
    assert len(st.candidates) == 1


async def test_starting_twice_is_one_attempt(backend: RestateBackend, tmp_path: Path) -> None:
    work = f"handler/{uuid.uuid4().hex[:8]}"
    await open_and_start(backend, work, tmp_path / "calls")
    again = await backend.start_work(work, service="reports", handler="summarise",
                                     arg={"sections": SECTIONS, "log": str(tmp_path / "x")})
    assert again["attempt"] == 1
    st = await until("the attempt to finish", lambda: finished(backend, work))
    assert len(st.attempts) == 1


async def test_work_completes_with_every_client_killed_and_a_paused_worker_replaced(
        server: RestateServer, backend: RestateBackend, tmp_path: Path) -> None:
    """The article's t2-t8 with no client left: #1 goes silent inside s2, Restate's lease
    check finds it silent, cancels it, marks it unknown and dispatches #2, which restores s1 by
    input key and finishes. #1 is released after: Restate's cancel ended it, nothing of it lands."""
    work = f"handler/{uuid.uuid4().hex[:8]}"
    log, hold = held(tmp_path)
    client = subprocess.Popen(
        [sys.executable, str(HERE / "restate_client.py"), server.url, work, str(log), "3000"],
        stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(HERE)})
    assert client.stdout is not None
    line = await asyncio.get_running_loop().run_in_executor(None, client.stdout.readline)
    client.send_signal(signal.SIGKILL)   # every client is gone from here on
    client.wait(10)
    assert line.strip() == b"started #1"

    st = await until("a successor to finish", lambda: finished(backend, work), timeout=90)
    assert [(a.number, a.state) for a in st.attempts] == [
        (1, AttemptState.UNKNOWN), (2, AttemptState.FINISHED)]
    assert [(e.step, e.attempt) for e in st.journal] == [("s1", 1), ("s2", 2)]
    assert "2:s1" not in calls(log)            # restored by input key, not asked again
    lease = await backend.lease(work)
    assert [d["attempt"] for d in lease["history"]] == [1, 2]

    invocation = lease["history"][0]["invocation"]
    hold.unlink()                              # whatever of #1 could still run may run now
    await until("#1's invocation to end", lambda: _ended(server, invocation))
    assert "cancel" in (await _output(server, invocation)).lower()
    st = await backend.load(work)
    assert st is not None
    assert [(e.step, e.attempt) for e in st.journal] == [("s1", 1), ("s2", 2)]
    assert st.stale_writes_applied == 0
    assert len(st.candidates) == 1 and st.candidates[0].attempt == 2


async def test_restate_judges_and_announces_with_every_client_killed(
        server: RestateServer, backend: RestateBackend, tmp_path: Path) -> None:
    """No controller after the start: the client hands the work over with a contract, an
    assessor and a receiver, and is SIGKILLed. Restate replaces the silent #1; #2 finishes and
    tells the lease, which judges its candidate (the assessor's verdict journaled), writes the
    acceptance, admits #3 to announce it and calls the feed with the operation key as
    Restate's idempotency key: one post, the effect confirmed, the lease says done."""
    work = f"judged/{uuid.uuid4().hex[:8]}"
    log, hold = held(tmp_path)
    client = subprocess.Popen(
        [sys.executable, str(HERE / "restate_client.py"), server.url, work, str(log), "1500",
         "--judge"], stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(HERE)})
    assert client.stdout is not None
    line = await asyncio.get_running_loop().run_in_executor(None, client.stdout.readline)
    client.send_signal(signal.SIGKILL)   # every client is gone from here on
    client.wait(10)
    assert line.strip() == b"started #1"
    try:
        async def done() -> Any:
            return (await backend.lease(work))["done"]

        got = await until("Restate to judge and announce", done, timeout=90)
    finally:
        hold.unlink()
    st = await backend.load(work)
    assert st is not None
    assert [(a.number, a.state) for a in st.attempts] == [
        (1, AttemptState.UNKNOWN), (2, AttemptState.FINISHED), (3, AttemptState.FINISHED)]
    (acc,) = st.acceptances
    assert (acc.attempt, acc.version, acc.contract) == (2, "v1", FORM)
    assert acc.note == "every section summarised"          # the app's assessor said so
    (eff,) = st.effects
    assert eff.op_key == f"announce:{work}:{acc.digest}" and eff.attempt == 3
    assert eff.state is EffectState.CONFIRMED
    async with httpx.AsyncClient() as http:
        r = await http.post(f"{server.ingress}/feed/{quote(work, safe='')}/posts", json=None)
    posts = r.json()
    assert [p["payload"]["digest"] for p in posts] == [acc.digest]
    assert got["digest"] == acc.digest and got["announced"]["effect_id"] == posts[0]["effect_id"]
    # the controller's credential stayed on the engine side: the lease's calls to the ledger
    # carry it, no step (a ctx.run, the assessor's included) and no attempt's invocation does
    secret = default_credential().encode().hex()
    history = (await backend.lease(work))["history"]
    attempts = {d["invocation"] for d in history}
    async with httpx.AsyncClient() as http:
        r = await http.post(f"{server.admin}/query", headers={"accept": "application/json"},
                            json={"query": "SELECT j.id AS id, i.target AS target, "
                                           "j.entry_type AS entry_type, j.raw AS raw FROM "
                                           "sys_journal j JOIN sys_invocation i ON j.id = i.id "
                                           f"WHERE i.target_service_key = '{work}' OR j.id IN ("
                                           + ", ".join(f"'{i}'" for i in attempts) + ")"})
    assert r.status_code == 200, r.text
    rows = r.json()["rows"]
    carried = [row for row in rows if secret in row["raw"]]
    assert carried and all(row["target"].startswith("outlive_lease/") and
                           row["entry_type"] == "Command: Call" for row in carried), carried
    assert {row["id"] for row in rows} >= attempts       # the attempts' journals were read
    assert not [row for row in carried if row["id"] in attempts]
    assert any(row["entry_type"] == "Command: Run" and row["target"].startswith(
        "outlive_lease/") for row in rows)                # the assessor's verdict, without it


async def test_restate_refuses_a_stale_candidate_and_accepts_the_successors(
        server: RestateServer, backend: RestateBackend, tmp_path: Path) -> None:
    """v2 is published while #1 runs: #1 finishes with a candidate for v1, which the lease's
    judgement refuses (VersionMismatch, before any assessor), so the lease sends #2 pinned to
    v2; #2 restores s1 (unchanged) and redoes s2; its candidate is accepted for v2 and
    announced once."""
    work = f"judged/{uuid.uuid4().hex[:8]}"
    log, hold = held(tmp_path)
    v2 = {**SECTIONS, "s2": "Revenue was 4.9 million."}
    ctl = await opened(backend, work)
    await backend.start_work(work, service="reports", handler="summarise",
                             arg={"sections": SECTIONS, "versions": {"v1": SECTIONS, "v2": v2},
                                  "log": str(log)},
                             lease=timedelta(minutes=10), contract=FORM,
                             assessor="restate_app:assess",
                             announce={"service": "feed", "handler": "post", "key": work})
    try:
        await until("#1 to be inside s2", lambda: _has(log, "1:s2"))
        await ctl.publish(work, "v2", v2)
    finally:
        hold.unlink()

    async def done() -> Any:
        return (await backend.lease(work))["done"]

    got = await until("Restate to judge and announce", done, timeout=90)
    st = await backend.load(work)
    assert st is not None
    assert [(a.number, a.state, a.pinned_version) for a in st.attempts] == [
        (1, AttemptState.FINISHED, "v1"), (2, AttemptState.FINISHED, "v2"),
        (3, AttemptState.FINISHED, "v2")]
    assert [(c.attempt, c.version) for c in st.candidates] == [(1, "v1"), (2, "v2")]
    (acc,) = st.acceptances
    assert (acc.attempt, acc.version) == (2, "v2") and got["digest"] == acc.digest
    assert [(e.step, e.attempt) for e in st.journal] == [("s1", 1), ("s2", 1), ("s2", 2)]
    assert "2:s1" not in calls(log)
    async with httpx.AsyncClient() as http:
        r = await http.post(f"{server.ingress}/feed/{quote(work, safe='')}/posts", json=None)
    assert [p["payload"]["digest"] for p in r.json()] == [acc.digest]


async def test_late_write_of_paused_handler_is_refused(server: RestateServer,
                                                       backend: RestateBackend,
                                                       tmp_path: Path) -> None:
    """Without Restate's cancel (an operator replaced #1 by hand, the lease was long), the
    ledger's fence is what refuses #1's late write: #1 wakes, writes with token 1 after the
    epoch moved to 2, and gets StaleOwner; nothing of it lands."""
    work = f"handler/{uuid.uuid4().hex[:8]}"
    log, hold = held(tmp_path)
    ctl = await open_and_start(backend, work, log, lease=timedelta(minutes=10),
                               extra={"write": "call"})
    await until("#1 to be inside s2", lambda: _has(log, "1:s2"))
    await backend.execute(work, Controller(backend).stamp(L.MarkUnknown(attempt=1, at=1)))
    second = await ctl.admit(work)
    assert second.token == 2
    invocation = (await backend.lease(work))["history"][0]["invocation"]
    hold.unlink()
    await until("#1's invocation to end", lambda: _ended(server, invocation))
    assert "1:s2:returned" in calls(log)       # it did wake and try
    out = await _output(server, invocation)
    assert isinstance(from_message(json.loads(out)["message"]), StaleOwner), out
    st = await backend.load(work)
    assert st is not None
    assert [(e.step, e.attempt) for e in st.journal] == [("s1", 1)]
    assert st.stale_writes_applied == 0 and not st.candidates


async def _counted(server: RestateServer, handler: str) -> Any:
    """What the test app's deployment counted so far (its ``reports/<handler>``)."""
    async with httpx.AsyncClient() as http:
        r = await http.post(f"{server.ingress}/reports/{handler}", json=None)
        r.raise_for_status()
        return r.json()


async def _writers(server: RestateServer) -> dict[str, int]:
    """How many invocations of each ledger writer the test app's deployment ran so far."""
    got: dict[str, int] = await _counted(server, "ledger_writers")
    return got


async def test_held_step_writes_reach_the_ledger_together_in_order(
        backend: RestateBackend, server: RestateServer) -> None:
    """A dispatched attempt (its lease renewed) holds its step writes back and writes them
    together: 600 quick steps are two ledger writes (a batch of 512, then the rest with the
    finish) instead of 600, and the journal is the one per-step writes give, entry for entry.
    Once the ledger holds 256 entries, the work's commands go to the lazy writer: Restate stops
    shipping the whole stored journal with each. Only this work's commands reach that writer,
    so its count is exact: the held attempt's last write; with per-step writes, every one
    after the 256th step's and the finish."""
    journals, writes, lazy = [], [], []
    for write in (None, "call"):
        work = f"held/{uuid.uuid4().hex[:8]}"
        extra: dict[str, Any] = {"n": 600} if write is None else {"n": 600, "write": write}
        await opened(backend, work)
        before = (await _writers(server))[EXECUTE_LAZY]
        # a long lease: no renewal beat (one more lazy invocation) on a loaded machine
        await backend.start_work(work, service="reports", handler="many", arg=extra,
                                 lease=timedelta(minutes=10))
        st = await until("the attempt to finish", partial(finished, backend, work), timeout=90)
        (att,) = st.attempts
        journals.append([(e.step, e.input_key, e.result, e.attempt) for e in st.journal])
        writes.append(att.signs - att.heartbeats)   # the claim, then each write of steps
        lazy.append((await _writers(server))[EXECUTE_LAZY] - before)
    assert journals[0] == journals[1] and len(journals[0]) == 600
    assert [r for *_, r in journals[0]] == [1] * 600
    assert [int(step[1:]) for step, *_ in journals[0]] == list(range(600))
    assert writes == [1 + 2, 1 + 600]
    assert lazy == [1, 600 - 256 + 1]


@pytest.mark.parametrize("n", [512, 1024])
async def test_an_attempts_last_full_batch_leaves_with_its_finish(
        backend: RestateBackend, server: RestateServer, n: int) -> None:
    """Held writes that fill a batch leave when the next step starts, not at once: an attempt
    whose steps fill its last batch exactly sends that batch with its finish, one invocation of
    the ledger instead of a send and the finish queued behind it."""
    work = f"held/{uuid.uuid4().hex[:8]}"
    await opened(backend, work)
    before = await _writers(server)
    await backend.start_work(work, service="reports", handler="many", arg={"n": n},
                             lease=timedelta(seconds=60))
    st = await until("the attempt to finish", partial(finished, backend, work), timeout=90)
    after = await _writers(server)
    assert [e.result for e in st.journal] == list(range(n))
    (att,) = st.attempts
    assert att.signs - att.heartbeats == 1 + n // 512
    # n=512: the claim and the finish carrying all 512, both eager (the ledger held none);
    # n=1024: the claim, the first batch (eager), the finish carrying the second (lazy)
    assert after[EXECUTE_LAZY] - before[EXECUTE_LAZY] == n // 512 - 1
    assert after[EXECUTE] - before[EXECUTE] >= 2


async def test_a_held_write_keeps_the_result_as_the_step_returned_it(
        backend: RestateBackend) -> None:
    """A held step write leaves after the step returned: the handler changing the dict it got
    back (in place, before the batch is sent) changes neither the ledger's journal nor what a
    successor would restore."""
    work = f"held/{uuid.uuid4().hex[:8]}"
    await opened(backend, work)
    await backend.start_work(work, service="reports", handler="many",
                             arg={"n": 3, "dicts": True}, lease=timedelta(seconds=60))
    st = await until("the attempt to finish", partial(finished, backend, work), timeout=90)
    assert [e.result for e in st.journal] == [{"i": i, "seen": [i]} for i in range(3)]


async def test_a_command_is_taken_as_sent_only_for_the_very_bytes_sent() -> None:
    """What the ledger takes as sent is the command those exact bytes encode: once, and never
    for other bytes that end the same way (decoded instead)."""
    entry = L.StepWrite(step="s1", sources={}, input_key="k" * 64, result=[1, "x"],
                        result_id="r" * 64)
    cmd = L.RecordSteps(attempt=1, token=3, at=5, entries=(entry,))
    raw = _errors.dumps(cmd)
    assert _ledger._received(_ledger.sent(raw, cmd)) is cmd
    again = _ledger._received(raw)            # taken once: decoded the second time
    assert again == cmd and again is not cmd
    forged = raw.replace(b'"attempt":1', b'"attempt":2', 1)
    assert forged != raw and forged[-_ledger._TAIL:] == raw[-_ledger._TAIL:]
    _ledger.sent(raw, cmd)
    got = _ledger._received(forged)
    assert isinstance(got, L.RecordSteps) and got.attempt == 2
    for i in range(_ledger._SENT_MAX + 1):   # bounded: a process whose ledger is elsewhere
        _ledger.sent(raw.replace(b'"at":5', b'"at":%d' % (100 + i)), cmd)
    assert len(_ledger._SENT) <= _ledger._SENT_MAX


async def test_held_writes_reach_the_ledger_decoded_once(backend: RestateBackend,
                                                        server: RestateServer) -> None:
    """The deployment that sends a batch of held writes also serves the ledger object that
    applies it: the ledger takes the command as sent instead of decoding its bytes again. Two
    batches (512 steps, then the rest with the finish), both taken; the journal is whole."""
    async def taken() -> int:
        got: int = await _counted(server, "sent_taken")
        return got

    before = await taken()
    work = f"held/{uuid.uuid4().hex[:8]}"
    await opened(backend, work)
    await backend.start_work(work, service="reports", handler="many", arg={"n": 600},
                             lease=timedelta(seconds=60))
    st = await until("the attempt to finish", partial(finished, backend, work), timeout=90)
    assert [e.result for e in st.journal] == list(range(600))
    assert await taken() - before == 2


async def test_a_held_step_write_reaches_the_ledger_by_the_next_renewal(
        backend: RestateBackend, tmp_path: Path) -> None:
    """While s2 runs, s1's write is held; the renewal timer (a third of the lease) writes it
    before its heartbeat, so a live attempt's steps are in the ledger within one period."""
    work = f"held/{uuid.uuid4().hex[:8]}"
    log, hold = held(tmp_path)
    try:
        await open_and_start(backend, work, log, lease=timedelta(seconds=3))
        await until("#1 to be inside s2", lambda: _has(log, "1:s2"))

        st = await until("s1 to reach the ledger", partial(_journaled, backend, work),
                         timeout=30)
        assert [(e.step, e.attempt) for e in st.journal] == [("s1", 1)]
        assert "1:s2:returned" not in calls(log)      # s2 still runs: it was the renewal
        assert [(a.number, a.state) for a in st.attempts] == [(1, AttemptState.RUNNING)]
    finally:
        hold.unlink()
    st = await until("#1 to finish", lambda: finished(backend, work))
    assert [(e.step, e.attempt) for e in st.journal] == [("s1", 1), ("s2", 1)]
    assert [d["attempt"] for d in (await backend.lease(work))["history"]] == [1]


async def test_held_writes_of_a_handler_replaced_by_hand_are_refused_together(
        server: RestateServer, backend: RestateBackend, tmp_path: Path) -> None:
    """Held writes meet the same fence: #1 holds s1 (a long lease, no renewal yet) while an
    operator replaces it; #1 wakes, and the write that carries s1 and s2 gets StaleOwner.
    Nothing of #1 lands, and the ledger had none of its steps while it ran."""
    work = f"held/{uuid.uuid4().hex[:8]}"
    log, hold = held(tmp_path)
    ctl = await open_and_start(backend, work, log, lease=timedelta(minutes=10))
    await until("#1 to be inside s2", lambda: _has(log, "1:s2"))
    st = await backend.load(work)
    assert st is not None and st.journal == ()        # s1's write is held in #1's invocation
    await backend.execute(work, Controller(backend).stamp(L.MarkUnknown(attempt=1, at=1)))
    assert (await ctl.admit(work)).token == 2
    invocation = (await backend.lease(work))["history"][0]["invocation"]
    hold.unlink()
    await until("#1's invocation to end", lambda: _ended(server, invocation))
    assert "1:s2:returned" in calls(log)
    out = await _output(server, invocation)
    assert isinstance(from_message(json.loads(out)["message"]), StaleOwner), out
    st = await backend.load(work)
    assert st is not None
    assert st.journal == () and st.stale_writes_applied == 0 and not st.candidates


@pytest.mark.parametrize("why", ["give_up_at", "too_large_at"])
async def test_a_handler_that_fails_for_good_still_writes_its_held_steps(
        backend: RestateBackend, tmp_path: Path, why: str) -> None:
    """The user's own TerminalError, or a step's result over the payload limit (refused at the
    step: PayloadTooLarge), ends the invocation for good: the steps it held are written on the
    way out (a successor restores them), the error still ends it."""
    work = f"held/{uuid.uuid4().hex[:8]}"
    await opened(backend, work)
    await backend.start_work(work, service="reports", handler="many",
                             arg={"n": 5, why: 3}, lease=timedelta(minutes=10))
    st = await until("the held steps to reach the ledger", partial(_journaled, backend, work))
    assert [(e.step, e.attempt) for e in st.journal] == [("q0", 1), ("q1", 1), ("q2", 1)]
    assert [(a.number, a.state) for a in st.attempts] == [(1, AttemptState.RUNNING)]


async def test_held_writes_without_renewals_are_refused(
        server: RestateServer, backend: RestateBackend) -> None:
    """Without renewals nothing bounds how long a held write would wait (and the writes are the
    attempt's only signs of life): write="held" is refused there, with nothing written; the
    default in that case is a write per step."""
    work = f"held/{uuid.uuid4().hex[:8]}"
    await opened(backend, work)
    await backend.start_work(work, service="reports", handler="many",
                             arg={"n": 2, "write": "held"}, renew=False,
                             lease=timedelta(minutes=10))   # no takeover churn after
    invocation = (await backend.lease(work))["history"][0]["invocation"]
    await until("the invocation to end", lambda: _ended(server, invocation))
    out = await _output(server, invocation)
    assert isinstance(from_message(json.loads(out)["message"]), InvalidRecord), out
    st = await backend.load(work)
    assert st is not None and st.journal == ()
    assert [(a.number, a.signs) for a in st.attempts] == [(1, 0)]   # not even claimed

    work = f"held/{uuid.uuid4().hex[:8]}"
    await opened(backend, work)
    await backend.start_work(work, service="reports", handler="many", arg={"n": 3},
                             renew=False)
    st = await until("the attempt to finish", partial(finished, backend, work))
    assert len(st.journal) == 3 and st.attempts[0].signs == 1 + 3    # the claim, 3 writes


async def test_a_killed_deployment_rebuilds_its_held_writes(
        backend: RestateBackend, apart: _Apart, tmp_path: Path) -> None:
    """SIGKILL the deployment while s1's write is held (not yet in the ledger) and s2 runs:
    Restate retries the invocation, the replay restores s1 from Restate's journal (the model
    is not asked again) and holds its write again, and the attempt finishes with both."""
    work = f"held/{uuid.uuid4().hex[:8]}"
    log, hold = held(tmp_path)
    try:
        await open_and_start(backend, work, log, service="reports_apart",
                             lease=timedelta(minutes=10))
        await until("#1 to be inside s2", lambda: _has(log, "1:s2"))
        st = await backend.load(work)
        assert st is not None and st.journal == ()
        apart.signal(signal.SIGKILL)
        await asyncio.to_thread(apart.stop)
        await asyncio.to_thread(apart.start)
        await until("s2 to run again after the replay", lambda: _count(log, "1:s2", 2))
    finally:
        hold.unlink()
    await _finished_alone(backend, work, log)


async def _journaled(backend: RestateBackend, work: str) -> WorkState | None:
    """The work's state once its ledger holds a journal entry, else None."""
    st = await backend.load(work)
    return st if st is not None and st.journal else None


async def _finished_alone(backend: RestateBackend, work: str, log: Path) -> None:
    """#1 finishes, alone, with both steps journaled and s1's model asked once."""
    st = await until("#1 to finish", lambda: finished(backend, work), timeout=90)
    assert [(a.number, a.state) for a in st.attempts] == [(1, AttemptState.FINISHED)]
    assert [(e.step, e.attempt) for e in st.journal] == [("s1", 1), ("s2", 1)]
    assert calls(log).count("1:s1") == 1


async def _has(log: Path, line: str) -> bool:
    return line in calls(log)


async def _output(server: RestateServer, invocation: str) -> str:
    async with httpx.AsyncClient() as http:
        r = await http.get(f"{server.ingress}/restate/invocation/{invocation}/output")
    return r.text


async def _ended(server: RestateServer, invocation: str) -> bool:
    async with httpx.AsyncClient() as http:
        r = await http.post(f"{server.admin}/query", headers={"accept": "application/json"},
                            json={"query": f"SELECT status FROM sys_invocation WHERE id = "
                                           f"'{invocation}'"})
    rows = r.json().get("rows", [])
    return not rows or rows[0]["status"] == "completed"


@pytest.fixture(scope="module")
async def desk(server: RestateServer) -> AsyncIterator[RestateBackend]:
    """The client side of the owner shape: the ledgers live on the user's own object ``desk``."""
    async with await outlive.open_backend(server.url + "&ledger=desk") as b:
        assert isinstance(b, RestateBackend)
        yield b


async def test_owner_shape_on_the_users_object(server: RestateServer, desk: RestateBackend,
                                                tmp_path: Path) -> None:
    work = f"owner/{uuid.uuid4().hex[:8]}"
    log = tmp_path / "calls"
    before: int = await _counted(server, "ahead_taken")
    await open_and_start(desk, work, log, service="desk", handler="draft", key=work)
    st = await until("the owner to finish", lambda: finished(desk, work))
    assert [(e.step, e.attempt) for e in st.journal] == [("s1", 1), ("s2", 1)]
    assert len(st.candidates) == 1 and calls(log).count("1:s1") == 1
    # each step's write was worked out while the server journaled the step (the work is
    # started from the end of the task the SDK runs the step's action in), and taken
    assert await _counted(server, "ahead_taken") - before == 2


async def test_owner_shape_silent_owner_is_cancelled_and_replaced(
        server: RestateServer, desk: RestateBackend, tmp_path: Path) -> None:
    """The owner holds the object's lock while it runs; Restate's cancel ends it, which frees
    the lock for the lease's MarkUnknown and the successor's invocation on the same key."""
    work = f"owner/{uuid.uuid4().hex[:8]}"
    log, hold = held(tmp_path)
    try:
        await open_and_start(desk, work, log, service="desk", handler="draft", key=work,
                             lease=timedelta(milliseconds=3000), renew=False)
        st = await until("a successor to finish", lambda: finished(desk, work), timeout=90)
    finally:
        hold.unlink()
    assert [(a.number, a.state) for a in st.attempts] == [
        (1, AttemptState.UNKNOWN), (2, AttemptState.FINISHED)]
    assert [(e.step, e.attempt) for e in st.journal] == [("s1", 1), ("s2", 2)]
    assert "2:s1" not in calls(log)


async def test_supervisor_with_the_restate_dispatcher(backend: RestateBackend,
                                                      tmp_path: Path) -> None:
    """The library's supervisor admits #1 and judges; Restate runs and replaces attempts."""
    work = f"supervised/{uuid.uuid4().hex[:8]}"
    log, hold = held(tmp_path)
    await opened(backend, work)
    definition = WorkDefinition(work_id=work, attempt="restate_app:summarise", contract=FORM,
                                lease=Lease(heartbeat_interval=1500, missed_beats=2))
    dispatcher = RestateDispatcher(backend, service="reports", handler="summarise",
                                   arg={"sections": SECTIONS, "log": str(log)}, renew=False)
    try:
        done = await asyncio.wait_for(Supervisor(backend, definition, dispatcher, poll=0.1).run(),
                                      90)
    finally:
        hold.unlink()
    assert [(a.number, a.state) for a in done.attempts] == [
        (1, AttemptState.UNKNOWN), (2, AttemptState.FINISHED)]
    assert done.acceptance.version == "v1"
    assert [d["attempt"] for d in (await backend.lease(work))["history"]] == [1, 2]


async def test_lease_gives_up_after_max_attempts_instead_of_looping(
        backend: RestateBackend, tmp_path: Path) -> None:
    work = f"handler/{uuid.uuid4().hex[:8]}"
    log, hold = held(tmp_path)
    try:
        await open_and_start(backend, work, log, lease=timedelta(milliseconds=800),
                             max_attempts=1, renew=False)

        async def gave_up() -> Any:
            return (await backend.lease(work))["gave_up"]

        got = await until("the lease to give up", gave_up)
    finally:
        hold.unlink()
    assert got["after"] == 1
    st = await backend.load(work)
    assert st is not None
    assert [(a.number, a.state) for a in st.attempts] == [(1, AttemptState.UNKNOWN)]


class _Apart:
    """A second deployment serving only the user's ``reports_apart`` (registered once), so a
    test can kill or pause it while outlive's lease and ledger objects run on the first."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "outlive_restate._deployment", "--bind",
             f"127.0.0.1:{self.port}", "--app", "restate_app:apart_app"],
            env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
                str(HERE), os.environ.get("PYTHONPATH")]))})
        wait_until(lambda: port_open(self.port), what="the second deployment", timeout=60,
                   proc=self.proc)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
        stop_process(self.proc, sig=signal.SIGKILL)


@pytest.fixture(scope="module")
def apart(server: RestateServer) -> Iterator[_Apart]:
    dep = _Apart()
    try:
        dep.start()
        r = httpx.post(f"{server.admin}/deployments",
                       json={"uri": f"http://127.0.0.1:{dep.port}", "force": False}, timeout=30)
        assert r.status_code in (200, 201), r.text
        yield dep
    finally:
        dep.stop()


async def test_a_step_longer_than_the_lease_renews_it_and_a_paused_handler_is_replaced(
        backend: RestateBackend, apart: _Apart, tmp_path: Path) -> None:
    """#1's s2 runs for several leases in a live handler: its invocation renews the lease
    (Restate timers racing the step's entry), so no check takes it over. Then its process is
    paused (SIGSTOP): nothing renews, and the lease replaces it as before."""
    work = f"renew/{uuid.uuid4().hex[:8]}"
    log, hold = held(tmp_path)
    lease_ms = 3000

    async def beats() -> int:
        st = await backend.load(work)
        assert st is not None
        assert [(a.number, a.state) for a in st.attempts] == [(1, AttemptState.RUNNING)]
        assert [d["attempt"] for d in (await backend.lease(work))["history"]] == [1]
        return st.attempts[0].heartbeats

    try:
        await open_and_start(backend, work, log, service="reports_apart",
                             lease=timedelta(milliseconds=lease_ms))
        await until("#1 to be inside s2", lambda: _has(log, "1:s2"))
        beats0 = await beats()
        await asyncio.sleep(2.5 * lease_ms / 1000)   # s2 is still running: 2.5 leases long
        beats1 = await beats()
        assert beats1 >= beats0 + 3                  # renewed while s2 ran

        apart.signal(signal.SIGSTOP)                 # now #1 is really silent
        try:
            async def replaced() -> bool:
                return len((await backend.lease(work))["history"]) == 2

            await until("the lease to replace the paused #1", replaced, timeout=60)
        finally:
            apart.signal(signal.SIGCONT)
        st = await until("#2 to finish", lambda: finished(backend, work), timeout=90)
    finally:
        hold.unlink()
    assert [(a.number, a.state) for a in st.attempts] == [
        (1, AttemptState.UNKNOWN), (2, AttemptState.FINISHED)]
    assert [(e.step, e.attempt) for e in st.journal] == [("s1", 1), ("s2", 2)]
    assert "2:s1" not in calls(log) and calls(log).count("1:s1") == 1


async def _count(log: Path, line: str, n: int) -> bool:
    return calls(log).count(line) >= n


async def test_a_replay_goes_through_the_journaled_renewals(
        backend: RestateBackend, apart: _Apart, tmp_path: Path) -> None:
    """The deployment is SIGKILLed inside s2 after several renewals were journaled (a long
    lease, renewing every 300 ms): Restate's retry replays the timers and beats in the order
    they completed (no journal mismatch), runs s2's body again and renews on; s1 comes from
    Restate's journal and the attempt finishes, alone."""
    work = f"renew/{uuid.uuid4().hex[:8]}"
    log, hold = held(tmp_path)
    try:
        await open_and_start(backend, work, log, service="reports_apart",
                             lease=timedelta(minutes=10), extra={"renew_ms": 300})
        await until("#1 to be inside s2", lambda: _has(log, "1:s2"))

        async def beats(n: int) -> bool:
            st = await backend.load(work)
            return st is not None and st.attempts[0].heartbeats >= n

        await until("three renewals", lambda: beats(5))
        apart.signal(signal.SIGKILL)
        await asyncio.to_thread(apart.stop)
        st = await backend.load(work)
        assert st is not None
        before = st.attempts[0].heartbeats
        await asyncio.to_thread(apart.start)
        await until("s2 to run again after the replay", lambda: _count(log, "1:s2", 2))
        await until("renewals after the replay", lambda: beats(before + 2))
    finally:
        hold.unlink()
    await _finished_alone(backend, work, log)
