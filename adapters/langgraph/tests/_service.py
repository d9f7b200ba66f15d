"""The user's own service: an ``outlive.Runtime`` hosting a graph kind, no supervisor process.

Run as a script (``python _service.py URL RUN_DIR``): start the work (idempotent: a restarted
service starts the same work again, which is a no-op) and wait for its result. With
``crash-1`` in the run folder, attempt #1 is SIGKILLed inside node ``s2`` (the whole service
dies); the service started again recovers the work, takes the silent attempt over after its
lease, and its successor carries on the user's thread.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run as a script: its helpers

import supervised_graph as sg

import outlive

KIND = outlive.Kind(name="digest", attempt=sg.attempt, contract=sg.CONTRACT, inputs=sg.inputs,
                    lease=outlive.Lease(heartbeat_interval=200, missed_beats=2,
                                        start_grace=5_000))


async def serve(url: str) -> None:
    async with outlive.Runtime(url, kinds=[KIND]) as rt:
        handle = await rt.start(KIND, "digest/q3", "v1", sg.V1)
        done = await handle.result(timeout=60)
        print(json.dumps({"accepted": done.acceptance.version,
                          "attempts": [a.state.value for a in done.attempts]}), flush=True)


if __name__ == "__main__":
    os.environ["OUTLIVE_RUN_DIR"] = sys.argv[2]
    asyncio.run(serve(sys.argv[1]))
