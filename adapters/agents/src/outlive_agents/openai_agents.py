"""The OpenAI Agents SDK on Temporal (``temporalio.contrib.openai_agents``) with outlive's records.

The agent runs in the user's workflow, as Temporal's integration runs it: ``OpenAIAgentsPlugin``
makes each model call an activity and ``workflow.activity_as_tool`` makes tools activities. The
workflow extends :class:`outlive_temporal.Work` (its execution is the work's ledger) and runs the
agent for an attempt with :func:`run_agent`; :class:`OutliveAgentsPlugin`, beside
``OpenAIAgentsPlugin`` and ``OutlivePlugin`` on the client, turns those activities into records
of that attempt with a workflow interceptor, so the agent's code does not change::

    @workflow.defn
    class TicketWorkflow(Work):
        @workflow.run
        async def run(self, ticket: dict[str, str]) -> str:
            return await self.drive(self.attempt, ticket)

        async def attempt(self, a: Attempt, ticket: dict[str, str]) -> str:
            result = await run_agent(a, agent, ticket["ticket"], inputs=ticket,
                                     effects=["post_digest"])
            await a.accept({"answer": result.final_output})
            return result.final_output

- a model call (``invoke_model_activity``) is a step ``model:<n>`` of the attempt, keyed by the
  conversation so far (the input items, the instructions), the model settings and the tool and
  handoff schemas: a successor restores it without starting the activity;
- a read-only tool activity is a step keyed by its arguments and the pinned parts it may read;
- a tool activity named in ``effects`` is an operation-keyed effect (``Attempt.effect``): the
  intent is written before the activity starts, and the activity reads its key with
  :func:`outlive_agents.operation_key`.

Temporal drives takeover: a step's activity heartbeat timeout is the attempt's lease.
"""

from __future__ import annotations

try:
    from agents import Runner
    from temporalio import workflow
    from temporalio.plugin import SimplePlugin
    from temporalio.worker import (
        Interceptor,
        StartActivityInput,
        WorkflowInboundInterceptor,
        WorkflowInterceptorClassInput,
        WorkflowOutboundInterceptor,
        WorkflowRunner,
    )
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

    from outlive_temporal import Attempt
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("outlive_agents.openai_agents needs the OpenAI Agents SDK and Temporal: "
                      "pip install 'outlive-agents[openai-agents]'") from exc

import asyncio
import dataclasses
import hashlib
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import to_json, to_jsonable_python

from outlive.errors import ConfigError

from ._records import jsonable, to_journal, tool_operation_key

__all__ = ["MODEL_ACTIVITY", "OutliveAgentsPlugin", "run_agent"]

#: The activity ``OpenAIAgentsPlugin`` registers for a model call.
MODEL_ACTIVITY = "invoke_model_activity"
#: What a model call's key reads from the activity's input; the rest (tracing, ids of the run)
#: does not change what the model is asked.
_ASKED = ("system_instructions", "input", "tools", "output_schema", "handoffs", "prompt")


@dataclass
class _Run:
    """One agent run of one attempt: what the interceptor records its activities into."""

    attempt: Attempt
    parts: Mapping[str, Any]
    effects: frozenset[str]
    reads: Mapping[str, tuple[str, ...]]
    model_calls: int = 0
    tool_calls: dict[int, int] = field(default_factory=dict)


_RUN: ContextVar[_Run | None] = ContextVar("outlive_agents_openai_run", default=None)
#: Set while outlive itself starts the activity (``Attempt.step``/``effect``): passed through.
_OWN: ContextVar[bool] = ContextVar("outlive_agents_openai_own", default=False)


def _named(value: Any) -> str:
    return type(value).__name__


def _key_value(value: Any) -> Any:
    return to_journal(jsonable(to_jsonable_python(value, fallback=_named)))


def _digest(value: Any) -> str:
    """What a model call's key reads of ``value`` (a part of the activity's input, as JSON): the
    SHA-256 of its JSON text, written once by pydantic-core. The conversation grows with every
    turn; hashing its text once is the whole of the work, where a JSON-like copy, a float pass
    and a canonical text were three passes over it per call. The SDK writes the same input the
    same way (its items in their order), so an unchanged conversation has the same digest."""
    return "sha256:" + hashlib.sha256(to_json(value, fallback=_named)).hexdigest()


def _options(input: StartActivityInput) -> dict[str, Any]:
    """The caller's activity options that outlive keeps (one try and the lease are outlive's)."""
    opts: dict[str, Any] = {}
    for name in ("task_queue", "schedule_to_close_timeout", "schedule_to_start_timeout",
                 "start_to_close_timeout", "summary"):
        value = getattr(input, name)
        if value is not None:
            opts[name] = value
    if input.ret_type is not None:
        opts["result_type"] = input.ret_type
    return opts


async def _recorded(run: _Run, input: StartActivityInput) -> Any:
    token = _OWN.set(True)
    try:
        a, opts = run.attempt, _options(input)
        if input.activity == MODEL_ACTIVITY:
            # the activity's input as JSON-like values once (pydantic-core, no deep copy), each
            # read hashed from its JSON text: what the key is made of
            asked = to_jsonable_python(input.args[0], fallback=_named) if input.args else {}
            asked = asked if isinstance(asked, dict) else {}
            turn = run.model_calls
            run.model_calls += 1
            reads = {"conversation": _digest({k: asked.get(k) for k in _ASKED}),
                     "model_settings": _digest({"model": asked.get("model_name"),
                                                "settings": asked.get("model_settings")}),
                     "tool_schemas": _digest(asked.get("tools"))}
            return await a.step(f"model:{turn}", input.activity, *input.args, reads=reads,
                                external=tuple(reads), **opts)
        args = _key_value(list(input.args))
        if input.activity in run.effects:
            op = tool_operation_key(a.work_id, a.version, input.activity, args)
            return await a.effect(op, input.activity, *input.args, **opts)
        turn = run.model_calls
        n = run.tool_calls.get(turn, 0)
        run.tool_calls[turn] = n + 1
        wanted = run.reads.get(input.activity)
        parts = dict(run.parts) if wanted is None else {k: run.parts[k] for k in wanted}
        reads = {**parts, "tool_args": args}
        return await a.step(f"tool:{turn}:{n}:{input.activity}", input.activity, *input.args,
                            reads=reads, external=("tool_args",), **opts)
    finally:
        _OWN.reset(token)


class _Outbound(WorkflowOutboundInterceptor):
    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
        run = _RUN.get()
        if run is None or _OWN.get():
            return self.next.start_activity(input)
        # Inside the workflow's deterministic loop: a task that records, then returns the result.
        return asyncio.ensure_future(_recorded(run, input))  # type: ignore[return-value]


class _Inbound(WorkflowInboundInterceptor):
    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_Outbound(outbound))


class _Interceptor(Interceptor):
    def workflow_interceptor_class(
            self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor]:
        del input
        return _Inbound


def _runner(runner: WorkflowRunner | None) -> WorkflowRunner:
    if isinstance(runner, SandboxedWorkflowRunner):
        return dataclasses.replace(
            runner, restrictions=runner.restrictions.with_passthrough_modules("outlive_agents"))
    if runner is None:
        raise ConfigError("the outlive agents plugin needs the worker's workflow runner")
    return runner


class OutliveAgentsPlugin(SimplePlugin):
    """Put it beside ``OpenAIAgentsPlugin`` and ``OutlivePlugin``: the agent's activities become
    records of the attempt :func:`run_agent` runs it for."""

    def __init__(self) -> None:
        super().__init__("outlive.OutliveAgentsPlugin", interceptors=[_Interceptor()],
                         workflow_runner=_runner)


async def run_agent(attempt: Attempt, agent: Any, input: Any, *,
                    inputs: Mapping[str, Any] | None = None, effects: Iterable[str] = (),
                    reads: Mapping[str, Iterable[str]] | None = None, **run: Any) -> Any:
    """``Runner.run(agent, input, **run)`` for ``attempt``, every activity recorded.

    ``inputs`` is the attempt's pinned input (what ``Work.drive`` hands the body): a read-only
    tool's key holds the parts it may read (all, or ``reads[tool]``). ``effects`` names the tool
    activities that change the world.
    """
    state = _Run(attempt=attempt, parts=dict(inputs or {}), effects=frozenset(effects),
                 reads={k: tuple(v) for k, v in (reads or {}).items()})
    token = _RUN.set(state)
    try:
        return await Runner.run(agent, input, **run)
    finally:
        _RUN.reset(token)
