"""Your first supervised work: a report's digest, judged for its version, announced once.

    python examples/first_program/first_program.py

Run it, kill it while it runs (Ctrl-C or kill -9), run it again: it carries on from the ledger
(outlive.db) and the feed (feed.db) still shows one post.
"""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

import outlive
from outlive import Contract, Kind, Runtime, StrictCurrent

# -- API in one screen: begin ---------------------------------------------------------------
feed = outlive.SqliteReceiver("feed.db")     # the receiver remembers each operation key


def post(key: str | None, payload: dict[str, Any]) -> outlive.Receipt:
    """A sender: hands the payload to the receiver under the operation key; returns its Receipt."""
    def apply(conn: sqlite3.Connection, body: dict[str, Any]) -> str:
        conn.execute("CREATE TABLE IF NOT EXISTS posts (digest TEXT)")
        conn.execute("INSERT INTO posts VALUES (?)", (body["digest"],))
        return f"post-{body['digest'][:8]}"
    return feed.receive(key, payload, apply)


def summarise(**section: str) -> str:        # a step gets its input as a keyword: the part's name
    (text,) = section.values()
    return text.split(".")[0]                # your model call goes here


async def digest(ctx: outlive.AttemptContext) -> None:      # one try at one work
    w = ctx.worker                                          # carries the attempt's owner token
    for part, text in ctx.inputs.items():                   # the version this attempt is pinned to
        await w.step(part, summarise, **{part: text})       # restored if its input key matches
    acc = await ctx.submit({p: w.result(p) for p in ctx.inputs})   # the runtime judges it
    await w.effect(f"announce:{w.work_id}:{acc.digest[:8]}",       # the key names the operation
                   {"digest": acc.digest}, send=post)


DIGEST = Kind(name="digest", attempt=digest,
              contract=Contract(name="digest-form", version="1", assessor="length-check"),
              assessor=lambda cand, version: (len(cand.content) == 2, "both sections"))


async def main() -> None:
    report = {"intro": "Q3 in brief. More below.", "revenue": "Revenue was 4.7 million. Up."}
    async with Runtime("sqlite:///outlive.db", [DIGEST]) as rt:   # or postgresql://, temporal://…
        handle = await rt.start(DIGEST, "digest/q3-report", "v1", report)   # idempotent per id
        done = await handle.result()                 # raises WorkFailed / GaveUp with the cause
        print("accepted", done.acceptance.digest[:12], "for", done.acceptance.version)
        print("dependable now:", await handle.dependable(StrictCurrent()) is not None)
# -- API in one screen: end -----------------------------------------------------------------


if __name__ == "__main__":
    asyncio.run(main())
