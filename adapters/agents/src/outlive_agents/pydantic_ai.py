"""pydantic-ai's ``Agent`` with outlive's records, on any ledger (the embedded ``sqlite://`` first).

The agent stays the user's; an attempt runs it under ``agent.override`` with two wrappers, the
shape pydantic-ai's own durable agents take (a wrapped model, wrapped toolsets)::

    attempt = agent_attempt(agent, prompt=lambda ctx: ctx.inputs["ticket"],
                            effects=["post_digest"])

- :class:`JournaledModel` (a ``WrapperModel``): each request is a journaled step named
  ``model:<turn>``, keyed by the conversation so far (each message's kind, instructions and
  parts without timestamps, run ids or usage), the model settings and the request parameters
  (the tool definitions, the output mode).
- :class:`OutliveToolset` (a ``WrapperToolset``): a read-only tool call is a step keyed by its
  arguments and the version's parts it reads; a tool marked with
  :func:`~outlive_agents.effect` (or named in ``effects``) is an operation-keyed effect.
- :func:`agent_attempt` runs the agent for a supervised attempt and submits its output.
"""

from __future__ import annotations

try:
    from pydantic_ai import Agent
    from pydantic_ai.models.wrapper import WrapperModel
    from pydantic_ai.toolsets.wrapper import WrapperToolset
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("outlive_agents.pydantic_ai needs pydantic-ai: "
                      "pip install 'outlive-agents[pydantic-ai]'") from exc

import contextlib
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets.abstract import AbstractToolset, ToolsetTool
from pydantic_core import to_jsonable_python

from outlive import Receipt, Worker
from outlive.errors import ConfigError
from outlive.supervisor import AttemptContext

from ._records import effect_tool_call, is_marked_effect, jsonable, model_step, read_tool_step

__all__ = [
    "JournaledModel",
    "OutliveToolset",
    "agent_attempt",
    "conversation",
    "current_worker",
    "outlive_overrides",
]

_WORKER: ContextVar[Worker | None] = ContextVar("outlive_agents_pydantic_ai_worker", default=None)

#: What a message part says; everything else (timestamps, ids, usage, provider details) is
#: left out of the key.
_PART_KEYS = ("part_kind", "content", "tool_name", "args", "tool_call_id", "outcome")


def current_worker() -> Worker:
    """The Worker of the attempt the agent runs for (set by :func:`agent_attempt`)."""
    worker = _WORKER.get()
    if worker is None:
        raise ConfigError("no outlive attempt is running: run the agent through agent_attempt "
                          "or inside outlive_overrides(agent, worker)")
    return worker


def conversation(messages: list[ModelMessage]) -> list[dict[str, Any]]:
    """The conversation as the journal keys it."""
    out = []
    for message in ModelMessagesTypeAdapter.dump_python(messages, mode="json"):
        out.append({"kind": message.get("kind"), "instructions": message.get("instructions"),
                    "parts": [{k: p[k] for k in _PART_KEYS if k in p}
                              for p in message.get("parts", [])]})
    return out


def _turn(messages: Iterable[ModelMessage]) -> int:
    return sum(1 for m in messages if isinstance(m, ModelResponse))


class JournaledModel(WrapperModel):
    """A model whose every request is a journaled step of the running attempt."""

    def __init__(self, wrapped: Any, *, step_prefix: str = "model") -> None:
        super().__init__(wrapped)
        self.step_prefix = step_prefix

    async def request(self, messages: list[ModelMessage], model_settings: ModelSettings | None,
                      model_request_parameters: ModelRequestParameters) -> ModelResponse:
        worker = current_worker()

        async def call() -> Any:
            response = await self.wrapped.request(messages, model_settings,
                                                  model_request_parameters)
            return ModelMessagesTypeAdapter.dump_python([response], mode="json")[0]

        settings = jsonable({"model": self.wrapped.model_name, "system": self.wrapped.system,
                             "settings": to_jsonable_python(model_settings or {})})
        params = jsonable(to_jsonable_python(model_request_parameters))
        saved = await model_step(worker, f"{self.step_prefix}:{_turn(messages)}",
                                 conversation=conversation(messages), settings=settings,
                                 tools=params, call=call)
        response = ModelMessagesTypeAdapter.validate_python([saved])[0]
        assert isinstance(response, ModelResponse)
        return response


@dataclass
class OutliveToolset(WrapperToolset[Any]):
    """A toolset whose calls are steps (read-only) or operation-keyed effects (marked)."""

    effects: frozenset[str] = frozenset()
    reads: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any],
                        tool: ToolsetTool[Any]) -> Any:
        worker = current_worker()
        args = jsonable(to_jsonable_python(tool_args))
        registered = (getattr(self.wrapped, "tools", None) or {}).get(name)   # a FunctionToolset's
        if name in self.effects or is_marked_effect(getattr(registered, "function", None)) \
                or is_marked_effect(tool.tool_def):
            async def send() -> Any:
                return await self.wrapped.call_tool(name, tool_args, ctx, tool)

            receipt: Receipt = await effect_tool_call(worker, tool=name, args=args, call=send)
            return receipt.effect_id

        async def run() -> Any:
            return to_jsonable_python(await self.wrapped.call_tool(name, tool_args, ctx, tool))

        return await read_tool_step(worker, f"tool:{_turn(ctx.messages)}:{ctx.tool_call_id}",
                                    tool=name, args=args, reads=self.reads.get(name), call=run)


@contextlib.contextmanager
def outlive_overrides(agent: Agent[Any, Any], *, worker: Worker | None = None,
                      effects: Iterable[str] = (),
                      reads: Mapping[str, Iterable[str]] | None = None) -> Iterator[None]:
    """``agent.override(...)`` with the journaled model and outlive's toolsets, for ``worker``'s
    attempt (None: the one :func:`agent_attempt` set)."""
    if agent.model is None:
        raise ConfigError("the agent needs a model set at construction to be journaled")
    names = frozenset(effects)
    narrowed = {k: tuple(v) for k, v in (reads or {}).items()}
    toolsets: list[AbstractToolset[Any]] = [
        OutliveToolset(wrapped=t, effects=names, reads=narrowed) for t in agent.toolsets]
    model = agent.model if isinstance(agent.model, JournaledModel) else JournaledModel(agent.model)
    token = _WORKER.set(worker) if worker is not None else None
    try:
        with agent.override(model=model, toolsets=toolsets, tools=[]):
            yield
    finally:
        if token is not None:
            _WORKER.reset(token)


def agent_attempt(agent: Agent[Any, Any], *, prompt: Callable[[AttemptContext], Any],
                  answer: Callable[[Any], Any] = lambda output: {"answer": output},
                  effects: Iterable[str] = (), reads: Mapping[str, Iterable[str]] | None = None,
                  deps: Callable[[AttemptContext], Any] | None = None) \
        -> Callable[[AttemptContext], Awaitable[None]]:
    """An attempt function for the supervisor: run ``agent`` on the pinned ticket, submit.

    ``prompt(ctx)`` is the user prompt for the pinned inputs (``ctx.inputs``); ``answer`` turns
    the run's output into the candidate's content.
    """
    effect_names = tuple(effects)

    async def attempt(ctx: AttemptContext) -> None:
        with outlive_overrides(agent, worker=ctx.worker, effects=effect_names, reads=reads):
            kw: dict[str, Any] = {} if deps is None else {"deps": deps(ctx)}
            result = await agent.run(prompt(ctx), **kw)
        # the final answer, journaled as the assembly of the run's steps (content is bound)
        await ctx.submit(await ctx.worker.assemble(answer(result.output)))

    return attempt
