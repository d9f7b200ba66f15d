"""LangGraph's prebuilt agent (``create_react_agent`` / ``ToolNode``) with outlive's records.

Two wrappers and an attempt function; the agent itself stays LangGraph's::

    agent = create_react_agent(journaled(model), outlive_tools(tools, effects=["post_digest"]),
                               checkpointer=InMemorySaver())
    attempt = agent_attempt(lambda ctx: agent, input=lambda ctx: {"messages": [...]})

- :func:`journaled` wraps the chat model: each call is a journaled step named ``model:<turn>``
  and keyed by the conversation so far (the messages, the model's settings, the tool schemas
  bound to it). A successor restores every call whose conversation is unchanged.
- :func:`outlive_tools` builds the ``ToolNode``: a read-only tool is a step keyed by its
  arguments and the parts of the pinned version it reads; a tool marked with
  :func:`~outlive_agents.effect` (or named in ``effects``) is an operation-keyed effect, and one
  named in ``approve`` first asks a person through ``interrupt()``: the attempt is ``waiting``
  meanwhile, never suspected.
- :func:`agent_attempt` runs the graph for a supervised attempt on a thread of its own
  (``<work>#<attempt>``) and submits the final answer as the candidate.

The graph keeps its own checkpointer (any saver); the records live in the attempt's ledger
(``sqlite://``, ``postgresql://``, ``langgraph+sqlite://`` ...).
"""

from __future__ import annotations

try:
    from langchain_core.language_models import BaseChatModel
    from langgraph.prebuilt import ToolNode

    from outlive_langgraph import current_worker, node_step, run
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("outlive_agents.langgraph needs LangGraph's prebuilt agent: "
                      "pip install 'outlive-agents[langgraph]'") from exc

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    ToolMessage,
    convert_to_messages,
    message_to_dict,
)
from langchain_core.messages.utils import messages_from_dict
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.prompt_values import PromptValue
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.pregel import Pregel
from langgraph.types import Command, interrupt
from pydantic import Field

from outlive.errors import ConfigError
from outlive.supervisor import AttemptContext

from ._records import effect_tool_call, is_marked_effect, jsonable, model_step, read_tool_step

__all__ = [
    "JournaledChatModel",
    "agent_attempt",
    "agent_thread",
    "conversation",
    "final_answer",
    "journaled",
    "outlive_tools",
]


def _message_key(message: BaseMessage) -> dict[str, Any]:
    """What a message says, without what LangGraph or the provider stamp on it (ids, usage)."""
    out: dict[str, Any] = {"type": message.type, "content": jsonable(message.content)}
    if message.name:
        out["name"] = message.name
    if isinstance(message, AIMessage) and message.tool_calls:
        out["tool_calls"] = [{"name": c["name"], "args": jsonable(c["args"]), "id": c.get("id")}
                             for c in message.tool_calls]
    if isinstance(message, ToolMessage):
        out["tool_call_id"] = message.tool_call_id
        out["status"] = message.status
    return out


def conversation(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """The conversation as the journal keys it: each message's type, content and tool calls."""
    return [_message_key(m) for m in messages]


class JournaledChatModel(BaseChatModel):
    """A chat model whose every call is a journaled step of the running outlive attempt."""

    inner: Any
    #: The model before tools were bound (its settings name the model).
    base: Any = None
    tool_schemas: list[dict[str, Any]] = Field(default_factory=list)
    step_prefix: str = "model"

    @property
    def _llm_type(self) -> str:
        return f"outlive-journaled-{getattr(self.base or self.inner, '_llm_type', 'model')}"

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: str | None = None,
                   **kwargs: Any) -> Any:
        """Bind on the wrapped model; the schemas become part of every call's key."""
        base = self.base if self.base is not None else self.inner
        extra = dict(kwargs)
        if tool_choice is not None:
            extra["tool_choice"] = tool_choice
        try:
            bound = base.bind_tools(tools, **extra)
        except NotImplementedError:
            bound = base   # a model that takes no tool schemas (a fake): it is called as is
        return self.model_copy(update={"inner": bound, "base": base,
                                       "tool_schemas": [convert_to_openai_tool(t) for t in tools]})

    def _settings(self, stop: list[str] | None, kwargs: Mapping[str, Any]) -> Any:
        base = self.base if self.base is not None else self.inner
        params = dict(getattr(base, "_identifying_params", {}) or {})
        bound = {k: v for k, v in (getattr(self.inner, "kwargs", None) or {}).items() if k != "tools"}
        return jsonable({"model": type(base).__name__, "params": params, "bound": bound,
                         "stop": stop, "call": dict(kwargs)})

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        raise ConfigError("a journaled model is called from an async graph: use ainvoke/astream "
                          "(outlive_langgraph.run does)")

    async def _journaled(self, messages: list[BaseMessage], config: RunnableConfig | None,
                         stop: list[str] | None, kwargs: dict[str, Any]) -> BaseMessage:
        """The call as a step (inside a running node: :func:`~outlive_langgraph.node_step`);
        the wrapped model is invoked with the caller's config (its callbacks, tracing)."""
        worker = current_worker()
        turn = sum(1 for m in messages if isinstance(m, AIMessage))

        async def call() -> Any:
            reply = await self.inner.ainvoke(messages, config, stop=stop, **kwargs)
            return message_to_dict(reply)

        saved = await model_step(worker, f"{self.step_prefix}:{turn}",
                                 conversation=conversation(messages),
                                 settings=self._settings(stop, kwargs), tools=self.tool_schemas,
                                 call=call, step=node_step)
        return messages_from_dict([saved])[0]

    async def ainvoke(self, input: LanguageModelInput, config: RunnableConfig | None = None,
                      *, stop: list[str] | None = None, **kwargs: Any) -> AIMessage:
        """The wrapped model's ``ainvoke`` as a journaled step: LangChain's chat-model run
        (callbacks, tracing) is the wrapped model's, once, not a second one around it."""
        if isinstance(input, PromptValue):
            messages = input.to_messages()
        elif isinstance(input, str):
            messages = [HumanMessage(input)]
        else:
            messages = convert_to_messages(input)
        reply = await self._journaled(messages, config, stop, kwargs)
        if not isinstance(reply, AIMessage):
            raise ConfigError(f"the wrapped model answered {type(reply).__name__}, not an AIMessage")
        return reply

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: AsyncCallbackManagerForLLMRun | None = None,
                         **kwargs: Any) -> ChatResult:
        reply = await self._journaled(messages, None, stop, kwargs)
        return ChatResult(generations=[ChatGeneration(message=reply)])


def journaled(model: Any, *, step_prefix: str = "model") -> JournaledChatModel:
    """Wrap a LangChain chat model so each call is a step keyed by the conversation so far."""
    return JournaledChatModel(inner=model, base=model, step_prefix=step_prefix)


def _turn(state: Any) -> int:
    messages = state.get("messages", []) if isinstance(state, Mapping) else \
        getattr(state, "messages", state)
    return sum(1 for m in messages if isinstance(m, AIMessage)) if isinstance(messages, list) else 0


def _approved(decision: Any) -> bool:
    if isinstance(decision, Mapping):
        decision = decision.get("approved", decision.get("type"))
    return decision is True or (isinstance(decision, str)
                                and decision.lower() in ("approve", "approved", "yes", "accept"))


def outlive_tools(tools: Sequence[BaseTool | Callable[..., Any]], *, effects: Iterable[str] = (),
                  approve: Iterable[str] = (), reads: Mapping[str, Iterable[str]] | None = None,
                  **tool_node: Any) -> ToolNode:
    """LangGraph's ``ToolNode`` for ``tools``, each call recorded by outlive.

    ``effects`` names the tools that change the world (or mark them with
    :func:`~outlive_agents.effect`); ``approve`` names effect tools a person approves first
    (``interrupt()``, resumed with ``Command(resume="approve")`` or ``{"approved": bool}``);
    ``reads`` narrows, per read-only tool, the parts of the input version it reads (default:
    all, so any change of the version reruns it). Other keyword arguments go to ``ToolNode``.
    """
    effect_names, approve_names = set(effects), set(approve)
    narrowed = {k: tuple(v) for k, v in (reads or {}).items()}
    node_tools = list(tools)

    async def record(request: ToolCallRequest,
                     execute: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]]) \
            -> ToolMessage | Command[Any]:
        worker = current_worker()
        call = request.tool_call
        name, args, call_id = call["name"], jsonable(call.get("args") or {}), call.get("id")
        tool = request.tool
        marked = name in effect_names or name in approve_names or (tool is not None and (
            is_marked_effect(tool)))
        if not marked:
            async def run_tool() -> Any:
                out = await execute(request)
                if not isinstance(out, ToolMessage):
                    raise ConfigError(f"tool {name!r} returned {type(out).__name__}; a journaled "
                                      "read-only tool returns a message")
                return message_to_dict(out)

            saved = await read_tool_step(worker, f"tool:{_turn(request.state)}:{call_id}",
                                         tool=name, args=args, reads=narrowed.get(name),
                                         call=run_tool, step=node_step)
            message = messages_from_dict([saved])[0]
            assert isinstance(message, ToolMessage)
            return message
        if tool is None:
            return await execute(request)   # LangGraph's own answer to an unknown tool
        if name in approve_names:
            decision = interrupt({"tool": name, "args": args, "call_id": call_id})
            if not _approved(decision):
                return ToolMessage(content=f"{name} was not approved", name=name,
                                   tool_call_id=str(call_id), status="error")

        async def send() -> Any:
            return await tool.ainvoke(call.get("args") or {})

        receipt = await effect_tool_call(worker, tool=name, args=args, call=send)
        return ToolMessage(content=receipt.effect_id, name=name, tool_call_id=str(call_id))

    return ToolNode(node_tools, awrap_tool_call=record, **tool_node)


def agent_thread(ctx: AttemptContext) -> str:
    """The attempt's own thread: ``<work>#<attempt>`` (a successor replays from the journal)."""
    return f"{ctx.worker.work_id}#{ctx.attempt.number}"


def final_answer(output: Any) -> dict[str, Any]:
    """The candidate from an agent's output: its last message's text."""
    last = output["messages"][-1]
    return {"answer": last.content if isinstance(last, BaseMessage) else last}


async def _decide(ctx: AttemptContext, value: Any) -> Any:
    raise ConfigError(f"the agent asked for approval ({value!r}) but agent_attempt was given "
                      "no approvals= to answer it")


def agent_attempt(build: Callable[[AttemptContext], Pregel[Any, Any, Any, Any]], *,
                  input: Callable[[AttemptContext], Any],
                  answer: Callable[[Any], Any] = final_answer,
                  approvals: Callable[[AttemptContext, Any], Awaitable[Any]] | None = None,
                  config: Callable[[AttemptContext], RunnableConfig] | None = None) \
        -> Callable[[AttemptContext], Awaitable[None]]:
    """An attempt function for the supervisor: run the agent, submit its final answer.

    ``build(ctx)`` returns the compiled agent; ``input(ctx)`` its input for the pinned version
    (``ctx.inputs``: the ticket and its attachments). When the agent stops at ``interrupt()``
    the attempt is ``waiting``; ``approvals(ctx, value)`` is awaited for the person's answer
    and the agent resumes with it.
    """
    decide = approvals or _decide

    async def attempt(ctx: AttemptContext) -> None:
        graph = build(ctx)
        if graph.checkpointer is None:
            raise ConfigError("give the agent a checkpointer (checkpointer=InMemorySaver() will "
                              "do): LangGraph needs one to pause at interrupt() and resume")
        cfg: dict[str, Any] = dict(config(ctx) if config is not None else {})
        cfg["configurable"] = {"thread_id": agent_thread(ctx), **(cfg.get("configurable") or {})}
        out = await run(graph, input(ctx), worker=ctx.worker, config=cfg)  # type: ignore[arg-type]
        while True:
            snapshot = await graph.aget_state(cfg)  # type: ignore[arg-type]
            if not snapshot.interrupts:
                break
            value = await decide(ctx, snapshot.interrupts[0].value)
            out = await run(graph, Command(resume=value), worker=ctx.worker,
                            config=cfg)  # type: ignore[arg-type]
        # the final answer, journaled as the assembly of the run's steps (content is bound)
        await ctx.submit(await ctx.worker.assemble(answer(out)))

    return attempt
