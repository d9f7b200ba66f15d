"""The article's main run of ``digest/q3-report``, told with outlive's own API (``outlive demo``).

No harness and no test runner: the controller, three workers, the feed and the newsletter are
played here through :class:`~outlive.Controller` and :class:`~outlive.Worker` on whatever backend
the URL names, on a logical clock (one tick per action). The silent worker is paused (its model
call is really held, then released), fencing, version pins, per-step saving, the operation key and
the strict newsletter rule are on; the run must end as the article says: 6 model calls, 1 post,
the digest accepted for v2 and the newsletter quoting 4.7 million.

The conformance distribution replays the same story under all 864 switch combinations.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .backend import Backend
from .controller import Controller
from .errors import EffectAmbiguous, StaleOwner, WorkExists
from .hashing import short
from .receiver import MemoryReceiver
from .records import Candidate, Contract, InputVersion, Policy, Receipt, WorkState
from .rules import StrictCurrent, dependable
from .worker import Worker

__all__ = ["DemoResult", "TraceLine", "WORK_ID", "main_run"]

WORK_ID = "digest/q3-report"
#: The first owner token is 41, as in the article.
EPOCH_FLOOR = 40
V1 = {
    "s1": "Q3 overview: demand held steady across all three regions. Headcount was flat.",
    "s2": "Revenue was 4.1 million for the quarter, up from 3.6 million in Q2. Gross margin held "
          "at 41 percent.",
    "s3": "Operating costs fell 3 percent as the data-centre move completed. Capital spending was "
          "deferred.",
    "s4": "Outlook: the board expects growth to continue into Q4. Hiring resumes in January.",
}
V2 = {**V1, "s2": V1["s2"].replace("4.1 million", "4.7 million")}
CONTRACT = Contract(name="digest-form", version="1", assessor="controller:completeness-and-form")
FIGURE = re.compile(r"Revenue was (\d+\.\d+) million")


@dataclass(frozen=True, kw_only=True)
class TraceLine:
    tick: int
    kind: str
    text: str


@dataclass(kw_only=True)
class DemoResult:
    """What the run produced, and whether it is the article's outcome."""

    url: str
    model_calls: int = 0
    posts: int = 0
    accepted_digest: str | None = None
    accepted_version: str | None = None
    accepted_at: int | None = None
    newsletter_start: int | None = None
    newsletter_figure: str | None = None
    stale_writes_applied: int = 0
    announcement: str | None = None
    trace: list[TraceLine] = field(default_factory=list)

    @property
    def checks(self) -> dict[str, bool]:
        """The article's figures for the main run, each checked."""
        return {
            "six model calls": self.model_calls == 6,
            "one post": self.posts == 1,
            "no stale write applied": self.stale_writes_applied == 0,
            "digest accepted for v2": self.accepted_version == "v2",
            "newsletter quotes 4.7 million": self.newsletter_figure == "4.7",
            "announcement confirmed": self.announcement == "confirmed",
        }

    @property
    def clean(self) -> bool:
        return all(self.checks.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "url": self.url, "model_calls": self.model_calls, "posts": self.posts,
            "accepted": {"digest": self.accepted_digest, "version": self.accepted_version,
                         "at": None if self.accepted_at is None else f"t{self.accepted_at}"},
            "newsletter": {"start": None if self.newsletter_start is None
                           else f"t{self.newsletter_start}", "figure": self.newsletter_figure},
            "stale_writes_applied": self.stale_writes_applied,
            "announcement": self.announcement, "checks": self.checks, "clean": self.clean,
            "trace": [{"tick": f"t{t.tick}", "kind": t.kind, "text": t.text} for t in self.trace],
        }


def _summary(section: str) -> str:
    """The stand-in model's answer: a section's first sentence."""
    return section.split(". ")[0].rstrip(".") + "."


def _assess(candidate: Candidate, version: InputVersion | None) -> tuple[bool, str]:
    sections = candidate.content if isinstance(candidate.content, dict) else {}
    complete = sorted(sections) == sorted(V1) and all(sections.values())
    return complete, "every section summarised" if complete else "sections missing"


async def main_run(backend: Backend, *, work_id: str = WORK_ID,
                   on_line: Callable[[TraceLine], None] | None = None) -> DemoResult:
    """Play t0-t14 on ``backend``; ``on_line`` sees each trace line as it happens."""
    tick = 0
    result = DemoResult(url=backend.url)

    def clock() -> int:
        return tick

    def log(kind: str, text: str) -> None:
        line = TraceLine(tick=tick, kind=kind, text=text)
        result.trace.append(line)
        if on_line is not None:
            on_line(line)

    ctl = Controller(backend, clock=clock, heartbeat_interval=1, missed_beats=2)
    feed = MemoryReceiver(clock=clock)
    entered, held = asyncio.Event(), asyncio.Event()

    def model(paused: bool = False) -> Callable[..., Any]:
        async def call(**section: str) -> str:
            result.model_calls += 1
            if paused:
                entered.set()
                await held.wait()       # the worker is paused mid-call, not dead
            (text,) = section.values()
            return _summary(text)
        return call

    async def work(worker: Worker, step: str, text: str) -> None:
        rid = worker.steps.get(step)
        await worker.step(step, model(), **{step: text})
        rec = worker.steps[step]
        if rid is None or rid.input_key != rec.input_key:
            log("journal", f"#{worker.attempt.number} summarises {step} from "
                           f"{worker.attempt.pinned_version} -> {short(rec.result_id)}, recorded")

    async def admit(version: dict[str, str]) -> Worker:
        att = await ctl.admit(work_id)
        log("attempt", f"controller admits #{att.number} with owner token {att.token}, pinned to "
                       f"report {att.pinned_version} — written down before any work is dispatched")
        worker = Worker(backend, att, version, clock=clock)
        await worker.start()
        return worker

    async def suspect() -> None:
        for att in await ctl.observe(work_id):
            log("attempt", f"#{att.number} has missed 2 heartbeats: unknown — not failed and not "
                           "finished")

    if await backend.load(work_id) is not None:
        raise WorkExists(f"{backend.url} already holds {work_id}; use a fresh backend",
                         work_id=work_id)
    await ctl.open_work(work_id, Policy(), epoch_floor=EPOCH_FLOOR)
    await ctl.publish(work_id, "v1", V1)
    first = await admit(V1)                                             # t0
    for step in ("s1", "s2"):                                           # t1, t2
        tick += 1
        await first.heartbeat()
        await work(first, step, V1[step])
    tick = 3
    paused = asyncio.create_task(first.step("s3", model(paused=True), s3=V1["s3"]))
    await entered.wait()
    log("attempt", "#1 starts s3 (the model call is made), then goes silent. Nothing is recorded")
    tick = 4
    v2 = await ctl.publish(work_id, "v2", V2)
    log("input", f"report v2 {short(v2.parts['s2'])} arrives: section 2 corrected from 4.1 to "
                 "4.7 million")
    tick = 5
    await suspect()
    second = await admit(V2)
    restored = [s for s in V2 if second.can_restore(s, **{s: V2[s]})]
    log("journal", f"#2 restores {', '.join(restored)} from the journal; must redo "
                   f"{', '.join(s for s in V2 if s not in restored)}")
    for s in restored:
        await second.step(s, model(), **{s: V2[s]})
    for step in ("s2", "s3"):                                           # t6, t7
        tick += 1
        await second.heartbeat()
        await work(second, step, V2[step])
    tick = 8
    held.set()                                                          # #1 wakes
    try:
        await paused
        result.stale_writes_applied += 1
        log("fencing", "#1 wakes and records s3 — a stale write was applied")
    except StaleOwner as exc:
        log("attempt", f"#1 wakes and tries to record s3; the journal rejects it: token "
                       f"{exc.details.get('token', first.token)} is older than "
                       f"{exc.details.get('epoch', '?')}. #1 stops — alive, without write authority")
    await second.heartbeat()
    await work(second, "s4", V2["s4"])
    tick = 9
    await second.heartbeat()
    cand = await second.candidate()     # the digest: the sections' journaled summaries
    figure = FIGURE.search(cand.content["s2"])
    log("artifact", f"#2 assembles candidate digest {short(cand.digest)} (for {cand.version}, "
                    f"quoting {figure.group(1) if figure else '?'} million). Finished; not yet "
                    "accepted")
    tick = 10
    await second.heartbeat()
    acc = await ctl.assess(work_id, cand.digest, CONTRACT, _assess)
    result.accepted_digest, result.accepted_version, result.accepted_at = \
        short(acc.digest), acc.version, acc.at
    log("artifact", f"controller accepts {short(acc.digest)} for {acc.version} under "
                    f"{acc.contract.name}@{acc.contract.version}")
    op_key = f"announce:{work_id}:{short(cand.digest)}"
    payload = {"digest": cand.digest, "title": "Q3 report digest"}

    def post(key: str | None, body: Any) -> Receipt:
        return feed.receive(key, body, lambda _b: f"P{len(feed.applied) + 1}")

    def post_then_die(key: str | None, body: Any) -> Receipt:
        receipt = post(key, body)
        log("effect", f"#2 records its intent to post; the feed applies post {receipt.effect_id}; "
                      "#2 dies before recording it")
        raise ConnectionResetError("the poster died")

    try:
        await second.effect(op_key, payload, post_then_die)
    except EffectAmbiguous:
        pass                                                            # #2 is gone from here on
    tick = 12                                                           # the newsletter is ready
    st = await ctl.state(work_id)
    dep = dependable(st, StrictCurrent())
    if dep is not None:
        m = FIGURE.search(dep.content["s2"])
        result.newsletter_start, result.newsletter_figure = tick, m.group(1) if m else None
        log("dependant", f"newsletter admitted on {short(dep.digest)}; it quotes "
                         f"{result.newsletter_figure} million (report {st.current_version} "
                         f"says {FIGURE.search(V2['s2']).group(1)} million)")  # type: ignore[union-attr]
    tick = 13
    await suspect()
    third = await admit(V2)
    for s in V2:
        await third.step(s, model(), **{s: V2[s]})
    log("journal", f"#3 restores {', '.join(s for s, r in third.steps.items() if r.restored)} "
                   "from the journal")
    tick = 14
    for open_effect in third.open_effects():
        receipt = await third.effect(open_effect.op_key, payload, post)
        log("effect", f"#3 resends with the same operation key; the feed answers "
                      f"\"{receipt.note or 'new'}\" and returns {receipt.effect_id}; nothing new "
                      f"is posted; {receipt.effect_id} is recorded as confirmed")
    await third.finish()
    final: WorkState = await ctl.state(work_id)
    eff = final.effect(op_key)
    result.announcement = eff.state.value if eff is not None else None
    result.posts = len(feed.applied)
    result.stale_writes_applied = final.stale_writes_applied
    return result
