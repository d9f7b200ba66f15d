"""The user's Restate app for the q3-report story: their own object, with outlive inside it.

``q3_desk`` is the user's Virtual Object, keyed by the work id. :func:`outlive_restate.keep_ledger`
keeps each work's ledger in it, so an attempt (the exclusive handler ``digest``) holds the ledger's
lock while it runs: the owner shape. ``newsletter`` is the receiver of the announcement, a Restate
handler that Restate itself dedupes by idempotency key (``restate_feed``). The app is served by a deployment
process and registered once (``RestateServer(app="q3_app:app")`` does both, as a user would).

The model call appends ``#attempt:section`` to the file named in the argument, and attempt #1's
s3 call waits while ``<log>.hold`` exists: the paused worker of the article.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import restate
from restate_feed import feed_object

import outlive
import outlive_restate

desk = outlive_restate.keep_ledger(restate.VirtualObject("q3_desk"))
SECTIONS = ("s1", "s2", "s3", "s4")


def assessor(candidate: outlive.Candidate, version: outlive.InputVersion | None) -> tuple[bool, str]:
    """The contract's assessor, run by Restate's lease for the work (its verdict journaled)."""
    sections = candidate.content
    return (sorted(sections) == sorted(SECTIONS) and all(sections.values()),
            "complete, well-formed")

newsletter = feed_object("newsletter")


@desk.handler()
async def digest(ctx: restate.ObjectContext, arg: dict[str, Any]) -> str:
    """One attempt: every section (restored where the journal has its input), then a candidate."""
    log = str(arg["log"])

    async with outlive_restate.attempt(ctx, snapshot=lambda pin: arg["versions"][pin]) as w:
        n = w.attempt.number

        async def model(**section: str) -> str:   # stand-in for a model call
            (name, text), = section.items()
            with open(log, "a") as f:
                f.write(f"#{n}:{name}\n")
            while n == 1 and name == "s3" and os.path.exists(f"{log}.hold"):
                await asyncio.sleep(0.05)
            return text.split(",")[0]

        snap = w.snapshot or {}
        for part, text in snap.items():
            await w.step(part, model, **{part: text})
        cand = await w.candidate({p: w.result(p) for p in snap})
        return cand.digest


#: outlive's lease object is served beside the user's objects; its own ledger object is not
#: needed, since the ledgers live on ``q3_desk``.
app = restate.app([desk, newsletter, *outlive_restate.services(ledger=False)])
