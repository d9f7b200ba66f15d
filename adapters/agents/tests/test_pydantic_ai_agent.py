"""pydantic-ai's ``Agent`` in the article's situation, on the embedded ledger: one post, the
corrected figure, no stale write; model requests restored by conversation."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import agents_scene as S
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import outlive
from outlive.supervisor import AttemptContext
from outlive_agents import effect, operation_key, tool_operation_key
from outlive_agents.pydantic_ai import agent_attempt, current_worker


def report_model(scene: S.Scene) -> FunctionModel:
    """pydantic-ai's ``FunctionModel`` playing the scene's script (``scene.reply_for``)."""
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = sum(1 for m in messages if isinstance(m, ModelResponse))
        scene.model_calls.append((current_worker().attempt.number, turn))
        texts = [str(p.content) for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        text, call = S.reply_for(turn, texts)
        if call is None:
            return ModelResponse(parts=[TextPart(text)])
        return ModelResponse(parts=[ToolCallPart(call["name"], call["args"],
                                                 tool_call_id=call["id"])])

    return FunctionModel(reply)


def scene_attempt(scene: S.Scene) -> Any:
    agent = Agent(report_model(scene), name="digest")
    attempts: dict[str, AttemptContext] = {}

    @agent.tool_plain
    async def read_attachment(name: str) -> str:
        """Read one attachment of the ticket."""
        ctx = attempts["now"]
        return await scene.read(ctx.attempt.number, ctx.worker.work_id, ctx.inputs, name)

    @agent.tool_plain
    @effect
    async def post_digest(text: str) -> outlive.Receipt:
        """Post the digest to the announcement feed."""
        ctx = attempts["now"]
        return await scene.post(ctx.attempt.number, ctx.worker.work_id, operation_key(), text)

    run = agent_attempt(agent, prompt=lambda ctx: ctx.inputs["ticket"])

    async def attempt(ctx: AttemptContext) -> None:
        attempts["now"] = ctx      # (the tools are module-level, as in pydantic-ai's samples)
        await run(ctx)

    return attempt


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[outlive.Backend]:
    b = await outlive.open_backend(f"sqlite:///{tmp_path / 'o.db'}")
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
    assert out.model_calls == [(1, 0), (2, 1), (3, 2)]
    assert [a for a, _ in scene.tool_reads] == [1, 2]
    assert scene.late == ["#1 woke with 4.1"]
    st = await backend.load(S.WORK)
    assert st is not None
    assert [(e.op_key, e.state, e.attempt) for e in st.effects] == [
        (tool_operation_key(S.WORK, "v2", "post_digest", {"text": "Q3 digest: revenue 4.7 million."}),
         outlive.EffectState.CONFIRMED, 3)]
    assert [e.step for e in st.journal if e.attempt == 1] == ["model:0"]
    assert [(e.step, e.attempt) for e in st.journal if e.attempt > 1] == [
        ("tool:1:call-read", 2), ("model:1", 2), ("model:2", 3), ("assembly", 3)]


async def test_the_conversation_key_ignores_timestamps_and_run_ids(backend: outlive.Backend) -> None:
    """Two runs of one attempt's agent: the second restores all three requests (the messages'
    timestamps and run ids differ; what they say does not)."""
    scene = S.Scene(pause_attempt=None, die_after_post=None)
    out = await S.run_scene(backend, scene, scene_attempt(scene))
    assert out.model_calls == [(1, 0), (1, 1), (1, 2)]
    st = await backend.load(S.WORK)
    assert st is not None
    assert [e.step for e in st.journal] == ["model:0", "tool:1:call-read", "model:1", "model:2",
                                            "assembly"]
    assert out.posts == ["Q3 digest: revenue 4.1 million."]
