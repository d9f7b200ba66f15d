"""A judge as the assessor: another agent's model call, its version part of the contract, its
verdict recorded as the acceptance."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import agents_scene as S
import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from test_pydantic_ai_agent import scene_attempt

import outlive
from outlive import ledger as L
from outlive_agents.judge import Judge, ask_agent, parse_verdict


def editor(calls: list[str], *, version: str = "2", strict: bool = False) -> Judge:
    """A judge played by pydantic-ai's FunctionModel: it reads the ticket's report and the answer
    and passes the answer only if it quotes the report's figure (``strict``: and the costs)."""
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = next(str(p.content) for m in messages if isinstance(m, ModelRequest)
                      for p in m.parts if isinstance(p, UserPromptPart))
        shown = json.loads(prompt[prompt.index("{"):])
        calls.append(shown["version"])
        answer, report = shown["answer"]["answer"], shown["inputs"]["report"]
        if strict and "cost" not in answer.lower():
            return ModelResponse(parts=[TextPart("FAIL: the answer leaves out the costs")])
        if S.figure(answer) != S.figure(report):
            return ModelResponse(parts=[TextPart("FAIL: the figure is not the report's")])
        return ModelResponse(parts=[TextPart(f"PASS: quotes {S.figure(report)} million")])

    return Judge(name="editor", version=version, ask=ask_agent(Agent(FunctionModel(reply))),
                 instructions="PASS if the answer quotes the report's revenue figure.",
                 inputs=S.inputs)


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[outlive.Backend]:
    b = await outlive.open_backend(f"sqlite:///{tmp_path / 'o.db'}")
    try:
        yield b
    finally:
        await b.close()


async def test_the_judges_verdict_is_the_acceptance_for_the_corrected_version(
        backend: outlive.Backend) -> None:
    scene, judged = S.Scene(), []
    judge = editor(judged)
    out = await S.run_scene(backend, scene, scene_attempt(scene), assessor=judge,
                            contract=judge.contract("digest-posted", "1"))
    assert out.accepted_for == "v2" and out.newsletter_quotes == "4.7"
    assert judged == ["v2"], "one judge call: the only candidate was #3's, for v2"
    assert out.model_calls == [(1, 0), (2, 1), (3, 2)]
    st = await backend.load(S.WORK)
    assert st is not None and st.latest_acceptance is not None
    acc = st.latest_acceptance
    assert acc.contract == outlive.Contract(name="digest-posted", version="1+judge:editor@2",
                                            assessor="judge:editor@2")
    assert acc.note == "judge:editor@2: quotes 4.7 million"
    # a retuned judge is another contract: the old judge's acceptance is not the new one's
    retuned = editor([], version="3").contract("digest-posted", "1")
    assert L.accepted(st, acc.digest, retuned) is None
    assert L.accepted(st, acc.digest, judge.contract("digest-posted", "1")) == acc


async def test_a_refusing_judge_accepts_nothing_and_the_post_is_not_repeated(
        backend: outlive.Backend) -> None:
    """Each successor restores every model call (same conversation) and settles the post by its
    key; the judge refuses each candidate; the supervisor gives up, naming the version."""
    scene, judged = S.Scene(pause_attempt=None, die_after_post=None), []
    judge = editor(judged, strict=True)
    with pytest.raises(outlive.errors.GaveUp, match="v1"):
        await S.run_scene(backend, scene, scene_attempt(scene), assessor=judge,
                          contract=judge.contract("digest-posted", "1"), max_attempts=2)
    # #1's candidate was refused; #2's (the same answer, every call restored) too, unless the
    # cap was reached first
    assert judged[0] == "v1" and set(judged) == {"v1"}
    assert scene.model_calls == [(1, 0), (1, 1), (1, 2)], "#2 called the model for nothing"
    assert scene.feed.posts == ["Q3 digest: revenue 4.1 million."]
    st = await backend.load(S.WORK)
    assert st is not None and st.acceptances == ()
    assert [e.state for e in st.effects] == [outlive.EffectState.CONFIRMED]


@pytest.mark.parametrize(("reply", "verdict"), [
    ("PASS: quotes 4.7 million", (True, "quotes 4.7 million")),
    ("fail - stale figure", (False, "stale figure")),
    ('{"pass": true, "reason": "fine"}', (True, "fine")),
    ("I think it is good", (False, "the judge gave no verdict: 'I think it is good'")),
])
def test_a_reply_that_is_no_verdict_accepts_nothing(reply: str, verdict: tuple[bool, str]) -> None:
    assert parse_verdict(reply) == verdict


def test_a_judge_without_a_version_is_refused() -> None:
    with pytest.raises(outlive.errors.ConfigError):
        Judge(name="editor", version="", ask=lambda p: "PASS", instructions="")


async def test_an_agent_kind_with_its_judge_runs_under_the_runtime(tmp_path: Path) -> None:
    """The same attempt function and judge as a kind of work of ``outlive.Runtime``."""
    scene, judged = S.Scene(pause_attempt=None, die_after_post=None), []
    judge = editor(judged)
    kind = outlive.Kind(name="ticket-digest", attempt=scene_attempt(scene),
                        contract=judge.contract("digest-posted", "1"), assessor=judge,
                        inputs=S.inputs, lease=S.LEASE)
    async with outlive.Runtime(f"sqlite:///{tmp_path / 'rt.db'}", kinds=[kind],
                               discover=None) as rt:
        handle = await rt.start(kind, S.WORK, "v1", S.V1)
        done = await asyncio.wait_for(handle.result(), 60)
    assert done.acceptance.version == "v1"
    assert done.acceptance.note == "judge:editor@2: quotes 4.1 million"
    assert judged == ["v1"]
    assert scene.model_calls == [(1, 0), (1, 1), (1, 2)]
    assert scene.feed.posts == ["Q3 digest: revenue 4.1 million."]
