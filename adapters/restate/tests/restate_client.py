"""A client process that opens a work, hands it to Restate and prints ``started``; the test
SIGKILLs it right after (``python restate_client.py URL WORK LOG LEASE_MS [SERVICE HANDLER KEY]``).

Its attempts do not renew the lease while a step runs: the test's held step stands for a handler
that went silent."""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta

import outlive
from outlive import Controller
from outlive_restate import RestateBackend

SECTIONS = {"s1": "Intro: a steady quarter.", "s2": "Revenue was 4.7 million."}


async def main(url: str, work: str, log: str, lease_ms: int, service: str = "reports",
               handler: str = "summarise", key: str | None = None) -> None:
    backend = await outlive.open_backend(url)
    assert isinstance(backend, RestateBackend)
    ctl = Controller(backend)
    await ctl.open_work(work)
    await ctl.publish(work, "v1", SECTIONS)
    first = await backend.start_work(work, service=service, handler=handler, key=key,
                                     arg={"sections": SECTIONS, "log": log},
                                     lease=timedelta(milliseconds=lease_ms), renew=False)
    print(f"started #{first['attempt']}", flush=True)
    await asyncio.sleep(3600)   # a client that would stay; the test kills it


if __name__ == "__main__":
    a = sys.argv[1:]
    asyncio.run(main(a[0], a[1], a[2], int(a[3]), *a[4:]))
