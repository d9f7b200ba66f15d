"""The article's story, run by the library's supervisor with every attempt a real OS process.

Run ``python examples/q3_report/q3_report.py``. Attempt #1 summarises two sections and its
process is paused (SIGSTOP) in the middle of the third; the report is corrected meanwhile. The
supervisor sees #1's lease run out, marks it ``unknown`` (not failed) and admits #2 with a larger
token, pinned to the corrected report: #2 restores the section that still matches and redoes the
rest. #1 is woken and refused at its next write. #2's digest is accepted for v2; its
announcement reaches the feed but the acknowledgement is lost and #2's process dies, so #3 resends
with the same operation key and the feed answers "already seen". The newsletter asks which digest
it may depend on. Nothing here calls ``MarkUnknown`` or ``Admit``: the supervisor does.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

import outlive
from outlive import Contract, Lease, StrictCurrent, SubprocessDispatcher, Supervisor, WorkDefinition
from outlive.supervisor import AttemptContext

HERE = Path(__file__).resolve().parent
WORK = "digest/q3-report"
V1 = {
    "s1": "Q3 overview: demand held steady across all three regions.",
    "s2": "Revenue was 4.1 million for the quarter, up from 3.6 million in Q2.",
    "s3": "Operating costs fell 3 percent as the data-centre move completed.",
    "s4": "Outlook: the board expects growth to continue into Q4.",
}
V2 = {**V1, "s2": "Revenue was 4.7 million for the quarter, up from 3.6 million in Q2."}
CONTRACT = Contract(name="digest-form", version="1", assessor="q3_report:assess")


# -- what every attempt process runs (imported by name: q3_report:attempt) ----------------------
def folder() -> Path:
    return Path(os.environ["Q3_FOLDER"])


def inputs(version: str) -> dict[str, str]:
    return {"v1": V1, "v2": V2}[version]


def assess(candidate: outlive.Candidate, version: outlive.InputVersion | None) -> tuple[bool, str]:
    sections = candidate.content
    return sorted(sections) == sorted(V1) and all(sections.values()), "complete, well-formed"


def post(key: str | None, body: Any) -> outlive.Receipt:
    """The feed: remembers operation keys atomically with the post."""
    conn = sqlite3.connect(folder() / "feed.db", isolation_level=None, timeout=30)
    try:
        conn.execute("CREATE TABLE IF NOT EXISTS posts (key TEXT PRIMARY KEY, body TEXT)")
        conn.execute("BEGIN IMMEDIATE")
        seen = conn.execute("SELECT 1 FROM posts WHERE key = ?", (key,)).fetchone() is not None
        if not seen:
            conn.execute("INSERT INTO posts VALUES (?, ?)", (key, json.dumps(body)))
        conn.execute("COMMIT")
    finally:
        conn.close()
    return outlive.Receipt(effect_id=f"post:{key}", duplicate=seen, key=key)


def op_key(digest: str) -> str:
    return f"announce:{WORK}:{digest[:8]}"


async def attempt(ctx: AttemptContext) -> None:
    w, n = ctx.worker, ctx.attempt.number
    state = await w.backend.load(WORK)
    assert state is not None
    for intent in w.open_effects():            # a predecessor's announcement, left ambiguous
        acc = next(a for a in state.acceptances if op_key(a.digest) == intent.op_key)
        await w.effect(intent.op_key, {"digest": acc.digest[:8]}, post)   # same key, same payload
        return
    for part in V1:
        def summarise(part: str = part, **section: str) -> str:
            with open(folder() / "calls.log", "a") as fh:       # one line per model call
                fh.write(f"#{n} {part}\n")
            if n == 1 and part == "s3":
                # (let a lease renewal in flight on the SQLite thread finish, so the pause does
                # not land inside a write and keep the file's write lock)
                getattr(w.backend, "quiesce", lambda: None)()
                os.kill(os.getpid(), signal.SIGSTOP)             # the process goes quiet here
            return next(iter(section.values())).split(",")[0]

        await w.step(part, summarise, **{part: ctx.inputs[part]})
    acc = await ctx.submit({p: w.result(p) for p in V1})

    def lossy(key: str | None, body: Any) -> outlive.Receipt:
        post(key, body)                                       # the feed applies the post...
        os.kill(os.getpid(), signal.SIGKILL)                  # ...and the poster dies
        raise AssertionError("unreachable")

    await w.effect(op_key(acc.digest), {"digest": acc.digest[:8]}, lossy if n == 2 else post)


def announced(st: outlive.WorkState) -> bool:
    """Done: v2's digest accepted and its announcement confirmed."""
    acc = st.latest_acceptance
    if acc is None or acc.version != st.current_version:
        return False
    eff = st.effect(op_key(acc.digest))
    return eff is not None and eff.state is outlive.EffectState.CONFIRMED


# -- the story ----------------------------------------------------------------------------------
async def main(where: str) -> dict[str, Any]:
    run = Path(where)
    os.environ["Q3_FOLDER"] = str(run)
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    backend = await outlive.open_backend(f"sqlite:///{run / 'outlive.db'}")
    work = WorkDefinition(work_id=WORK, attempt="q3_report:attempt", inputs="q3_report:inputs",
                          contract=CONTRACT, assessor="q3_report:assess", complete=announced,
                          lease=Lease(heartbeat_interval=1_000, missed_beats=3))
    dispatcher = SubprocessDispatcher(env={"PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])},
                                      log_dir=run / "logs", stop_signal=None)
    seen: set[str] = set()

    def tell(status: outlive.supervisor.Status) -> None:
        for action in status.actions:
            if action not in seen:
                seen.add(action)
                print(f"  supervisor: {action}")

    async with Supervisor(backend, work, dispatcher) as supervisor:
        await supervisor.publish("v1", V1)
        story = asyncio.create_task(supervisor.run(on_status=tell))
        while "#1 s3" not in _calls(run):                     # #1 is paused inside s3
            await asyncio.sleep(0.05)
        print("  #1 summarised s1 and s2, and went quiet in s3; the report is corrected (v2)")
        await supervisor.publish("v2", V2)
        while (await supervisor.controller.state(WORK)).epoch < 2:
            await asyncio.sleep(0.05)
        first = outlive.Assignment.of(backend, work, (await supervisor.controller.state(WORK)).attempts[0])
        pid = dispatcher.pid(first)
        assert pid is not None
        os.kill(pid, signal.SIGCONT)                          # #1 wakes up, a replaced owner
        done = await story
        await asyncio.wait_for(dispatcher.procs[(WORK, 1)].wait(), 30)
    refusal = next((ln for ln in (run / "logs" / "digest_q3-report-1.log").read_text().splitlines()
                    if "refused" in ln), "")
    print(f"  #1 woke: {refusal.split('WARNING ')[-1]}")
    st = await supervisor.controller.state(WORK)
    for a in st.attempts:
        print(f"  attempt #{a.number}: token {a.token}, pinned {a.pinned_version}, {a.state.value}")
    dep = await supervisor.controller.dependable(WORK, StrictCurrent())
    assert dep is not None
    m = re.search(r"(\d+\.\d) million", dep.content["s2"])
    figure = m.group(1) if m else None
    print(f"  accepted {done.acceptance.digest[:8]} for {done.acceptance.version}; "
          f"the newsletter may depend on it and quotes {figure} million")
    conn = sqlite3.connect(run / "feed.db")
    posts = conn.execute("SELECT COUNT(*) FROM posts").fetchone()[0]
    conn.close()
    await backend.close()
    return {"calls": len(_calls(run)), "posts": posts, "figure": figure,
            "attempts": [(a.number, a.token, a.pinned_version, a.state.value) for a in st.attempts]}


def _calls(run: Path) -> list[str]:
    path = run / "calls.log"
    return path.read_text().splitlines() if path.exists() else []


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        print(asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else tmp)))
