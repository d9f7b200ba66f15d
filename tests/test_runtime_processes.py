"""The runtime across processes: `outlive serve` killed with works in flight and started again,
`outlive start` and `outlive works` (issue: serve many works)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import runtime_kinds as K

import outlive
from outlive import Runtime
from outlive.cli import main as cli_main

HERE = Path(__file__).parent


def _serve(url: str, receiver: Path, *kinds: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "OUTLIVE_TEST_RECEIVER": str(receiver),
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-m", "outlive.cli", "serve", *kinds, "--backend", url,
                             "--quiet", "--discover", "0.1"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _stop(*procs: subprocess.Popen[bytes] | None) -> None:
    """Ctrl-C each serving process still running (it drains), killed if it will not end."""
    for p in procs:
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGINT)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def _fail_one(url: str, work_id: str) -> None:
    """A work of the non-retryable kind, run to its failure."""
    async def go() -> None:
        async with Runtime(url, [K.NONRETRYABLE], discover=None, report_errors=False) as rt:
            h = await rt.start(K.NONRETRYABLE, work_id, "v1", K.parts_for("v1"))
            try:
                await h.result()
            except outlive.WorkFailed:
                pass
    asyncio.run(go())


async def _count(rt: Runtime, state: str) -> int:
    return len(await rt.works(state=state, kind="recover"))


async def test_a_killed_runtime_started_again_completes_every_work_once(
        tmp_path: Path, monkeypatch: Any) -> None:
    url = f"sqlite:///{tmp_path / 'o.db'}"
    receiver = tmp_path / "receiver.db"
    gate = tmp_path / "gate"   # holds the works past the tenth after their first step
    gate.touch()
    monkeypatch.setenv("OUTLIVE_TEST_GATE", str(gate))
    n = 120
    first = _serve(url, receiver, "runtime_kinds:RECOVER")
    second = None
    try:
        async with Runtime(url, [], supervise=False, report_errors=False) as client:
            for i in range(n):
                await client.start("recover", f"r/{i}", "v1", K.parts_for("v1"))
            for _ in range(3000):   # the first done, others held at the gate mid-attempt
                if (await client.handle("r/0").state()).status == "completed" and \
                        (await client.handle("r/10").state()).state.journal:
                    break
                await asyncio.sleep(0.01)
            first.send_signal(signal.SIGKILL)
            first.wait()
            gate.unlink()
            done_before = await _count(client, "completed")
            assert done_before < n, "the kill came too late to find works in flight"
            second = _serve(url, receiver, "runtime_kinds:RECOVER")
            results = await asyncio.wait_for(asyncio.gather(
                *(client.handle(f"r/{i}").result() for i in range(n))), 120)
            states = [(await client.handle(f"r/{i}").state()).state for i in range(n)]
    finally:
        _stop(first, second)
    assert len(results) == n
    for st in states:
        assert len(st.acceptances) == 1, st.work_id            # accepted once
        assert all(e.sends >= 1 for e in st.effects) and len(st.effects) == 1
    with sqlite3.connect(receiver) as conn:
        keys = [k for (k,) in conn.execute("SELECT op_key FROM posts")]
    assert len(keys) == n and len(set(keys)) == n               # announced once each
    assert any(len(st.attempts) > 1 for st in states)           # some were carried on


def test_start_and_works_on_the_command_line(tmp_path: Path, capsys: object) -> None:
    url = f"sqlite:///{tmp_path / 'o.db'}"
    parts = tmp_path / "parts.json"
    parts.write_text(json.dumps(K.parts_for("v1")))
    assert cli_main(["start", "small", "cli/1", "--publish", "v1", str(parts),
                     "--backend", url]) == 0
    assert cli_main(["start", "small", "cli/1", "--publish", "v1", str(parts),
                     "--backend", url]) == 0      # the same work again
    assert cli_main(["works", "--backend", url, "--json"]) == 0
    out = capsys.readouterr().out   # type: ignore[attr-defined]
    rows = json.loads(out[out.index("["):])
    assert [(r["work_id"], r["kind"], r["state"]) for r in rows] == [("cli/1", "small", "open")]


def test_works_reads_the_backend_from_the_environment(tmp_path: Path, monkeypatch: object,
                                                        capsys: object) -> None:
    url = f"sqlite:///{tmp_path / 'env.db'}"
    monkeypatch.setenv("OUTLIVE_BACKEND", url)   # type: ignore[attr-defined]
    _fail_one(url, "env/bad")
    assert cli_main(["works", "--state", "failed"]) == 0
    out = capsys.readouterr().out   # type: ignore[attr-defined]
    assert "env/bad" in out and "NonRetryable: the ticket was deleted" in out


def test_inspect_shows_the_attempts_errors_and_the_works_failure(tmp_path: Path,
                                                                  capsys: object) -> None:
    url = f"sqlite:///{tmp_path / 'inspect.db'}"
    _fail_one(url, "inspect/bad")
    assert cli_main(["inspect", "inspect/bad", "--backend", url]) == 0
    out = capsys.readouterr().out   # type: ignore[attr-defined]
    assert "FAILED: NonRetryable: the ticket was deleted" in out
    assert "raised NonRetryable: the ticket was deleted  (not retryable)" in out


async def _all_running(client: Runtime, ids: list[str]) -> list[Any]:
    """Wait until each work's attempt is claimed (running), and return the states."""
    for _ in range(3000):
        states = [(await client.handle(w).state()).state for w in ids]
        if all(st.current_attempt is not None and st.current_attempt.signs > 0
               and st.current_attempt.state.value == "running" for st in states):
            return states
        await asyncio.sleep(0.02)
    raise AssertionError("the attempts never all ran")


def _taken_over_early(states: list[Any], lease_ms: int) -> None:
    """Each work completed with a successor admitted before its predecessor's lease ran out:
    the successor's runtime found the first runner dead, it did not wait for silence."""
    for st in states:
        first, *rest = st.attempts
        assert rest, f"{st.work_id}: no successor"
        assert first.runner is not None and rest[0].runner not in (None, first.runner)
        assert rest[0].admitted_at < first.last_heartbeat + lease_ms, (
            st.work_id, rest[0].admitted_at - first.last_heartbeat)
        assert len(st.acceptances) == 1


async def held_then(url: str, tmp_path: Path, monkeypatch: Any, kind: str, ids: list[str],
                    then: Callable[[subprocess.Popen[bytes], Path],
                                   Awaitable[subprocess.Popen[bytes]]]) -> list[Any]:
    """Works of a gated kind, all running on one serving runtime; then ``then(runtime, gate)``
    (a kill or a pause, the gate opened, the runtime that carries on returned); every work
    awaited. The works' states."""
    gate = tmp_path / "gate"
    gate.touch()
    monkeypatch.setenv("OUTLIVE_TEST_GATE", str(gate))
    procs = [_serve(url, tmp_path / "receiver.db", f"runtime_kinds:{kind.upper()}")]
    try:
        async with Runtime(url, [], supervise=False, report_errors=False) as client:
            for w in ids:
                await client.start(kind, w, "v1", K.parts_for("v1"))
            await _all_running(client, ids)
            procs.append(await then(procs[0], gate))
            await asyncio.wait_for(asyncio.gather(*(client.handle(w).result() for w in ids)), 50)
            return [(await client.handle(w).state()).state for w in ids]
    finally:
        if procs[0].poll() is None:
            procs[0].send_signal(signal.SIGCONT)   # a paused one, to be stopped
        _stop(*procs)


async def test_a_restarted_runtime_takes_over_its_dead_predecessors_attempts_at_once(
        tmp_path: Path, monkeypatch: Any) -> None:
    """A runtime SIGKILLed with attempts running, started again: the attempts are taken over as
    soon as it starts, not after their lease (a minute here), as DBOS recovers at launch."""
    url = f"sqlite:///{tmp_path / 'o.db'}"

    async def restart(first: subprocess.Popen[bytes], gate: Path) -> subprocess.Popen[bytes]:
        first.send_signal(signal.SIGKILL)
        first.wait()
        gate.unlink()
        return _serve(url, tmp_path / "receiver.db", "runtime_kinds:HELD")
    states = await held_then(url, tmp_path, monkeypatch, "held", [f"h/{i}" for i in range(6)],
                             restart)
    _taken_over_early(states, K.HELD.lease.timeout)


async def survivor_takes_over(url: str, tmp_path: Path, monkeypatch: Any) -> None:
    """Runtime a runs every attempt, b starts and sees them running under a live runner, a is
    SIGKILLed: b takes them over at once, not after their lease (a minute here)."""
    async def kill_one(a: subprocess.Popen[bytes], gate: Path) -> subprocess.Popen[bytes]:
        b = _serve(url, tmp_path / "receiver.db", "runtime_kinds:HELD")
        await asyncio.sleep(2.0)   # b has seen them running under a live runner
        a.send_signal(signal.SIGKILL)
        a.wait()
        gate.unlink()
        return b
    states = await held_then(url, tmp_path, monkeypatch, "held", [f"k/{i}" for i in range(8)],
                             kill_one)
    _taken_over_early(states, K.HELD.lease.timeout)


async def test_a_survivor_takes_over_a_killed_runtimes_attempts_when_it_dies(
        tmp_path: Path, monkeypatch: Any) -> None:
    """On one SQLite file: b watches a's runner file and acts when a's lock is gone."""
    await survivor_takes_over(f"sqlite:///{tmp_path / 'o.db'}", tmp_path, monkeypatch)
