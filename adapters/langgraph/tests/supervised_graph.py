"""A user's StateGraph as the supervised work: each attempt is one invocation of the graph.

LangGraph has no supervisor of its own; the library's supervisor admits each attempt and a
dispatcher runs this attempt function (in process, or in an ``outlive worker`` process), which
invokes the user's graph on the user's thread (the work id) with the attempt's config. When the
run folder holds ``crash-<attempt>``, that attempt's ``s2`` node dies once its model call is
made (SIGKILL in a worker process, an exception in process).
"""

from __future__ import annotations

import json
import operator
import os
import signal
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

import outlive
from outlive.supervisor import AttemptContext
from outlive_langgraph import LangGraphBackend, graph_attempt, outlive_node

SECTIONS = ("s1", "s2", "s3")
V1 = {"s1": "A steady quarter.", "s2": "Revenue was 4.7 million.", "s3": "Costs fell."}
CONTRACT = outlive.Contract(name="digest-form", version="1", assessor="test")


class Digest(TypedDict, total=False):
    report: dict[str, str]
    parts: Annotated[list[str], operator.add]


def run_dir() -> Path:
    return Path(os.environ["OUTLIVE_RUN_DIR"])


def inputs(version: str) -> dict[str, str]:
    return dict(V1)


def _log(attempt: int, section: str) -> None:
    with (run_dir() / "calls.log").open("a") as f:
        f.write(json.dumps([attempt, section]) + "\n")


def build(backend: LangGraphBackend, attempt: int) -> Any:
    def node(section: str) -> Any:
        @outlive_node(name=section, inputs=lambda state: {section: state["report"][section]})
        async def summarise(state: Digest) -> Digest:
            _log(attempt, section)
            crash = run_dir() / f"crash-{attempt}"
            if section == "s2" and crash.exists():
                crash.unlink()
                if os.environ.get("OUTLIVE_IN_PROCESS"):
                    raise RuntimeError("the worker died")
                os.kill(os.getpid(), signal.SIGKILL)
            return {"parts": [state["report"][section].upper()]}
        return summarise

    g = StateGraph(Digest)
    prev = START
    for s in SECTIONS:
        g.add_node(s, node(s))
        g.add_edge(prev, s)
        prev = s
    g.add_edge(prev, END)
    return g.compile(checkpointer=backend.checkpointer)


def _build(ctx: AttemptContext) -> Any:
    backend = ctx.worker.backend
    assert isinstance(backend, LangGraphBackend)
    return build(backend, ctx.attempt.number)


#: One attempt = one invocation of the user's graph, on the user's thread (the work id).
attempt = graph_attempt(_build, input=lambda ctx: {"report": ctx.inputs},
                        candidate=lambda out: {"digest": " ".join(out["parts"])})
