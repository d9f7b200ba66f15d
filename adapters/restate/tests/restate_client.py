"""A client process that opens a work, hands it to Restate and prints ``started``; the test
SIGKILLs it right after (``python restate_client.py URL WORK LOG LEASE_MS [SERVICE HANDLER KEY]
[--judge]``). With ``--judge`` Restate also judges (the app's ``assess``) and announces to the
app's ``feed`` keyed by the work id: no controller is left to do either.

Its attempts do not renew the lease while a step runs: the test's held step stands for a handler
that went silent."""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta

import outlive
from outlive import Contract, Controller
from outlive_restate import RestateBackend

SECTIONS = {"s1": "Intro: a steady quarter.", "s2": "Revenue was 4.7 million."}


async def main(url: str, work: str, log: str, lease_ms: int, service: str = "reports",
               handler: str = "summarise", key: str | None = None, *,
               judge: bool = False) -> None:
    backend = await outlive.open_backend(url)
    assert isinstance(backend, RestateBackend)
    ctl = Controller(backend)
    await ctl.open_work(work)
    await ctl.publish(work, "v1", SECTIONS)
    first = await backend.start_work(work, service=service, handler=handler, key=key,
                                     arg={"sections": SECTIONS, "log": log},
                                     lease=timedelta(milliseconds=lease_ms), renew=False,
                                     **({"contract": Contract(name="form", version="1",
                                                              assessor="test"),
                                         "assessor": "restate_app:assess",
                                         "announce": {"service": "feed", "handler": "post",
                                                      "key": work}} if judge else {}))
    print(f"started #{first['attempt']}", flush=True)
    await asyncio.sleep(3600)   # a client that would stay; the test kills it


if __name__ == "__main__":
    a = [x for x in sys.argv[1:] if x != "--judge"]
    asyncio.run(main(a[0], a[1], a[2], int(a[3]), *a[4:], judge="--judge" in sys.argv))
