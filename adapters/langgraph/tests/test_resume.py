"""Every LangGraph resume path gives each step its own result, on the Functional API and StateGraph.

LangGraph hands a resumed invocation each task's saved result by *position* (the parent's call
counter). A step restored from outlive's journal that skipped its task call shifted every later
position: after ``interrupt()`` -> ``Command(resume=...)``, after ``ainvoke(None)`` following a
failure, or on a resume at an earlier checkpoint, step ``s2`` was journaled with ``s1``'s result
without running (``[('s1', 'A'), ('s2', 'A')]``), and every later attempt restored that value.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.func import entrypoint
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

import outlive
from outlive import Controller, Worker
from outlive.records import AttemptState
from outlive_langgraph import (
    LangGraphBackend,
    attempt_config,
    outlive_node,
    outlive_task,
    run,
)

REPORT = {"s1": "A", "s2": "B", "s3": "C"}


async def _worker(b: outlive.Backend, work: str = "w") -> Worker:
    ctl = Controller(b, clock=lambda: 0)
    await ctl.open_work(work)
    await ctl.publish(work, "v1", REPORT)
    w = Worker(b, await ctl.admit(work), None)
    await w.start()
    return w


async def _journal(b: outlive.Backend, work: str = "w") -> list[tuple[str, Any]]:
    st = await b.load(work)
    assert st is not None
    return [(e.step, e.result) for e in st.journal]


class Model:
    """A stand-in summariser: counts calls, can ask a person about s2, can fail once on s2."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.calls: list[str] = []
        self.failed = False

    def summarise(self, section: str, text: str) -> str:
        self.calls.append(section)
        if section == "s2" and self.mode == "review":
            return f"{text}|{interrupt({'review': section})}"
        if section == "s2" and self.mode == "fail" and not self.failed:
            self.failed = True
            raise RuntimeError("the model is down")
        return text


def functional(b: LangGraphBackend, model: Model) -> Any:
    @outlive_task(step=lambda section, **_: section, external=("section",))
    async def summarise(section: str, text: str) -> str:
        return model.summarise(section, text)

    @entrypoint(checkpointer=b.checkpointer)
    async def digest(report: dict[str, str]) -> list[str]:
        return [await summarise(section=k, text=v) for k, v in report.items()]

    return digest


class Digest(TypedDict, total=False):
    report: dict[str, str]
    parts: Annotated[list[str], operator.add]


def state_graph(b: LangGraphBackend, model: Model) -> Any:
    """The user's own StateGraph; its one node calls an outlive step per section."""

    @outlive_task(step=lambda section, **_: section, external=("section",))
    async def summarise(section: str, text: str) -> str:
        return model.summarise(section, text)

    async def summarise_all(state: Digest) -> Digest:
        return {"parts": [await summarise(section=k, text=v) for k, v in state["report"].items()]}

    g = StateGraph(Digest)
    g.add_node("summarise_all", summarise_all)
    g.add_edge(START, "summarise_all")
    g.add_edge("summarise_all", END)
    return g.compile(checkpointer=b.checkpointer)


async def _shaped(backend: outlive.Backend, shape: str,
                  mode: str) -> tuple[Model, Any, Worker, Any]:
    """The model, the program in the given shape, a started attempt, the program's input."""
    assert isinstance(backend, LangGraphBackend)
    model = Model(mode)
    program = (functional if shape == "functional" else state_graph)(backend, model)
    first_input: Any = REPORT if shape == "functional" else {"report": REPORT}
    return model, program, await _worker(backend), first_input


def _parts(out: Any) -> list[str]:
    return list(out["parts"]) if isinstance(out, dict) and "parts" in out else list(out)


@pytest.mark.parametrize("shape", ["functional", "stategraph"])
async def test_resume_after_interrupt_gives_each_step_its_own_result(
        backend: outlive.Backend, shape: str) -> None:
    model, program, w, first_input = await _shaped(backend, shape, "review")
    first = await run(program, first_input, worker=w, thread_id="q3-report")
    assert "__interrupt__" in first, "the person has not answered yet"
    assert await _journal(backend) == [("s1", "A")]
    out = await run(program, Command(resume="ok"), worker=w, thread_id="q3-report")
    assert _parts(out) == ["A", "B|ok", "C"]
    assert await _journal(backend) == [("s1", "A"), ("s2", "B|ok"), ("s3", "C")]
    assert model.calls == ["s1", "s2", "s2", "s3"], "s1 restored; s2 asked, then answered"


@pytest.mark.parametrize("shape", ["functional", "stategraph"])
async def test_continue_after_a_failure_gives_each_step_its_own_result(
        backend: outlive.Backend, shape: str) -> None:
    model, program, w, first_input = await _shaped(backend, shape, "fail")
    with pytest.raises(RuntimeError, match="model is down"):
        await run(program, first_input, worker=w, thread_id="q3-report")
    out = await run(program, None, worker=w, thread_id="q3-report")
    assert _parts(out) == ["A", "B", "C"]
    assert await _journal(backend) == [("s1", "A"), ("s2", "B"), ("s3", "C")]
    assert model.calls == ["s1", "s2", "s2", "s3"]


@pytest.mark.parametrize("shape", ["functional", "stategraph"])
async def test_resume_at_an_earlier_checkpoint_gives_each_step_its_own_result(
        backend: outlive.Backend, shape: str) -> None:
    """Time travel: resume the interrupt from a checkpoint picked out of the thread's history."""
    _model, program, w, first_input = await _shaped(backend, shape, "review")
    await run(program, first_input, worker=w, thread_id="q3-report")
    cfg = attempt_config(w, {"configurable": {"thread_id": "q3-report"}})
    history = [s async for s in program.aget_state_history(cfg)]
    earlier = next(s for s in history if s.interrupts)
    out = await run(program, Command(resume="ok"), worker=w, config=earlier.config)
    assert _parts(out) == ["A", "B|ok", "C"]
    assert await _journal(backend) == [("s1", "A"), ("s2", "B|ok"), ("s3", "C")]


# -- nodes as steps ----------------------------------------------------------------------------
class Report(TypedDict, total=False):
    text: str
    summary: str
    approved: str
    posted: str


def node_graph(b: LangGraphBackend, calls: list[str]) -> Any:
    """A StateGraph whose nodes are outlive steps: summarise -> review (a person) -> post."""

    @outlive_node(inputs=("text",), external=("text",))
    async def summarise(state: Report) -> Report:
        calls.append("summarise")
        return {"summary": state["text"].upper()}

    @outlive_node(inputs=("summary",), external=("summary",))
    async def review(state: Report) -> Report:
        calls.append("review")
        return {"approved": str(interrupt({"summary": state["summary"]}))}

    @outlive_node(inputs=("summary", "approved"), external=("summary", "approved"))
    async def post(state: Report) -> Report:
        calls.append("post")
        return {"posted": f"{state['summary']} ({state['approved']})"}

    g = StateGraph(Report)
    for fn in (summarise, review, post):
        g.add_node(fn)
    g.add_edge(START, "summarise")
    g.add_edge("summarise", "review")
    g.add_edge("review", "post")
    g.add_edge("post", END)
    return g.compile(checkpointer=b.checkpointer)


async def test_nodes_are_steps_restored_by_their_inputs(backend: outlive.Backend) -> None:
    assert isinstance(backend, LangGraphBackend)
    calls: list[str] = []
    graph = node_graph(backend, calls)
    w = await _worker(backend)
    cfg = {"configurable": {"thread_id": "report-7"}}
    first = await run(graph, {"text": "revenue 4.7"}, worker=w, config=cfg)
    assert "__interrupt__" in first
    st = await backend.load("w")
    assert st is not None and st.attempts[0].state is AttemptState.WAITING, \
        "a person's wait is waiting, not silence"
    assert st.attempts[0].waiting_for == "interrupt: {'summary': 'REVENUE 4.7'}"
    out = await run(graph, Command(resume="yes"), worker=w, config=cfg)
    st = await backend.load("w")
    assert st is not None and st.attempts[0].state is AttemptState.RUNNING
    assert out["posted"] == "REVENUE 4.7 (yes)"
    assert await _journal(backend) == [("summarise", {"summary": "REVENUE 4.7"}),
                                       ("review", {"approved": "yes"}),
                                       ("post", {"posted": "REVENUE 4.7 (yes)"})]
    assert calls == ["summarise", "review", "review", "post"]
    # Replay from the checkpoint before "review": LangGraph reruns review and post; outlive
    # restores both from the journal by their inputs, so nobody is asked twice.
    history = [s async for s in graph.aget_state_history(attempt_config(w, cfg))]
    before_review = next(s for s in history if s.next == ("review",))
    again = await run(graph, None, worker=w, config=before_review.config)
    assert again["posted"] == "REVENUE 4.7 (yes)"
    assert calls == ["summarise", "review", "review", "post"], "restored, not rerun"
    assert len(await _journal(backend)) == 3


async def test_astream_runs_the_attempt(backend: outlive.Backend) -> None:
    """``astream`` on the user's graph with the attempt's config: chunks as LangGraph's."""
    assert isinstance(backend, LangGraphBackend)
    calls: list[str] = []
    graph = node_graph(backend, calls)
    w = await _worker(backend)
    cfg = attempt_config(w, {"configurable": {"thread_id": "report-8"}})
    updates = [c async for c in graph.astream({"text": "costs fell"}, cfg, stream_mode="updates")]
    assert updates[0] == {"summarise": {"summary": "COSTS FELL"}}
    assert "__interrupt__" in updates[-1]
    chunks = [c async for c in graph.astream(Command(resume="ok"), cfg, stream_mode="values")]
    assert chunks[-1]["posted"] == "COSTS FELL (ok)"
    assert [s for s, _ in await _journal(backend)] == ["summarise", "review", "post"]
