"""All 864 runs of the conformance sweep inside a user's workflow, beside ``memory://`` and the
oracle (``make sweep-temporal-engine``; minutes, so not in ``make test``).

The 288 stories (every switch but the newsletter's rule) are told once each, and each is judged
under the three rules: 864 runs compared. Not named ``test_*.py``: pytest collects it only when
named on the command line.
"""

from __future__ import annotations

import time

from temporalio.client import Client
from test_engine_conformance import compare, story_of, story_queue

from outlive_conformance.scenario import all_switches

__all__ = ["story_queue"]   # the module's worker fixture, used here too

#: Every story, once (the rule is judged, not told).
STORIES = list({tuple(story_of(sw).items()): story_of(sw) for sw in all_switches()}.values())
#: Stories told at once: enough to overlap the heartbeat timeouts, few enough for two cores.
BATCH = 64


async def test_the_engine_sweep_agrees_with_memory_and_the_oracle(
        story_queue: tuple[list[Client], str]) -> None:
    clients, queue = story_queue
    started = time.monotonic()
    runs, problems = 0, []
    for i in range(0, len(STORIES), BATCH):
        n, found = await compare(clients, queue, STORIES[i:i + BATCH])
        runs += n
        problems += found
    print(f"\n{runs - len(problems)}/{runs} runs agree with memory:// and the oracle "
          f"({len(STORIES)} stories told, {time.monotonic() - started:.0f} s)")
    assert runs == 864
    assert not problems, f"{len(problems)} of {runs} differ:\n" + "\n".join(problems)
