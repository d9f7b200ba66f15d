"""Every story the in-engine shape can tell, under every protection setting it can express,
beside ``memory://`` (``make sweep-temporal-engine``; minutes, so not in ``make test``).

Not named ``test_*.py``: pytest collects it only when named on the command line.
"""

from __future__ import annotations

from temporalio.client import Client
from test_engine_conformance import PROTECTED, _compare, story_queue

__all__ = ["story_queue"]   # the module's worker fixture, used here too

#: Every story this shape can tell under every protection setting it can express (rule: strict;
#: the consumer reads the finished work). ``make sweep-temporal-engine``.
SWEEP = [{**story, "fencing": f, "pins": p, "key": k} for story in PROTECTED
         for f in ("on", "off") for p in ("on", "off") for k in ("operation", "attempt", "none")]


async def test_the_engine_sweep_agrees_with_memory(story_queue: tuple[Client, str]) -> None:
    client, queue = story_queue
    problems: list[str] = []
    for i in range(0, len(SWEEP), 24):
        problems += await _compare(client, queue, SWEEP[i:i + 24])
    print(f"\n{len(SWEEP) - len(problems)}/{len(SWEEP)} runs agree with memory://")
    assert not problems, f"{len(problems)} of {len(SWEEP)} differ:\n" + "\n".join(problems)

