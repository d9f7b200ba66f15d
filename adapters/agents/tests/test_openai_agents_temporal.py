"""The OpenAI Agents SDK on Temporal (``temporalio.contrib.openai_agents``) in the article's
situation, with outlive's plugin beside ``OpenAIAgentsPlugin``: one post, the corrected figure,
no stale write; model calls restored by conversation on a real dev server."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import agents_scene as S
import agents_temporal_app as app
import pytest
from agents import Model, set_tracing_disabled
from temporalio.client import Client
from temporalio.contrib.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.contrib.openai_agents.testing import TestModelProvider
from temporalio.worker import Worker

from outlive_agents import tool_operation_key
from outlive_agents.openai_agents import OutliveAgentsPlugin
from outlive_temporal import DevServer, OutlivePlugin, WorkHandle


class ScriptModel(Model):
    """A scripted openai-agents ``Model`` (it runs in the model activity): ``scene.reply_for``."""

    def __init__(self, world: app.World) -> None:
        self.world = world

    async def get_response(self, system_instructions: Any, input: Any, *args: Any,
                           **kwargs: Any) -> Any:
        return app.reply(self.world, input)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@pytest.fixture(scope="module")
def server() -> Iterator[DevServer]:
    with DevServer() as srv:
        yield srv


async def test_agent_on_temporal_posts_once_and_quotes_the_correction(server: DevServer) -> None:
    set_tracing_disabled(True)    # offline: no trace export
    world = app.WORLD = app.World()
    plugins = [OpenAIAgentsPlugin(model_params=ModelActivityParameters(
                   start_to_close_timeout=timedelta(seconds=30)),
                   model_provider=TestModelProvider(ScriptModel(world))),
               OutlivePlugin(), OutliveAgentsPlugin()]
    client = await Client.connect(server.address, plugins=plugins)
    queue = f"tickets-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, workflows=[app.TicketWorkflow],
                      activities=[app.read_attachment, app.post_digest]):
        work = await client.start_workflow(app.TicketWorkflow.run, S.V1, id=f"{S.WORK}@{queue}",
                                           task_queue=queue)
        await asyncio.wait_for(world.paused.wait(), 60)
        world.report = S.V2["report"]                      # the ticket system has the correction
        await WorkHandle(work).publish("v2", S.V2)         # and the work its new version
        answer = await asyncio.wait_for(work.result(), 60)
        world.wake.set()                                    # #1 wakes: Temporal refuses it
        state = await WorkHandle(work).ledger()
        dep = await WorkHandle(work).dependable("strict")
    assert world.feed.posts == ["Q3 digest: revenue 4.7 million."]
    assert dep is not None and S.figure(dep.content["answer"]) == "4.7"
    assert answer == "Posted P1: Q3 revenue was 4.7 million."
    assert state.acceptances[-1].version == "v2"
    assert state.stale_writes_applied == 0
    assert [(a.number, a.pinned_version, a.state.value) for a in state.attempts] == [
        (1, "v1", "unknown"), (2, "v2", "finished")]
    # #2 restored the first model call (the ticket alone); Temporal retried the post's activity,
    # and the feed answered the retry "already seen"
    assert world.model_calls == [(1, 0), (2, 1), (2, 2)]
    assert [n for n, _ in world.reads] == [1, 2]
    assert [(e.op_key, e.state.value) for e in state.effects] == [
        (tool_operation_key(f"{S.WORK}@{queue}", "v2", "post_digest",
                            ["Q3 digest: revenue 4.7 million."]), "confirmed")]
    assert [e.step for e in state.journal if e.attempt == 1] == ["model:0"]
    assert [e.step for e in state.journal if e.attempt == 2] == [
        "tool:1:0:read_attachment", "model:1", "model:2", "assembly"]
