"""CPU per model call of the OpenAI Agents SDK on Temporal: ``OpenAIAgentsPlugin`` alone vs with
``OutliveAgentsPlugin`` (``Work``, ``run_agent``), the same agents as ``make bench-agents``.

    python adapters/agents/bench/temporal_cpu.py [BLOCKS] [RUNS_PER_BLOCK]

Wall time per model call on a shared two-core machine swings by +-20 % between runs taken back
to back; CPU time swings much less. This measures, per model call, the CPU of this process (the
worker: workflow code and activities) and of the dev server (``/proc/<pid>/stat``), in blocks of
runs, the two sides alternating block by block. Printed: each block's worker + server
microseconds, and per pair of blocks the ratio outlive / baseline of the total and of the worker.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from agents import set_tracing_disabled
from temporalio.client import Client
from temporalio.contrib.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.contrib.openai_agents.testing import TestModelProvider
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from outlive_agents.openai_agents import OutliveAgentsPlugin
from outlive_temporal import DevServer, OutlivePlugin

sys.path.insert(0, str(Path(__file__).parent))
import bench_agents as B

TURNS = 8


def _cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid``."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def main(blocks: int, per: int) -> None:
    set_tracing_disabled(True)
    parts = B._temporal_parts(TURNS)
    calls = TURNS + 1
    with tempfile.TemporaryDirectory() as d, DevServer(Path(d) / "temporal") as server:
        assert server.proc is not None
        plugin = OpenAIAgentsPlugin(model_params=ModelActivityParameters(
            start_to_close_timeout=timedelta(seconds=30)),
            model_provider=TestModelProvider(parts["model"]))
        client = await Client.connect(server.address, plugins=[
            plugin, OutlivePlugin(), OutliveAgentsPlugin()])
        async with Worker(client, task_queue="cpu", workflows=[parts["baseline"], parts["ours"]],
                          activities=[parts["activity"]],
                          workflow_runner=UnsandboxedWorkflowRunner()):
            seq = 0

            async def once(ours: bool) -> None:
                nonlocal seq
                seq += 1
                await client.execute_workflow(parts["ours" if ours else "baseline"].run,
                                              "Write the Q3 digest.", id=f"w{seq}",
                                              task_queue="cpu")

            for ours in (False, True, False, True):      # warm-up
                await once(ours)
            got: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
            for b in range(blocks):
                for ours in ((False, True) if b % 2 == 0 else (True, False)):
                    c0, s0 = time.process_time(), _cpu(server.proc.pid)
                    for _ in range(per):
                        await once(ours)
                    got[ours].append(((time.process_time() - c0) / per / calls * 1e6,
                                      (_cpu(server.proc.pid) - s0) / per / calls * 1e6))
    for ours in (False, True):
        print("outlive " if ours else "baseline", "worker+server us per model call:",
              " ".join(f"{w:.0f}+{s:.0f}" for w, s in got[ours]))
    pairs = list(zip(got[False], got[True], strict=True))
    print("ratio, total: ", " ".join(f"{(o[0] + o[1]) / (b[0] + b[1]):.3f}" for b, o in pairs))
    print("ratio, worker:", " ".join(f"{o[0] / b[0]:.3f}" for b, o in pairs))


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 6,
                     int(sys.argv[2]) if len(sys.argv) > 2 else 10))
