"""The article's situation for an agent, framework-free: the ticket, the feed, the pause, the death.

The work is a ticket ("write the Q3 digest from the attached report and post it") with one
attachment, the report. The agent reads the attachment (a read-only tool), posts the digest (an
effect tool) and answers. The scene, whatever framework runs the agent:

1. attempt #1 calls the model once, then pauses inside ``read_attachment`` (no step, no lease
   renewal: the process is frozen);
2. the corrected report (v2: revenue 4.1 -> 4.7 million) is published meanwhile; the supervisor
   marks #1 ``unknown`` and admits #2 pinned to v2;
3. #2 restores the first model call (its conversation, the ticket alone, is unchanged), reads the
   corrected attachment, calls the model, posts, and dies just after the feed applied the post;
4. #3 restores everything up to the post, resends it with the same operation key (the feed answers
   "already seen"), calls the model for the answer; the judge accepts it for v2;
5. #1 wakes up; its tool's result is refused (``StaleOwner``): no stale write.

Model calls: 3 for the agent (one per attempt) and 1 for the judge. One post, quoting 4.7.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import outlive
from outlive import rules
from outlive.supervisor import AttemptContext

TICKET = "Write the Q3 digest from the attached report and post it to the feed."
V1 = {"ticket": TICKET, "report": "Revenue was 4.1 million for the quarter. Costs fell 3 percent."}
V2 = {**V1, "report": "Revenue was 4.7 million for the quarter. Costs fell 3 percent."}
VERSIONS = {"v1": V1, "v2": V2}
WORK = "ticket/q3-digest"
#: A loaded 2-core machine: takeover after ~1.5 s of silence (a shorter lease lets the load
#: itself pass for silence).
LEASE = outlive.Lease(heartbeat_interval=300, missed_beats=5, start_grace=5_000)


def inputs(version: str) -> dict[str, str]:
    return VERSIONS[version]


def figure(text: str) -> str:
    """The revenue figure a text quotes ("4.7"), or "" when it quotes none."""
    found = re.search(r"(\d+\.\d+) million", text)
    return found.group(1) if found else ""


def reply_for(turn: int, tool_texts: list[str]) -> tuple[str, dict[str, Any] | None]:
    """The deterministic agent every framework's scripted model plays: (text, tool call).

    Turn 0 reads the report; turn 1 posts a digest quoting the figure it read; turn 2 answers
    with the post's id and the figure. ``tool_texts``: the tool results so far, in order.
    """
    if turn == 0:
        return "", {"name": "read_attachment", "args": {"name": "report"}, "id": "call-read"}
    read = figure(tool_texts[0]) if tool_texts else ""
    if turn == 1:
        digest = f"Q3 digest: revenue {read} million."
        return "", {"name": "post_digest", "args": {"text": digest}, "id": "call-post"}
    return f"Posted {tool_texts[-1]}: Q3 revenue was {read} million.", None


@dataclass
class Feed:
    """The announcement feed: remembers operation keys atomically with the post."""

    receiver: outlive.MemoryReceiver = field(default_factory=outlive.MemoryReceiver)
    posts: list[str] = field(default_factory=list)

    def post(self, key: str | None, text: str) -> outlive.Receipt:
        def apply(body: Any) -> str:
            self.posts.append(body)
            return f"P{len(self.posts)}"

        return self.receiver.receive(key, text, apply)


class Scene:
    """What the attempts of one run share: the feed, the model calls, the pause and the death."""

    def __init__(self, *, pause_attempt: int | None = 1, die_after_post: int | None = 2) -> None:
        self.feed = Feed()
        self.model_calls: list[tuple[int, int]] = []
        self.tool_reads: list[tuple[int, str]] = []
        self.pause_attempt = pause_attempt
        self.die_after_post = die_after_post
        self.paused = asyncio.Event()
        self.wake = asyncio.Event()
        self.late: list[str] = []

    async def read(self, ctx_attempt: int, work_id: str, attachments: Mapping[str, str],
                   name: str) -> str:
        """``read_attachment``'s body: attempt ``pause_attempt`` freezes inside it first."""
        self.tool_reads.append((ctx_attempt, attachments[name][:24]))
        if ctx_attempt == self.pause_attempt:
            freeze(work_id, ctx_attempt)
            self.paused.set()
            while not self.wake.is_set():
                try:
                    await self.wake.wait()
                except asyncio.CancelledError:
                    # The supervisor's stop request never reaches a frozen process: it wakes
                    # and carries on, and only its token stops its writes.
                    task = asyncio.current_task()
                    assert task is not None
                    task.uncancel()
            self.late.append(f"#{ctx_attempt} woke with {figure(attachments[name])}")
        return attachments[name]

    async def post(self, attempt: int, work_id: str, key: str | None, text: str) \
            -> outlive.Receipt:
        """``post_digest``'s body: the feed applies it; attempt ``die_after_post`` dies then."""
        receipt = self.feed.post(key, text)
        if attempt == self.die_after_post:
            kill(work_id, attempt)
            # nothing after the kill runs: wait here until the cancellation arrives (through
            # the framework's own task groups, which may take a few turns of the loop)
            await asyncio.get_running_loop().create_future()
        return receipt


def freeze(work_id: str, attempt: int) -> None:
    """A paused process sends nothing: stop the attempt's lease renewal (its asyncio task,
    named by ``Worker.renewing``), as SIGSTOP would, while its step stays suspended."""
    for task in asyncio.all_tasks():
        if task.get_name() == f"outlive-lease:{work_id}#{attempt}":
            task.cancel()


def kill(work_id: str, attempt: int) -> None:
    """A killed process runs no further line: cancel the attempt's task (``TaskDispatcher``
    names it ``outlive:<work>#<attempt>``); the caller's next await raises CancelledError."""
    for task in asyncio.all_tasks():
        if task.get_name() == f"outlive:{work_id}#{attempt}":
            task.cancel()


def accept_quoting_figure(cand: outlive.Candidate, version: outlive.InputVersion | None) \
        -> tuple[bool, str]:
    """A plain assessor: the answer names the post."""
    answer = str((cand.content or {}).get("answer", ""))
    return answer.startswith("Posted P"), "the answer names its post"


@dataclass(frozen=True)
class Verdicts:
    posts: list[str]
    newsletter_quotes: str
    accepted_for: str | None
    stale_writes: int
    attempts: list[tuple[int, str | None, str]]
    model_calls: list[tuple[int, int]]


async def verdicts(backend: outlive.Backend, scene: Scene) -> Verdicts:
    st = await backend.load(WORK)
    assert st is not None
    dep = rules.dependable(st, outlive.StrictCurrent())
    quoted = figure(str((dep.content or {}).get("answer", ""))) if dep is not None else ""
    return Verdicts(
        posts=list(scene.feed.posts), newsletter_quotes=quoted,
        accepted_for=dep.version if dep is not None else None,
        stale_writes=st.stale_writes_applied,
        attempts=[(a.number, a.pinned_version, a.state.value) for a in st.attempts],
        model_calls=list(scene.model_calls))


async def run_scene(backend: outlive.Backend, scene: Scene, attempt: Any, *,
                    assessor: Any = accept_quoting_figure,
                    contract: outlive.Contract | None = None, **definition: Any) -> Verdicts:
    """Run the supervised work through the scene; return its verdicts."""
    work = outlive.WorkDefinition(
        work_id=WORK, attempt=attempt,
        contract=contract or outlive.Contract(name="digest-posted", version="1", assessor="plain"),
        assessor=assessor, inputs=inputs, lease=LEASE, **definition)
    sup = outlive.Supervisor(backend, work)
    try:
        await sup.publish("v1", V1)
        running = asyncio.create_task(sup.run())
        if scene.pause_attempt is not None:
            await asyncio.wait_for(scene.paused.wait(), 30)
            await sup.publish("v2", V2)        # the corrected report, while #1 is frozen
        await asyncio.wait_for(running, 60)
        if scene.pause_attempt is not None:
            scene.wake.set()                   # #1 wakes and carries on
            late = sup.dispatcher.tasks[(WORK, scene.pause_attempt)]  # type: ignore[attr-defined]
            # it ends refused (StaleOwner) or cancelled by the stop request it shrugged off
            # while frozen: either way only its token mattered
            await asyncio.wait([late], timeout=30)
            assert late.done()
        return await verdicts(backend, scene)
    finally:
        await sup.close()


def attempt_number(ctx: AttemptContext) -> int:
    return ctx.attempt.number
