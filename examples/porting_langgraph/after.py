"""AFTER: the same workflow on outlive, running on LangGraph (``langgraph+sqlite``).

The diff against ``before.py``, line by line in ``docs/porting-langgraph.md``:

1. the report is published as a *version*; the library's supervisor admits each attempt (owner
   token) pinned to it, runs it as an invocation of the graph and takes over a silent one;
2. ``@task`` -> ``@outlive_task``: steps are restored by input key and every write is fenced;
3. the entrypoint submits a *candidate*; the supervisor (not the worker) accepts it for a version;
4. the post is an *effect keyed by operation* (``announce:<work>:<digest>``), not a bare call;
5. the newsletter asks ``dependable(StrictCurrent())`` instead of reading the latest state.

Each attempt is its own ``outlive worker`` process, so the pause is a real one (SIGSTOP: no
step, no lease renewal) and so is the poster's death (SIGKILL). Nothing here marks an attempt
``unknown`` or admits one: the supervisor does.

Run it: ``python examples/porting_langgraph/after.py`` — the same situation as ``before.py``.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

from langgraph.func import entrypoint

import outlive
from outlive import (
    Contract,
    Lease,
    Receipt,
    StrictCurrent,
    SubprocessDispatcher,
    Supervisor,
    WorkDefinition,
)
from outlive.supervisor import AttemptContext
from outlive_langgraph import LangGraphBackend, current_worker, outlive_task, run, run_attempt

HERE = Path(__file__).resolve().parent
V1 = {"s1": "A steady quarter for the group.", "s2": "Revenue was 4.1 million.",
      "s3": "Costs fell by 3 percent.", "s4": "The outlook is cautious."}
V2 = {**V1, "s2": "Revenue was 4.7 million."}
WORK = "digest/q3-report"
CONTRACT = Contract(name="digest-form", version="1", assessor="editor")


# -- the world every attempt process shares: a folder ------------------------------------------
def world() -> Path:
    """The run's folder: the feed's database, a log of model calls, the scene's two triggers
    (``pause-on``: a section text to freeze on, once; ``die-after-post``: once)."""
    return Path(os.environ["PORTING_RUN_DIR"])


def feed_post(text: str, key: str | None) -> tuple[str, bool]:
    """The external announcement feed (a third party, one SQLite file). It dedupes only keys it
    is given, and remembers them atomically with the post. Returns (post id, already seen)."""
    conn = sqlite3.connect(world() / "feed.db", isolation_level=None, timeout=30)
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS posts (id INTEGER PRIMARY KEY, key TEXT UNIQUE,"
                     " text TEXT)")
        conn.execute("BEGIN IMMEDIATE")
        row = conn.execute("SELECT id FROM posts WHERE key = ?", (key,)).fetchone()
        seen = row is not None
        if row is None:
            row = (conn.execute("INSERT INTO posts (key, text) VALUES (?, ?)", (key, text)).lastrowid,)
        conn.execute("COMMIT")
    finally:
        conn.close()
    return f"P{row[0]}", seen


def _take(trigger: str) -> str | None:
    """Consume a one-shot trigger file; its content, or None if it was not there."""
    path = world() / trigger
    try:
        text = path.read_text()
        path.unlink()
    except FileNotFoundError:
        return None
    return text


def revenue(text: str) -> str:
    m = re.search(r"(\d+\.\d) million", text)
    return m.group(1) if m else "?"


def build(backend: LangGraphBackend, attempt_no: int) -> tuple[Any, Any]:
    @outlive_task(step=lambda section, **_: section, external=("section",))  # was: @task
    async def summarise(section: str, text: str) -> str:        # inputs declared = the key
        with open(world() / "calls.log", "a") as log:           # one line per model call
            log.write(f"#{attempt_no} {section}\n")
        if (world() / "pause-on").exists() and (world() / "pause-on").read_text() == text:
            _take("pause-on")
            # (let a lease renewal in flight on the connection's thread finish first: a process
            # paused inside a write would keep the file's write lock)
            await backend.load(WORK)
            os.kill(os.getpid(), signal.SIGSTOP)                # the process goes quiet here
        return text.strip()

    def send(key: str | None, payload: dict[str, str]) -> Receipt:
        post_id, seen = feed_post(payload["text"], key)         # the key goes to the receiver
        if _take("die-after-post") is not None:
            os.kill(os.getpid(), signal.SIGKILL)                # applied, and the poster dies
        return Receipt(effect_id=post_id, duplicate=seen, key=key)

    @entrypoint(checkpointer=backend.checkpointer)              # the same database as the ledger
    async def digest_workflow(report: dict[str, str]) -> str:
        summaries = [await summarise(section=k, text=report[k]) for k in sorted(report)]
        worker = current_worker()    # the digest, journaled as the assembly of the summaries
        cand = await worker.candidate(await worker.assemble({"digest": " ".join(summaries)}))
        return cand.digest                                      # finished, not yet accepted

    @entrypoint(checkpointer=backend.checkpointer)
    async def announce_workflow(accepted: dict[str, str]) -> str:
        receipt = await current_worker().effect(
            announce_key(accepted["digest"]),                   # keyed by operation
            {"text": f"Q3 digest: {accepted['text']}"}, send)
        return receipt.effect_id

    return digest_workflow, announce_workflow


# -- what every attempt process runs (imported by name: after:attempt) -------------------------
def inputs(version: str) -> dict[str, str]:
    """The content of a published version (the ledger keeps only its hashes)."""
    return {"v1": V1, "v2": V2}[version]


def announce_key(digest: str) -> str:
    return f"announce:{WORK}:{digest}"                          # keyed by operation


async def attempt(ctx: AttemptContext) -> None:
    """One attempt: settle a predecessor's unconfirmed post (the same key, resent), then, unless
    its version is accepted already, invoke the graph, wait for judgement and post."""
    backend = ctx.worker.backend
    assert isinstance(backend, LangGraphBackend)
    digest_wf, announce_wf = build(backend, ctx.attempt.number)

    async def announce(acc: outlive.Acceptance) -> None:
        st = await backend.load(WORK)
        cand = st.candidate(acc.digest) if st is not None else None
        assert cand is not None
        await run(announce_wf, {"digest": acc.digest, "text": cand.content["digest"]},
                  worker=ctx.worker)

    st = await backend.load(WORK)
    assert st is not None
    for intent in ctx.worker.open_effects():
        await announce(next(a for a in st.acceptances if announce_key(a.digest) == intent.op_key))
    if any(a.version == ctx.version for a in st.acceptances):
        return
    digest = await run_attempt(digest_wf, ctx.inputs, worker=ctx.worker)   # was: ainvoke
    st = await backend.load(WORK)
    cand = st.candidate(digest) if st is not None else None
    assert cand is not None
    await announce(await ctx.judged(cand))                      # the supervisor judges it


# -- the supervisor's side ---------------------------------------------------------------------
def editor(cand: outlive.Candidate, version: outlive.InputVersion | None) -> tuple[bool, str]:
    """The assessor, after the mechanical checks (owner, version, part hashes)."""
    return bool(cand.content.get("digest")), "complete"


def announced(st: outlive.WorkState) -> bool:
    """Done: the current version's digest is accepted and its post confirmed."""
    acc = st.latest_acceptance
    if acc is None or acc.version != st.current_version:
        return False
    eff = st.effect(announce_key(acc.digest))
    return eff is not None and eff.state is outlive.EffectState.CONFIRMED


async def seed_situation(where: str) -> dict[str, Any]:
    folder = Path(where)
    os.environ["PORTING_RUN_DIR"] = str(folder)
    (folder / "pause-on").write_text(V1["s3"])            # attempt #1 will pause in section 3
    (folder / "die-after-post").write_text("")            # the first poster dies after posting
    backend = await outlive.open_backend(f"langgraph+sqlite:///{folder / 'after.db'}")
    definition = WorkDefinition(
        work_id=WORK, attempt="after:attempt", inputs="after:inputs", contract=CONTRACT,
        assessor=editor, complete=announced,
        # Silence is 6 missed renewals, and a process may take minutes to start (an interpreter
        # importing LangGraph on a busy machine): a live process starved for CPU is not taken
        # for a paused one.
        lease=Lease(heartbeat_interval=1_000, missed_beats=6, start_grace=600_000))
    dispatcher = SubprocessDispatcher(
        env={"PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}, log_dir=folder / "logs",
        stop_signal=None,      # a replaced process is left alone: woken, it meets the fence
        warm=True)             # a spare process waits, langgraph imported: takeover is quick
    try:
        async with Supervisor(backend, definition, dispatcher) as sup:
            await sup.publish("v1", V1)
            story = asyncio.create_task(sup.run())
            while "#1 s3" not in _calls(folder):           # #1 is paused inside s3
                await asyncio.sleep(0.05)
                if story.done():
                    story.result()
            # The corrected report arrives while #1 is silent. The supervisor sees #1's lease
            # run out: #1 is unknown (not failed), #2 is admitted with token 2, pinned to v2.
            # #2's process dies after the feed applied its post: #3 settles the open intent.
            await sup.publish("v2", V2)
            done = await story
            # Attempt #1 wakes up: its next write is refused, and it stops.
            first = outlive.Assignment.of(backend, definition,
                                          (await sup.controller.state(WORK)).attempts[0])
            pid = dispatcher.pid(first)
            assert pid is not None
            os.kill(pid, signal.SIGCONT)
            await asyncio.wait_for(dispatcher.procs[(WORK, 1)].wait(), 60)
            st = await sup.controller.state(WORK)
            dep = await sup.controller.dependable(WORK, StrictCurrent())
    finally:
        await backend.close()
    assert dep is not None
    late = (folder / "logs" / "digest_q3-report-1.log").read_text()
    conn = sqlite3.connect(folder / "feed.db")
    posts = [t for (t,) in conn.execute("SELECT text FROM posts ORDER BY id")]
    conn.close()
    return {"calls": len(_calls(folder)), "posts": posts,
            "accepted_for": done.acceptance.version,
            "late_worker": "refused (StaleOwner)" if "refused (StaleOwner" in late else "not refused",
            "attempts": [(a.number, a.pinned_version, a.state.value) for a in st.attempts],
            "newsletter_quotes": revenue(dep.content["digest"])}


def _calls(folder: Path) -> list[str]:
    path = folder / "calls.log"
    return path.read_text().splitlines() if path.exists() else []


async def main() -> None:
    with tempfile.TemporaryDirectory() as d:
        out = await seed_situation(d)
    print(f"model calls: {out['calls']}")
    for p in out["posts"]:
        print(f"posted: {p}")
    print(f"accepted for: {out['accepted_for']}; late worker: {out['late_worker']}")
    print(f"attempts: {out['attempts']}")
    print(f"newsletter quotes: {out['newsletter_quotes']} million")


if __name__ == "__main__":
    asyncio.run(main())
