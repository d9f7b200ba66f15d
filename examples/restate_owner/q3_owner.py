"""The article's story on a real Restate server, with each attempt run as the work's *owner*.

Run ``python examples/restate_owner/q3_owner.py`` (after ``make install engine-restate``): it
starts a throwaway Restate server and serves the ledger object, with the owner handler below,
from this process, so that attempt #1's model call can be held from here (a paused worker).

Attempt #1 is one exclusive invocation of ``outlive_ledger/digest%2Fq3-report/q3_digest``. It
summarises s1 and s2, then its s3 call hangs. The controller revokes it (Restate kills the
invocation: what it journaled stays, the lock is freed), the corrected report is published, #2
is admitted with a larger token and run as the next owner invocation: it restores s1 by input key
and redoes s2, s3, s4. #1's call then returns, into an invocation Restate no longer has: nothing
of it lands. The controller accepts #2's digest for v2; the announcement goes to a Restate
handler with the operation key as Restate's idempotency key, so the resend after a lost
acknowledgement posts nothing new.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
from typing import Any
from urllib.parse import quote

import httpx

import outlive
from outlive import Contract, Controller, EffectAmbiguous, StrictCurrent, Worker
from outlive import ledger as L
from outlive_restate import RestateBackend
from outlive_restate.backend import serve_in_process
from outlive_restate.effects import restate_sender
from outlive_restate.owned import owner
from outlive_restate.server import RestateServer
from outlive_restate.services import FEED, ledger_app

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
#: Attempt #1's s3 call waits here: the paused worker.
hold = asyncio.Event()
held = asyncio.Event()


async def summarise(attempt: int, **section: str) -> str:
    """Stand-in for a model call: one per section, reading only its own section."""
    (name, text), = section.items()
    calls.append(f"#{attempt}:{name}")
    if attempt == 1 and name == "s3":
        held.set()
        await hold.wait()
    return text.split(",")[0]


@owner("q3_digest")
async def q3_digest(worker: Worker, arg: Any) -> str:
    """One attempt: every section (restored where the journal has its input), then a candidate."""
    snap = worker.snapshot or {}
    n = worker.attempt.number

    async def model(**section: str) -> str:
        return await summarise(n, **section)

    for part, text in snap.items():
        await worker.step(part, model, **{part: text})
    cand = await worker.candidate({"sections": {p: worker.result(p) for p in snap}})
    return cand.digest


def assessor(candidate: outlive.Candidate, version: outlive.InputVersion | None) -> tuple[bool, str]:
    sections = candidate.content["sections"]
    return (sorted(sections) == sorted(V1) and all(sections.values()), "complete, well-formed")


async def main(url: str) -> dict[str, Any]:
    backend = await outlive.open_backend(url)
    assert isinstance(backend, RestateBackend)
    http = httpx.AsyncClient(timeout=30)
    # this process serves the ledger object (and the example feed) with the owner handler
    stop, task, _dep = await serve_in_process(http, backend.admin, ledger_app())
    try:
        for _ in range(400):  # registered is not yet callable (ENGINE-NOTES pitfall 9)
            r = await http.post(f"{backend.ingress}/outlive_ledger/probe/q3_digest",
                                content=b"{}", headers={"content-type": "application/json"})
            if "needs attempt and token" in r.text:  # our handler answered
                break
            await asyncio.sleep(0.05)
        return await _story(backend)
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 5)
        await http.aclose()
        await backend.close()


async def _story(backend: RestateBackend) -> dict[str, Any]:
    ctl = Controller(backend, clock=lambda: 0)
    await ctl.open_work(WORK)
    await ctl.publish(WORK, "v1", V1)
    first = await ctl.admit(WORK)
    run1 = asyncio.ensure_future(backend.run_owner(WORK, "q3_digest", first, snapshot=V1, at=1))
    await asyncio.wait_for(held.wait(), 60)
    st = await ctl.state(WORK)
    print(f"#1 (token {first.token}) journaled {[e.step for e in st.journal]}, "
          f"then its s3 call hung")

    killed = await backend.revoke_owner(WORK, first.number)
    with contextlib.suppress(outlive.OutliveError):
        await run1
    await ctl.publish(WORK, "v2", V2)
    await backend.execute(WORK, L.MarkUnknown(attempt=first.number, at=5))
    second = await ctl.admit(WORK)
    print(f"revoked #1 ({killed} invocation killed), published v2, admitted #{second.number} "
          f"with token {second.token}, pinned to {second.pinned_version}")
    digest = await backend.run_owner(WORK, "q3_digest", second, snapshot=V2, at=6)
    st = await ctl.state(WORK)
    print("#2 journaled", [(e.step, f"#{e.attempt}") for e in st.journal])

    hold.set()                         # #1's model call returns ...
    await asyncio.sleep(0.5)
    st = await ctl.state(WORK)
    late = [e for e in st.journal if e.attempt == first.number and e.step == "s3"]
    print(f"#1 woke: its s3 result landed {len(late)} times (Restate killed its invocation)")

    acc = await ctl.assess(WORK, digest, CONTRACT, assessor)
    print(f"accepted {digest[:8]} for {acc.version} under {acc.contract.name}")

    # the announcement: an effect keyed by operation, sent to a Restate handler (the feed)
    feed = restate_sender(backend.ingress, FEED, "post", key="newsletter")
    announcer = Worker(backend, second, V2, clock=lambda: 9)
    await announcer.start()
    op = f"announce:{WORK}:{digest[:8]}"
    payload = {"digest": digest[:8]}

    async def lossy(key: str | None, body: Any) -> outlive.Receipt:
        await feed(key, body)                       # the feed applies the post ...
        raise ConnectionResetError("ack lost")      # ... and its answer never arrives

    try:
        await announcer.effect(op, payload, lossy)  # the intent is recorded before sending
    except EffectAmbiguous:
        print("the feed's answer was lost: the intent stays open")
    receipt = await announcer.effect(op, payload, feed)   # resend with the same key
    print(f"resent {op}: the feed answers {receipt.effect_id} "
          f"({'already seen' if receipt.duplicate else 'new'})")
    await announcer.finish()

    dep = await ctl.dependable(WORK, StrictCurrent())
    assert dep is not None
    m = re.search(r"(\d+\.\d) million", dep.content["sections"]["s2"])
    figure = m.group(1) if m else None
    async with httpx.AsyncClient(timeout=30) as http:
        r = await http.post(f"{backend.ingress}/{FEED}/{quote('newsletter')}/posts")
        r.raise_for_status()
        posts = r.json()
    print(f"the newsletter may depend on {dep.digest[:8]} and quotes {figure} million; "
          f"{len(posts)} post(s); {len(calls)} model calls: {calls}")
    return {"calls": len(calls), "posts": len(posts), "figure": figure,
            "late_landed": len(late)}


if __name__ == "__main__":
    with RestateServer() as server:
        print(asyncio.run(main(server.url)))
    sys.exit(0)
