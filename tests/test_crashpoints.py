"""Crash points with real processes: every boundary x {SIGKILL, SIGSTOP then SIGCONT} x {input
changed at the crash (during a pause; just before a kill), no change}, each attempt an
``outlive worker`` OS process.

``make test`` runs a bounded subset (on sqlite://, two cases on postgresql://); ``make
crashpoints`` (``OUTLIVE_CRASHPOINTS=full``) runs the whole matrix on sqlite://, postgresql:// (a
throwaway server this project starts) and langgraph+sqlite://. Each run checks: no stale write
lands (and a woken process's own log shows its refusal), restores match input keys, the accepted
digest is for the current version and derives from it alone, one acceptance per version, the
receiver applied each operation key once, no attempt ends in any state but unknown, stopped or
finished.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import supervised_q3 as q3

import outlive
from outlive import Lease, SubprocessDispatcher, Supervisor
from outlive.hashing import content_hash, input_key

HERE = Path(__file__).resolve().parent
FULL = os.environ.get("OUTLIVE_CRASHPOINTS") == "full"
# Generous: the machine may be loaded. A process that has not started yet is not silent for five
# minutes (an interpreter importing LangGraph on a busy 2-core machine has taken over two).
LEASE = Lease(heartbeat_interval=500, missed_beats=4, start_grace=300_000)
#: Seconds a run may take to reach a scene on such a machine (nothing waits this long when quiet).
SLOW = 240

#: The bounded subset in `make test`: a boundary of each kind, both signals, both input stories.
SUBSET = [
    ("after-model:s2", "KILL", True),
    ("after-journal:s2", "STOP", True),
    ("after-candidate", "STOP", True),
    ("after-candidate", "KILL", False),     # the successor rebuilds the same digest
    ("after-intent", "KILL", False),
    ("after-send", "KILL", True),
    ("after-confirm", "STOP", True),
]
MATRIX = [(p, s, c) for p in q3.POINTS for s in ("KILL", "STOP") for c in (True, False)]


def _backends() -> list[str]:
    return ["sqlite", "postgresql", "langgraph+sqlite"] if FULL else ["sqlite"]


#: In `make test`, postgresql:// runs these cases of the subset (the server is started once).
PG_SUBSET = [("after-journal:s2", "STOP", True), ("after-send", "KILL", True)]


@pytest.fixture(scope="module")
def pg_server() -> Iterator[Any]:
    from outlive._pgserver import PostgresServer

    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.stop()


def _url(kind: str, folder: Path, request: pytest.FixtureRequest | None = None) -> str:
    if kind == "postgresql":
        assert request is not None
        server = request.getfixturevalue("pg_server")
        return str(server.create_database(f"crash_{uuid.uuid4().hex[:8]}"))
    return {"sqlite": f"sqlite:///{folder / 'outlive.db'}",
            "langgraph+sqlite": f"langgraph+sqlite:///{folder / 'lg.db'}"}[kind]


async def _until(pred: Any, timeout: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not await pred():
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def _logs(folder: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}"
                     for p in sorted((folder / "logs").glob("*.log")))


async def crash_run(url: str, folder: Path, point: str, sig: str, change: bool, *,
                    warm: bool | int = False,
                    stop_signal: signal.Signals | None = None) -> dict[str, Any]:
    """One run of the matrix; returns what the checks need."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "versions.json").write_text(json.dumps({"v1": q3.V1, "v2": q3.V2}))
    # A killed process is noticed at once (the dispatcher sees it exit), so there is no silence
    # to publish into without racing the supervisor: after the confirmation it would already have
    # finished the work for v1. A SIGKILL case with a change publishes v2 while the attempt holds
    # at the boundary, then lets it die; a paused one gets v2 during its pause.
    hold = change and sig == "KILL"
    (folder / "crash.json").write_text(json.dumps({"attempt": 1, "point": point, "signal": sig,
                                                   "hold": hold}))
    backend = await outlive.open_backend(url)
    env = {"OUTLIVE_RUN_DIR": str(folder),
           "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path[1:]])}
    dispatcher = SubprocessDispatcher(env=env, log_dir=folder / "logs", stop_signal=stop_signal,
                                      warm=warm)
    definition = q3.definition(lease=LEASE, max_attempts=4)
    sup = Supervisor(backend, definition, dispatcher)
    work = definition.work_id
    try:
        await sup.controller.open_work(work)
        await sup.controller.publish(work, "v1", q3.V1)
        run = asyncio.create_task(sup.run())

        async def hit() -> bool:
            if (folder / "hit-1").exists():
                return True
            if run.done():
                run.result()
                raise AssertionError(f"the work ended before attempt #1 reached {point}")
            return False

        try:
            await _until(hit, SLOW, f"attempt #1 to reach {point}")
        except AssertionError as e:
            raise AssertionError(f"{e}; ledger: {await sup.controller.state(work)!r}\n"
                                 + _logs(folder)) from None
        first = outlive.Assignment.of(backend, definition, (await sup.controller.state(work)).attempts[0])
        pid = dispatcher.pid(first)
        assert pid is not None
        if change:
            await sup.controller.publish(work, "v2", q3.V2)   # at the boundary / in the pause
        if hold:
            (folder / "go-1").write_text("")
        if sig == "STOP":
            async def replaced() -> bool:
                return (await sup.controller.state(work)).epoch > 1 or run.done()

            await _until(replaced, SLOW, "a successor")
            os.kill(pid, signal.SIGCONT)
        done = await asyncio.wait_for(run, SLOW)
        proc = dispatcher.procs[(work, 1)]
        await asyncio.wait_for(proc.wait(), 60)   # the woken one has had its say
        st = await sup.controller.state(work)
    finally:
        await dispatcher.close()
        await backend.close()
    conn = sqlite3.connect(folder / "feed.db")
    posts = conn.execute("SELECT key FROM posts").fetchall()
    conn.close()
    logs = {int(p.stem.rsplit("-", 1)[1]): p.read_text()
            for p in (folder / "logs").glob("digest_*.log")}
    return {"done": done, "state": st, "posts": [k for (k,) in posts], "logs": logs,
            "returncode": proc.returncode}


def check_run(out: dict[str, Any], sig: str, change: bool) -> None:
    st: outlive.WorkState = out["state"]
    current = "v2" if change else "v1"
    content = q3.V2 if change else q3.V1
    # no stale write lands; the woken process says it was refused
    assert st.stale_writes_applied == 0
    assert not any(e.stale for e in st.journal) and not any(c.stale for c in st.candidates)
    if sig == "STOP" and len(st.attempts) > 1:
        assert "refused" in out["logs"][1], out["logs"][1]     # replaced while paused
    elif sig == "STOP":
        # paused after its last effect: the work was done, nobody replaced it, its token is
        # still the epoch - woken, it finishes legitimately
        assert st.attempts[0].state is outlive.AttemptState.FINISHED, out["logs"][1]
    else:
        assert out["returncode"] == -signal.SIGKILL
    # the accepted digest is for the current version and derives from it alone
    acc = out["done"].acceptance
    assert acc.version == current == st.current_version
    cand = st.candidate(acc.digest)
    assert cand is not None and cand.version == current
    for part in cand.parts:
        # restores match input keys: each part is keyed by the hash of the current section
        assert part.sources == {part.step: content_hash(content[part.step])}
        assert part.input_key == input_key(part.step, part.sources)
        entry = next(e for e in st.journal if e.result_id == part.result_id)
        assert entry.input_key == part.input_key
    # a change reached the work before it was done: a successor carried it to the new version
    if change:
        assert len(st.attempts) >= 2, [a.state for a in st.attempts]
    # one acceptance per version
    per_version = Counter(a.version for a in st.acceptances)
    assert all(n == 1 for n in per_version.values()), per_version
    # the receiver applied each operation key once, and the current digest was announced
    assert len(out["posts"]) == len(set(out["posts"]))
    assert q3.op_key(st.work_id, acc.digest) in out["posts"]
    # settled: confirmed, or possibly duplicated when a resend after a crash was answered "new"
    assert all(outlive.ledger.is_settled(e) for e in st.effects)
    # silence is never failure: every attempt is unknown, stopped or finished
    assert {a.state for a in st.attempts} <= {outlive.AttemptState.UNKNOWN,
                                              outlive.AttemptState.STOPPED,
                                              outlive.AttemptState.FINISHED}
    tokens = [a.token for a in st.attempts]
    assert tokens == sorted(set(tokens))


CASES = MATRIX if FULL else SUBSET


@pytest.mark.crashpoints
@pytest.mark.parametrize("kind", _backends())
@pytest.mark.parametrize(("point", "sig", "change"), CASES,
                         ids=[f"{p}-{s}-{'change' if c else 'same'}" for p, s, c in CASES])
async def test_attempt_process_dies_or_pauses_at_a_boundary(
        kind: str, point: str, sig: str, change: bool, tmp_path: Path,
        request: pytest.FixtureRequest) -> None:
    out = await crash_run(_url(kind, tmp_path, request), tmp_path, point, sig, change)
    check_run(out, sig, change)


@pytest.mark.crashpoints
@pytest.mark.parametrize(("point", "sig", "change"), [] if FULL else PG_SUBSET,
                         ids=[f"{p}-{s}-{'change' if c else 'same'}"
                              for p, s, c in ([] if FULL else PG_SUBSET)])
async def test_attempt_process_dies_or_pauses_on_postgresql(
        point: str, sig: str, change: bool, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The bounded subset on postgresql:// (the full matrix runs it through the test above)."""
    out = await crash_run(_url("postgresql", tmp_path, request), tmp_path, point, sig, change)
    check_run(out, sig, change)


async def test_warm_spare_processes_take_over_the_same_way(tmp_path: Path) -> None:
    """With spare processes waiting (interpreter up, module imported), each attempt is still its
    own process, handed its number and token on stdin; the pool is kept at its size."""
    out = await crash_run(_url("sqlite", tmp_path), tmp_path, "after-send", "KILL", True, warm=2)
    check_run(out, "KILL", True)
    assert "spare for supervised_q3:attempt ready" in out["logs"][2]    # #2 was a spare
    assert "(token 2, pid" in out["logs"][2]
    # two spares started with #1; #2 took the oldest and a replacement was started
    assert len(list((tmp_path / "logs").glob("spare-*.log"))) == 2


async def test_stop_sends_sigterm_and_the_worker_process_stops(tmp_path: Path) -> None:
    """The dispatcher's stop for a replaced attempt: SIGTERM, and the worker stops at once (exit
    143, saying so in its own log) instead of working on without write authority."""
    (tmp_path / "versions.json").write_text(json.dumps({"v1": q3.V1}))
    backend = await outlive.open_backend(_url("sqlite", tmp_path))
    env = {"OUTLIVE_RUN_DIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path[1:]])}
    dispatcher = SubprocessDispatcher(env=env, log_dir=tmp_path / "logs")
    definition = outlive.WorkDefinition(work_id="w", attempt="supervised_q3:hang",
                                        contract=q3.CONTRACT, inputs="supervised_q3:inputs",
                                        lease=LEASE)
    try:
        sup = Supervisor(backend, definition, dispatcher)
        await sup.publish("v1", q3.V1)
        await sup.tick()
        st = await sup.controller.state("w")
        while st.attempts[0].heartbeats < 1:          # it runs and renews its lease
            await asyncio.sleep(0.05)
            st = await sup.controller.state("w")
        first = outlive.Assignment.of(backend, definition, st.attempts[0])
        await dispatcher.stop(first)
        proc = dispatcher.procs[("w", 1)]
        assert await asyncio.wait_for(proc.wait(), 60) == 143
    finally:
        await dispatcher.close()
        await backend.close()
    assert "stopped by SIGTERM" in (tmp_path / "logs" / "w-1.log").read_text()
