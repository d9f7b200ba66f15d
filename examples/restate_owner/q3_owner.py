"""The article's story on a real Restate server: the user's own object runs each attempt, and
Restate's own timers and cancel replace the silent one.

Run ``python examples/restate_owner/q3_owner.py`` (after ``make install engine-restate``): it
starts a throwaway Restate server and a deployment of ``q3_app`` (the user's app), registered once.

This process only starts the work and later judges it: Restate drives the attempts. Attempt #1 is
the invocation ``q3_desk/digest%2Fq3-report/digest``: it summarises s1 and s2, then its s3 call
hangs, silent (the work is started with ``renew=False``: a handler that renews its lease while
a step runs would be a live long call, not a silent one). Meanwhile the corrected report v2 is
published. #1 writes nothing for a whole lease, so
Restate's lease check cancels its invocation (which frees the object's lock), marks it unknown,
admits #2 pinned to v2 and sends #2's invocation: #2 restores s1 by input key and redoes s2, s3,
s4. The controller accepts #2's digest for v2; attempt #3, admitted to announce it, sends it to a
Restate handler with the operation key as Restate's idempotency key, so the resend after a lost
acknowledgement posts nothing new.
"""

from __future__ import annotations

import asyncio
import re
import sys
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

import outlive
from outlive import Contract, Controller, EffectAmbiguous, StrictCurrent, Worker
from outlive.records import AttemptState
from outlive_restate import RestateBackend, restate_sender
from outlive_restate.server import RestateServer

HERE = Path(__file__).parent
WORK = "digest/q3-report"
V1 = {
    "s1": "Q3 overview: demand held steady across all three regions.",
    "s2": "Revenue was 4.1 million for the quarter, up from 3.6 million in Q2.",
    "s3": "Operating costs fell 3 percent as the data-centre move completed.",
    "s4": "Outlook: the board expects growth to continue into Q4.",
}
V2 = {**V1, "s2": "Revenue was 4.7 million for the quarter, up from 3.6 million in Q2."}
CONTRACT = Contract(name="digest-form", version="1", assessor="example:completeness")


def assessor(candidate: outlive.Candidate, version: outlive.InputVersion | None) -> tuple[bool, str]:
    sections = candidate.content["sections"]
    return (sorted(sections) == sorted(V1) and all(sections.values()), "complete, well-formed")


async def until(probe: Any, timeout: float = 90.0) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not (got := await probe()):
        if loop.time() > deadline:
            raise TimeoutError("the story did not move on")
        await asyncio.sleep(0.1)
    return got


async def main(server: RestateServer, log: Path) -> dict[str, Any]:
    async with await outlive.open_backend(server.url + "&ledger=q3_desk") as backend:
        assert isinstance(backend, RestateBackend)
        return await _story(backend, log)


async def _story(backend: RestateBackend, log: Path) -> dict[str, Any]:
    ctl = Controller(backend)
    await ctl.open_work(WORK)
    await ctl.publish(WORK, "v1", V1)
    hold = Path(f"{log}.hold")
    hold.touch()
    calls = lambda: log.read_text().split() if log.exists() else []  # noqa: E731
    await backend.start_work(WORK, service="q3_desk", handler="digest", key=WORK,
                             arg={"versions": {"v1": V1, "v2": V2}, "log": str(log)},
                             lease=timedelta(seconds=3), renew=False)
    print("started: Restate drives the attempts from here")

    async def s3_called() -> bool:
        return "#1:s3" in calls()

    await until(s3_called)
    st = await ctl.state(WORK)
    print(f"#1 journaled {[e.step for e in st.journal]}, then its s3 call hung")
    await ctl.publish(WORK, "v2", V2)
    print("the corrected report v2 is published")

    async def second_done() -> Any:
        st = await ctl.state(WORK)
        return st if any(a.number == 2 and a.state is AttemptState.FINISHED
                         for a in st.attempts) else None

    st = await until(second_done)
    hold.unlink()
    print("attempts:", [(f"#{a.number}", a.state.value, a.pinned_version) for a in st.attempts])
    print("journal:", [(e.step, f"#{e.attempt}") for e in st.journal])
    late = [e for e in st.journal if e.attempt == 1 and e.step == "s3"]

    cand = next(c for c in st.candidates if c.attempt == 2)
    acc = await ctl.assess(WORK, cand.digest, CONTRACT, assessor)
    print(f"accepted {cand.digest[:8]} for {acc.version} under {acc.contract.name}")

    # the announcement: an effect keyed by operation, sent to a Restate handler (the newsletter)
    # by an attempt admitted for it (#2 has finished: a finished attempt writes nothing more)
    feed = restate_sender(backend.ingress, "newsletter", "post", key="q3")
    announcer = Worker(backend, await ctl.admit(WORK), V2)
    await announcer.start()
    op = f"announce:{WORK}:{cand.digest[:8]}"
    payload = {"digest": cand.digest[:8]}

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
        r = await http.post(f"{backend.ingress}/newsletter/q3/posts")
        r.raise_for_status()
        posts = r.json()
    print(f"the newsletter may depend on {dep.digest[:8]} and quotes {figure} million; "
          f"{len(posts)} post(s); model calls: {calls()}")
    return {"calls": len(calls()), "posts": len(posts), "figure": figure,
            "late_landed": len(late)}


if __name__ == "__main__":
    with RestateServer(app="q3_app:app", pythonpath=(str(HERE),), ledger="q3_desk") as server, \
            tempfile.TemporaryDirectory() as tmp:
        print(asyncio.run(main(server, Path(tmp) / "calls")))
    sys.exit(0)
