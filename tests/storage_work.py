"""What the storage tests build on: the smallest work that has a journal."""

from __future__ import annotations

from typing import Any

import outlive
from outlive import Controller, Part, Worker
from outlive import ledger as L
from outlive.hashing import content_hash, input_key


async def one_step_work(b: outlive.Backend) -> tuple[outlive.Attempt, Worker]:
    """Work ``w``: version ``v1`` = ``{"s1": "x"}`` published, one attempt admitted and started
    (worker clock 1), and its step ``s1`` journaled with result ``{"r": "x"}``."""
    ctl = Controller(b, clock=lambda: 0)
    await ctl.open_work("w")
    await ctl.publish("w", "v1", {"s1": "x"})
    att = await ctl.admit("w")
    w = Worker(b, att, {"s1": "x"}, clock=lambda: 1)
    await w.start()
    await w.step("s1", lambda s1: {"r": s1}, s1="x")
    return att, w


def candidate_of(att: outlive.Attempt, name: str, content: Any) -> L.SubmitCandidate:
    """A candidate of work ``w`` whose content is a step's journaled result, the step journaled
    with it (in the candidate's flush: one command)."""
    sources = {"x": content_hash(name)}
    key = input_key(name, sources)
    rid = L.result_id("w", name, key, att.number)
    write = L.StepWrite(step=name, sources=sources, input_key=key, result=content, result_id=rid,
                        external=("x",))
    part = Part(step=name, input_key=key, sources=sources, result_id=rid, external=("x",))
    return L.SubmitCandidate(attempt=att.number, token=att.token, parts=(part,), content=content,
                             digest=L.candidate_digest("w", "v1", (part,), content), at=2,
                             secret=att.secret, flush=(write,))
