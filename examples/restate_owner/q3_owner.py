"""The article's story on a real Restate server: the user's own object runs each attempt, and
Restate's own timers and cancel replace the silent one.

Run ``python examples/restate_owner/q3_owner.py`` (after ``make install engine-restate``): it
starts a throwaway Restate server and a deployment of ``q3_app`` (the user's app), registered once.

This process only opens the work, publishes its versions and starts it: Restate drives the
attempts, judges them and announces the result. Attempt #1 is
the invocation ``q3_desk/digest%2Fq3-report/digest``: it summarises s1 and s2, then its s3 call
hangs, silent (the work is started with ``renew=False``: a handler that renews its lease while
a step runs would be a live long call, not a silent one). Meanwhile the corrected report v2 is
published. #1 writes nothing for a whole lease, so
Restate's lease check cancels its invocation (which frees the object's lock), marks it unknown,
admits #2 pinned to v2 and sends #2's invocation: #2 restores s1 by input key and redoes s2, s3,
s4, and tells the lease it finished. The lease judges #2's digest (the mechanical checks, then
``q3_app.assessor``, its verdict journaled) and accepts it for v2; attempt #3, admitted to
announce it, calls the newsletter (a Restate handler) with the operation key as Restate's
idempotency key, inside the same invocation: a crash anywhere replays to the same single post.
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
from outlive import Contract, Controller, StrictCurrent
from outlive_restate import RestateBackend
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
    ctl = Controller(backend)       # opens the work and publishes its versions: nothing more
    await ctl.open_work(WORK)
    await ctl.publish(WORK, "v1", V1)
    hold = Path(f"{log}.hold")
    hold.touch()
    calls = lambda: log.read_text().split() if log.exists() else []  # noqa: E731
    await backend.start_work(WORK, service="q3_desk", handler="digest", key=WORK,
                             arg={"versions": {"v1": V1, "v2": V2}, "log": str(log)},
                             lease=timedelta(seconds=3), renew=False,
                             contract=CONTRACT, assessor="q3_app:assessor",
                             announce={"service": "newsletter", "handler": "post", "key": "q3"})
    print("started: Restate drives the attempts, judges and announces from here")

    async def s3_called() -> bool:
        return "#1:s3" in calls()

    await until(s3_called)
    st = await ctl.state(WORK)
    print(f"#1 journaled {[e.step for e in st.journal]}, then its s3 call hung")
    await ctl.publish(WORK, "v2", V2)
    print("the corrected report v2 is published")

    async def done() -> Any:
        return (await backend.lease(WORK))["done"]

    got = await until(done)
    hold.unlink()
    st = await ctl.state(WORK)
    print("attempts:", [(f"#{a.number}", a.state.value, a.pinned_version) for a in st.attempts])
    print("journal:", [(e.step, f"#{e.attempt}") for e in st.journal])
    late = [e for e in st.journal if e.attempt == 1 and e.step == "s3"]
    acc = st.latest_acceptance
    assert acc is not None
    print(f"Restate accepted {acc.digest[:8]} of #{acc.attempt} for {acc.version} under "
          f"{acc.contract.name} ({acc.note}) and announced it as {got['announced']['op'][:40]}...")

    dep = await ctl.dependable(WORK, StrictCurrent())
    assert dep is not None
    m = re.search(r"(\d+\.\d) million", dep.content["s2"])
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
