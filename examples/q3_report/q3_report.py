"""The article's story told with outlive's API directly (no harness): run ``python q3_report.py``.

Attempt #1 summarises two sections and goes quiet; the report is corrected; #2 is admitted with a
larger token, restores what still matches and redoes what does not; #1 wakes and is refused; the
controller accepts #2's digest for v2; the announcement is keyed by operation, so a resend after a
lost acknowledgement posts nothing new; the newsletter asks which digest it may depend on.
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import sys
import tempfile
from typing import Any

import outlive
from outlive import Contract, Controller, SqliteReceiver, StrictCurrent, Worker

WORK = "digest/q3-report"
V1 = {
    "s1": "Q3 overview: demand held steady across all three regions.",
    "s2": "Revenue was 4.1 million for the quarter, up from 3.6 million in Q2.",
    "s3": "Operating costs fell 3 percent as the data-centre move completed.",
    "s4": "Outlook: the board expects growth to continue into Q4.",
}
V2 = {**V1, "s2": "Revenue was 4.7 million for the quarter, up from 3.6 million in Q2."}
CONTRACT = Contract(name="digest-form", version="1", assessor="example:completeness")
calls: list[str] = []


def summarise(**section: str) -> str:
    """Stand-in for a model call: one per section, reading only its own section."""
    (text,) = section.values()
    calls.append(text[:12])
    return text.split(",")[0]


def assessor(candidate: outlive.Candidate, version: outlive.InputVersion | None) -> tuple[bool, str]:
    sections = candidate.content["sections"]
    return (sorted(sections) == sorted(V1) and all(sections.values()), "complete, well-formed")


class Feed:
    """A receiver that remembers operation keys atomically with the post (SQLite)."""

    def __init__(self, path: str) -> None:
        self.rx = SqliteReceiver(path)
        self.rx._conn.execute("CREATE TABLE IF NOT EXISTS posts (id INTEGER PRIMARY KEY, body TEXT)")

    def post(self, key: str | None, payload: Any) -> outlive.Receipt:
        def apply(conn: sqlite3.Connection, body: Any) -> str:
            cur = conn.execute("INSERT INTO posts (body) VALUES (?)", (str(body),))
            return f"P{cur.lastrowid}"

        return self.rx.receive(key, payload, apply)


async def main(folder: str) -> dict[str, Any]:
    clock = [0]
    backend = await outlive.open_backend(f"sqlite:///{folder}/outlive.db")
    ctl = Controller(backend, clock=lambda: clock[0], heartbeat_interval=1, missed_beats=2)
    feed = Feed(f"{folder}/feed.db")
    await ctl.open_work(WORK)
    await ctl.publish(WORK, "v1", V1)

    first = Worker(backend, await ctl.admit(WORK), V1, clock=lambda: clock[0])
    await first.start()
    for part in ("s1", "s2"):
        clock[0] += 1
        await first.step(part, summarise, **{part: V1[part]})
    print(f"t{clock[0]}: #1 journaled s1 and s2, then went quiet")

    clock[0] = 4
    await ctl.publish(WORK, "v2", V2)
    clock[0] = 5
    silent = await ctl.observe(WORK)
    second_attempt = await ctl.admit(WORK)
    print(f"t5: {[f'#{a.number}' for a in silent]} unknown; #{second_attempt.number} admitted "
          f"with token {second_attempt.token}, pinned to {second_attempt.pinned_version}")
    second = Worker(backend, second_attempt, V2, clock=lambda: clock[0])
    await second.start()
    for part in V2:
        clock[0] += 0 if second.can_restore(part, **{part: V2[part]}) else 1
        await second.step(part, summarise, **{part: V2[part]})
    print("     #2 restored", [s for s, r in second.steps.items() if r.restored],
          "and redid", [s for s, r in second.steps.items() if not r.restored])

    try:
        await first.step("s3", summarise, s3=V1["s3"])
    except outlive.StaleOwner as exc:
        print(f"     #1 woke and was refused: {exc.message}")

    cand = await second.candidate({"sections": {p: second.result(p) for p in V2}})
    acc = await ctl.assess(WORK, cand.digest, CONTRACT, assessor)
    print(f"     accepted {cand.digest[:8]} for {acc.version} under {acc.contract.name}")

    op = f"announce:{WORK}:{cand.digest[:8]}"
    payload = {"digest": cand.digest[:8]}
    def lossy(key: str | None, body: Any) -> outlive.Receipt:
        feed.post(key, body)                       # the feed applies the post...
        raise ConnectionResetError("ack lost")     # ...and its answer never arrives

    try:
        await second.effect(op, payload, lossy)   # intent recorded before sending
    except outlive.EffectAmbiguous as exc:
        print(f"     {exc.message[:60]}...")
    receipt = await second.effect(op, payload, feed.post)   # resend with the same key
    print(f"     announcement {op}: the feed answers {receipt.effect_id} "
          f"({'already seen' if receipt.duplicate else 'new'}): nothing new is posted")
    await second.finish()

    dep = await ctl.dependable(WORK, StrictCurrent())
    assert dep is not None
    m = re.search(r"(\d+\.\d) million", dep.content["sections"]["s2"])
    figure = m.group(1) if m else None
    print(f"     the newsletter may depend on {dep.digest[:8]} and quotes {figure} million")
    posts = feed.rx._conn.execute("SELECT COUNT(*) FROM posts").fetchone()[0]
    await backend.close()
    feed.rx.close()
    return {"calls": len(calls), "posts": posts, "figure": figure}


if __name__ == "__main__":
    out = asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp()))
    print(out)
