"""LangGraph's prebuilt agent in the article's situation: one post, the corrected figure, no
stale write; model calls restored by conversation; an approval is ``waiting``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import agents_scene as S
import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import create_react_agent

import outlive
from outlive.supervisor import AttemptContext
from outlive_agents import effect, operation_key, tool_operation_key
from outlive_agents.langgraph import agent_attempt, journaled, outlive_tools
from outlive_langgraph import current_worker

# create_react_agent is LangGraph's prebuilt agent as users run it today (it warns that it moved)
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


class ReportModel(BaseChatModel):
    """The scene's scripted model (``scene.reply_for``), counting its calls per attempt.

    LangChain's ``GenericFakeChatModel`` replays a fixed list; this one reads the conversation
    so the figure it posts is the one its tool read (what the test is about)."""

    calls: Any   # the scene's list itself (a typed list field would be copied)

    @property
    def _llm_type(self) -> str:
        return "report-script"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        turn = sum(1 for m in messages if isinstance(m, AIMessage))
        self.calls.append((current_worker().attempt.number, turn))
        texts = [str(m.content) for m in messages if isinstance(m, ToolMessage)]
        text, call = S.reply_for(turn, texts)
        reply = AIMessage(content=text, tool_calls=[{**call, "type": "tool_call"}] if call else [])
        return ChatResult(generations=[ChatGeneration(message=reply)])


def scene_attempt(scene: S.Scene, *, approve: tuple[str, ...] = (),
                  approvals: Any = None, own_saver: bool = False) -> Any:
    model = ReportModel(calls=scene.model_calls)

    def build(ctx: AttemptContext) -> Any:
        @tool
        async def read_attachment(name: str) -> str:
            """Read one attachment of the ticket."""
            return await scene.read(ctx.attempt.number, ctx.worker.work_id, ctx.inputs, name)

        @tool
        @effect
        async def post_digest(text: str) -> outlive.Receipt:
            """Post the digest to the announcement feed."""
            return await scene.post(ctx.attempt.number, ctx.worker.work_id, operation_key(), text)

        return create_react_agent(journaled(model), outlive_tools([read_attachment, post_digest],
                                                                  approve=approve),
                                  checkpointer=ctx.worker.backend.checkpointer  # type: ignore[attr-defined]
                                  if own_saver else InMemorySaver())

    return agent_attempt(build, input=lambda ctx: {"messages": [HumanMessage(ctx.inputs["ticket"])]},
                         approvals=approvals)


@pytest.fixture(params=["sqlite", "langgraph+sqlite"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[outlive.Backend]:
    b = await outlive.open_backend(f"{request.param}:///{tmp_path / 'o.db'}")
    try:
        yield b
    finally:
        await b.close()


async def test_agent_in_the_articles_situation_posts_once_and_quotes_the_correction(
        backend: outlive.Backend) -> None:
    scene = S.Scene()
    out = await S.run_scene(backend, scene, scene_attempt(scene))
    assert out.posts == ["Q3 digest: revenue 4.7 million."]
    assert out.newsletter_quotes == "4.7"
    assert out.accepted_for == "v2"
    assert out.stale_writes == 0
    assert out.attempts == [(1, "v1", "unknown"), (2, "v2", "unknown"), (3, "v2", "finished")]
    # one model call per attempt: #2 restored turn 0 (the ticket alone: unchanged), #3 turns 0-1
    assert out.model_calls == [(1, 0), (2, 1), (3, 2)]
    # the corrected attachment was read again; #3 restored #2's read
    assert [a for a, _ in scene.tool_reads] == [1, 2]
    assert scene.late == ["#1 woke with 4.1"]
    st = await backend.load(S.WORK)
    assert st is not None
    assert [(e.op_key, e.state, e.attempt) for e in st.effects] == [
        (tool_operation_key(S.WORK, "v2", "post_digest", {"text": "Q3 digest: revenue 4.7 million."}),
         outlive.EffectState.CONFIRMED, 3)]
    # the frozen attempt journaled its one model call before the pause, and nothing after it
    assert [e.step for e in st.journal if e.attempt == 1] == ["model:0"]
    assert [(e.step, e.attempt) for e in st.journal if e.attempt > 1] == [
        ("tool:1:call-read", 2), ("model:1", 2), ("model:2", 3), ("assembly", 3)]


async def test_a_model_call_is_restored_only_for_the_same_conversation(
        backend: outlive.Backend) -> None:
    """No pause, no death: one attempt, three model calls, each journaled under its turn."""
    scene = S.Scene(pause_attempt=None, die_after_post=None)
    out = await S.run_scene(backend, scene, scene_attempt(scene))
    assert out.model_calls == [(1, 0), (1, 1), (1, 2)]
    st = await backend.load(S.WORK)
    assert st is not None
    steps = [e.step for e in st.journal]
    assert steps == ["model:0", "tool:1:call-read", "model:1", "model:2", "assembly"]
    keys = {e.step: e.input_key for e in st.journal if e.step != "assembly"}
    assert len(set(keys.values())) == 4
    assert out.posts == ["Q3 digest: revenue 4.1 million."]


async def test_an_approval_before_the_effect_is_waiting_not_silence(backend: outlive.Backend) \
        -> None:
    scene = S.Scene(pause_attempt=None, die_after_post=None)
    asked: list[Any] = []
    states: list[str] = []
    answer = asyncio.Event()

    async def approvals(ctx: AttemptContext, value: Any) -> Any:
        asked.append(value)
        # longer than the lease: a silent attempt would be taken over meanwhile
        await asyncio.sleep(S.LEASE.timeout * 2 / 1000)
        st = await ctx.worker.backend.load(ctx.worker.work_id)
        assert st is not None
        states.append(st.attempt(ctx.attempt.number).state.value)  # type: ignore[union-attr]
        answer.set()
        return "approve"

    out = await S.run_scene(backend, scene, scene_attempt(scene, approve=("post_digest",),
                                                         approvals=approvals))
    assert answer.is_set()
    assert asked == [{"tool": "post_digest", "args": {"text": "Q3 digest: revenue 4.1 million."},
                      "call_id": "call-post"}]
    assert states == ["waiting"]
    assert out.attempts == [(1, "v1", "finished")]
    assert out.posts == ["Q3 digest: revenue 4.1 million."]
    # LangGraph resumes at the tool node: no model call is repeated
    assert out.model_calls == [(1, 0), (1, 1), (1, 2)]


async def test_on_the_backends_own_saver_the_entries_ride_the_agents_saves(tmp_path: Path) -> None:
    """The agent checkpointed by ``langgraph+sqlite``'s own saver, in the article's situation:
    the same verdicts, and every model and tool call's entry was carried in one of LangGraph's
    own writes (``node_step``), none committed apart."""
    b = await outlive.open_backend(f"langgraph+sqlite:///{tmp_path / 'o.db'}")
    try:
        scene = S.Scene()
        out = await S.run_scene(b, scene, scene_attempt(scene, own_saver=True))
        saver: Any = b.checkpointer  # type: ignore[attr-defined]
        st = await b.load(S.WORK)
    finally:
        await b.close()
    assert out.posts == ["Q3 digest: revenue 4.7 million."]
    assert (out.newsletter_quotes, out.accepted_for, out.stale_writes) == ("4.7", "v2", 0)
    assert out.model_calls == [(1, 0), (2, 1), (3, 2)]
    assert st is not None
    assert [e.step for e in st.journal if e.attempt == 1] == ["model:0"]
    assert [(e.step, e.attempt) for e in st.journal if e.attempt > 1] == [
        ("tool:1:call-read", 2), ("model:1", 2), ("model:2", 3), ("assembly", 3)]
    assert saver.carried_entries >= 1 and saver.flushed_entries == 0


class _Bindable(ReportModel):
    """The scene's model for an agent without outlive (which binds the tools on it)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


async def test_a_journaled_agent_commits_less_than_langgraph_alone(tmp_path: Path) -> None:
    """The same prebuilt agent, with and without ``journaled``/``outlive_tools``, on
    ``langgraph+sqlite``'s saver: the journaled one commits less often (each superstep's
    entries and update ride its checkpoint) - before, every model and tool call was a LangGraph invocation
    of its own with its own commits."""
    from langchain_core.messages import HumanMessage as H

    b = await outlive.open_backend(f"langgraph+sqlite:///{tmp_path / 'c.db'}")
    try:
        saver: Any = b.checkpointer  # type: ignore[attr-defined]
        saver.hold_seconds = saver.entry_seconds = 30.0   # only LangGraph's writes carry them
        seen: list[str] = []
        await saver.in_thread(lambda conn: conn.set_trace_callback(
            lambda sql: seen.append(sql) if sql.strip().upper() == "COMMIT" else None))
        scene = S.Scene(pause_attempt=None, die_after_post=None)

        @tool
        async def read_attachment(name: str) -> str:
            """Read one attachment of the ticket."""
            return "Revenue was 4.1 million."

        counts = []
        for n, wrap in enumerate((False, True)):
            model = _Bindable(calls=scene.model_calls)
            agent = create_react_agent(journaled(model) if wrap else model,
                                       outlive_tools([read_attachment]) if wrap
                                       else [read_attachment], checkpointer=saver)
            ctl = outlive.Controller(b)
            await ctl.open_work(f"w{n}")
            await ctl.publish(f"w{n}", "v1", {"ticket": "t"})
            worker = outlive.Worker(b, await ctl.admit(f"w{n}"), {"ticket": "t"})
            await worker.start()
            before = len(seen)
            from outlive_langgraph import run
            await run(agent, {"messages": [H("Write the Q3 digest.")]}, worker=worker,
                      config={"configurable": {"thread_id": f"t{n}"}})
            counts.append(len(seen) - before)
        st = await b.load("w1")
    finally:
        await b.close()
    assert st is not None and [e.step for e in st.journal][:2] == ["model:0", "tool:1:call-read"]
    plain, ours = counts
    assert ours < plain   # (13 and 8 today: the entries and each update ride the checkpoint)
