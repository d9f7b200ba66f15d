"""Supervision: the library's supervisor dispatches attempts as invocations of the user's graph.

LangGraph has no supervisor, no timers and no cancel of its own: the core ``Supervisor`` admits
each attempt and its dispatchers run it — ``TaskDispatcher`` (an asyncio task in the
supervisor's process, cancelled to stop it) or ``SubprocessDispatcher`` (one ``outlive worker``
process per attempt, killed by its PID). What runs is an *attempt function*; here it invokes the
user's compiled graph on the user's thread:

    attempt = graph_attempt(build, input=lambda ctx: {"report": ctx.inputs},
                            candidate=lambda out: {"digest": out["digest"]})
    WorkDefinition(work_id="digest/q3", attempt=attempt, ...)

:func:`run_attempt` is the invocation itself: a successor carries on the thread's pending run
when its predecessor left one for the same input version, and starts a new run otherwise.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.pregel import Pregel

from outlive import Worker
from outlive.supervisor import AttemptContext

from ._context import Durability
from ._engine import attempt_config, run

__all__ = ["graph_attempt", "run_attempt"]


async def run_attempt(program: Pregel[Any, Any, Any, Any], input: Any, *, worker: Worker,
                      config: RunnableConfig | None = None,
                      durability: Durability | None = None) -> Any:
    """What a supervised attempt runs: carry on the thread's pending run, or start ``input``.

    A predecessor that died (or was taken over) mid-run left the thread with pending nodes.
    If that run was for the version this attempt is pinned to, the successor continues it
    (``ainvoke(None)``): LangGraph keeps the nodes it finished, outlive restores the steps it
    journaled. Otherwise (a new input version, a finished thread) it starts a run with
    ``input``: a new run on the thread, whose state the user's reducers carry over as usual.
    """
    cfg = attempt_config(worker, config)
    snapshot = await program.aget_state(cfg)
    pending = bool(snapshot.next) and (snapshot.metadata or {}).get("outlive_version") == \
        worker.attempt.pinned_version
    return await run(program, None if pending else input, worker=worker, config=cfg,
                     durability=durability)


def graph_attempt(build: Callable[[AttemptContext], Pregel[Any, Any, Any, Any]], *,
                  input: Callable[[AttemptContext], Any],
                  candidate: Callable[[Any], Any],
                  config: Callable[[AttemptContext], RunnableConfig | None] | None = None
                  ) -> Callable[[AttemptContext], Awaitable[None]]:
    """An attempt function for the supervisor: build the graph, invoke it, submit its output.

    ``build(ctx)`` compiles the user's graph (with ``ctx.worker.backend.checkpointer``, or a
    saver fenced with ``backend.fence``); ``input(ctx)`` is the graph's input for the attempt's
    pinned inputs; ``candidate(output)`` is the content submitted for acceptance. ``config``
    gives the user's config (its ``thread_id``; default: the work id is the thread).

    A graph that stops at ``interrupt()`` leaves the attempt ``waiting`` (the runtime and the
    supervisor then neither finish it nor suspect it): the person's answer comes through
    :func:`~outlive_langgraph.rejoin` in any process.
    """
    async def attempt(ctx: AttemptContext) -> None:
        graph = build(ctx)
        out = await run_attempt(graph, input(ctx), worker=ctx.worker,
                                config=config(ctx) if config is not None else None)
        if await ctx.worker.parked():
            return   # stopped at interrupt(): the attempt waits; whoever answers carries it on
        # the graph's output, journaled as the assembly of the steps it ran: the candidate's
        # content is bound to the journal
        await ctx.submit(await ctx.worker.assemble(candidate(out)))

    return attempt
