"""The q3-report work as a supervised attempt function, with crash points, for process tests.

Every attempt runs in its own ``outlive worker`` process. The run's folder (``OUTLIVE_RUN_DIR``)
holds the input versions, the feed's database, a log of model calls, and an optional
``crash.json`` — ``{"attempt": 1, "point": "after-model:s2", "signal": "KILL"}`` — that makes
that attempt signal itself exactly at that boundary (after writing ``hit-<attempt>``), so a
test knows where the process stopped without racing it. With ``"hold": true`` the attempt first
waits at the boundary until the test writes ``go-<attempt>``, so the test can act there (publish
a new version) before the signal.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import outlive
from outlive.supervisor import AttemptContext

SECTIONS = ("s1", "s2", "s3", "s4")
V1 = {
    "s1": "Q3 overview: demand held steady across all three regions.",
    "s2": "Revenue was 4.1 million for the quarter, up from 3.6 million in Q2.",
    "s3": "Operating costs fell 3 percent as the data-centre move completed.",
    "s4": "Outlook: the board expects growth to continue into Q4.",
}
V2 = {**V1, "s2": "Revenue was 4.7 million for the quarter, up from 3.6 million in Q2."}
CONTRACT = outlive.Contract(name="digest-form", version="1", assessor="supervised_q3:assess")

#: Every boundary of one attempt, in the order it passes them.
POINTS = (
    *(f"{where}:{s}" for s in SECTIONS for where in ("before-model", "after-model", "after-journal")),
    "after-candidate", "after-intent", "after-send", "after-confirm",
)


def run_dir() -> Path:
    return Path(os.environ["OUTLIVE_RUN_DIR"])


def inputs(version: str) -> dict[str, str]:
    versions: dict[str, dict[str, str]] = json.loads((run_dir() / "versions.json").read_text())
    return versions[version]


def assess(cand: outlive.Candidate, version: outlive.InputVersion | None) -> tuple[bool, str]:
    secs = cand.content
    return sorted(secs) == sorted(SECTIONS) and all(secs.values()), "complete, well-formed"


def _point(ctx: AttemptContext, name: str) -> None:
    path = run_dir() / "crash.json"
    if not path.exists():
        return
    crash = json.loads(path.read_text())
    if crash["attempt"] != ctx.attempt.number or crash["point"] != name:
        return
    (run_dir() / f"hit-{ctx.attempt.number}").write_text(f"{name} {time.time()}")
    if crash.get("hold"):
        # The test acts at this boundary first (publishes a new version), then lets it die.
        go = run_dir() / f"go-{ctx.attempt.number}"
        end = time.monotonic() + 300
        while not go.exists() and time.monotonic() < end:
            time.sleep(0.01)
    # sqlite:// writes on a thread of its own: let a lease renewal in flight finish, or the pause
    # would land inside that write and keep the file's write lock (what an embedded file cannot
    # fence; the point under test is the boundary, not that).
    _quiesce(ctx.worker.backend)
    os.kill(os.getpid(), getattr(signal, f"SIG{crash['signal']}"))


def _quiesce(backend: Any) -> None:
    """Let the database call in flight on the backend's thread finish before a pause.

    ``sqlite://`` has ``quiesce()``. ``langgraph+sqlite://`` runs every write on its one aiosqlite
    connection's thread: queue a marker behind whatever is in flight there and wait for it
    (aiosqlite's queue of ``(future, function)``; this runs on the event loop's thread).
    """
    if hasattr(backend, "quiesce"):
        backend.quiesce()
        return
    conn = getattr(getattr(backend, "_saver", None), "conn", None)
    queue = getattr(conn, "_tx", None)
    if queue is None:
        return
    import asyncio
    import threading

    try:
        marker = asyncio.get_running_loop().create_future()
    except RuntimeError:
        return
    reached = threading.Event()
    queue.put_nowait((marker, reached.set))
    reached.wait(60)


def feed(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    conn.execute("CREATE TABLE IF NOT EXISTS posts (key TEXT, body TEXT)")
    conn.execute("CREATE UNIQUE INDEX IF NOT EXISTS posts_key ON posts (key)")
    return conn


def post(key: str | None, body: Any) -> outlive.Receipt:
    """The feed: remembers operation keys atomically with the post (one SQLite transaction)."""
    conn = feed(run_dir() / "feed.db")
    try:
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute("SELECT rowid FROM posts WHERE key = ?", (key,)).fetchone()
        if row is None:
            cur = conn.execute("INSERT INTO posts (key, body) VALUES (?, ?)", (key, json.dumps(body)))
            row, dup = (cur.lastrowid,), False
        else:
            dup = True
        conn.execute("COMMIT")
    finally:
        conn.close()
    return outlive.Receipt(effect_id=f"P{row[0]}", duplicate=dup, key=key)


def op_key(work_id: str, digest: str) -> str:
    return f"announce:{work_id}:{digest[:8]}"


def payload(acc: outlive.Acceptance) -> dict[str, Any]:
    return {"digest": acc.digest[:8], "version": acc.version}


def announced(st: outlive.WorkState) -> bool:
    """Done: the current version's digest is accepted and its announcement confirmed, and no
    other announcement is left open."""
    acc = st.latest_acceptance
    if acc is None or acc.version != st.current_version:
        return False
    eff = st.effect(op_key(st.work_id, acc.digest))
    # settled: confirmed, or possibly duplicated (a resend after a crash answered "new")
    return eff is not None and all(outlive.ledger.is_settled(e) for e in st.effects)


async def attempt(ctx: AttemptContext) -> None:
    w = ctx.worker
    st = await w.backend.load(w.work_id)
    assert st is not None
    for open_effect in w.open_effects():
        # Settle what a predecessor left open: resend the same operation key, same payload.
        acc = next(a for a in st.acceptances if op_key(w.work_id, a.digest) == open_effect.op_key)
        await w.effect(open_effect.op_key, payload(acc), post)
    for name in SECTIONS:
        def summarise(name: str = name, **section: str) -> str:
            _point(ctx, f"before-model:{name}")
            with open(run_dir() / "calls.log", "a") as fh:
                fh.write(f"{ctx.attempt.number} {name}\n")
            out = next(iter(section.values())).split(",")[0]
            _point(ctx, f"after-model:{name}")
            return out

        await w.step(name, summarise, **{name: ctx.inputs[name]})
        _point(ctx, f"after-journal:{name}")
    cand = await w.candidate({s: w.result(s) for s in SECTIONS})
    _point(ctx, "after-candidate")
    acc = await ctx.judged(cand)
    op = op_key(w.work_id, acc.digest)

    def send(key: str | None, body: Any) -> outlive.Receipt:
        _point(ctx, "after-intent")
        receipt = post(key, body)
        _point(ctx, "after-send")
        return receipt

    await w.effect(op, payload(acc), send)
    _point(ctx, "after-confirm")


def definition(work_id: str = "digest/q3-report", **kw: Any) -> outlive.WorkDefinition:
    return outlive.WorkDefinition(
        work_id=work_id, attempt="supervised_q3:attempt", contract=CONTRACT,
        assessor="supervised_q3:assess", inputs="supervised_q3:inputs", complete=announced, **kw)


class _DyingDispatcher(outlive.SubprocessDispatcher):
    """Kills its own (supervisor) process around the first dispatch, as a test of restarts."""

    def __init__(self, die: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.die = die

    async def dispatch(self, assignment: outlive.Assignment) -> None:
        if self.die == "after-admit" and assignment.attempt == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        await super().dispatch(assignment)
        if self.die == "after-dispatch" and assignment.attempt == 1:
            os.kill(os.getpid(), signal.SIGKILL)


def supervise_main() -> None:
    """``python -c 'import supervised_q3 as m; m.supervise_main()' URL DIE``: one supervisor."""
    import asyncio
    import sys

    url, die = sys.argv[1], sys.argv[2]

    async def main() -> None:
        backend = await outlive.open_backend(url)
        lease = outlive.Lease(heartbeat_interval=500, missed_beats=4, start_grace=8_000)
        dispatcher = _DyingDispatcher(die, log_dir=run_dir() / "logs", stop_signal=None)
        async with outlive.Supervisor(backend, definition(lease=lease), dispatcher) as sup:
            await sup.publish("v1", V1)
            await sup.run()
        await backend.close()

    asyncio.run(main())


def cli_definition() -> outlive.WorkDefinition:
    """For ``outlive supervise supervised_q3:cli_definition``."""
    return definition(lease=outlive.Lease(heartbeat_interval=500, missed_beats=4))


async def hang(ctx: AttemptContext) -> None:
    """Works forever (renewing its lease) until it is stopped."""
    import asyncio

    await asyncio.Event().wait()
