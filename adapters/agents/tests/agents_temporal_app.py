"""The ticket agent as a Temporal user writes it with the OpenAI Agents SDK integration: the
workflow (extending ``outlive_temporal.Work``), its two tool activities, and the world they act
on (the ticket system, the feed) for the article's scene."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow

with workflow.unsafe.imports_passed_through():
    import agents_scene as S
    from agents import Agent
    from temporalio.contrib.openai_agents import workflow as agents_workflow

    import outlive
    from outlive_agents import operation_key
    from outlive_agents.openai_agents import run_agent
    from outlive_temporal import Attempt, Work, current_attempt


@dataclass
class World:
    """The ticket system (it serves the ticket's current attachment), the feed, the scene."""

    report: str = S.V1["report"]
    feed: S.Feed = field(default_factory=S.Feed)
    model_calls: list[tuple[int, int]] = field(default_factory=list)
    reads: list[tuple[int, str]] = field(default_factory=list)
    paused: asyncio.Event = field(default_factory=asyncio.Event)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    die_after_post: bool = True


WORLD = World()


@activity.defn
async def read_attachment(name: str) -> str:
    """Read one attachment of the ticket."""
    number = current_attempt().attempt
    WORLD.reads.append((number, WORLD.report[:24]))
    if not WORLD.paused.is_set():
        WORLD.paused.set()
        await WORLD.wake.wait()       # the worker is paused: no heartbeat, no result
    return WORLD.report


@activity.defn
async def post_digest(text: str) -> str:
    """Post the digest to the announcement feed."""
    receipt = WORLD.feed.post(operation_key(), text)
    if WORLD.die_after_post:
        WORLD.die_after_post = False
        raise RuntimeError("the worker died just after the feed applied the post")
    return receipt.effect_id


def tools() -> list[Any]:
    opts: dict[str, Any] = {"start_to_close_timeout": timedelta(seconds=30)}
    return [agents_workflow.activity_as_tool(read_attachment, **opts),
            agents_workflow.activity_as_tool(post_digest, **opts)]


@workflow.defn
class TicketWorkflow(Work):
    outlive_heartbeat = timedelta(seconds=4)   # a step silent this long is taken over

    @workflow.run
    async def run(self, ticket: dict[str, str]) -> str:
        return await self.drive(self.attempt, ticket)

    async def attempt(self, a: Attempt, ticket: dict[str, str]) -> str:
        agent = Agent(name="digest", instructions="Write and post the Q3 digest.", tools=tools())
        result = await run_agent(a, agent, ticket["ticket"], inputs=ticket,
                                 effects=["post_digest"])
        await a.accept({"answer": result.final_output})
        return str(result.final_output)


def reply(world: World, input: Any) -> Any:
    """The scene's script (``scene.reply_for``) as an openai-agents ``ModelResponse``."""
    from temporalio.contrib.openai_agents.testing import ResponseBuilders

    items = input if isinstance(input, list) else []
    turn = sum(1 for i in items if isinstance(i, dict) and i.get("type") == "function_call")
    world.model_calls.append((current_attempt().attempt, turn))
    texts = [str(i.get("output")) for i in items
             if isinstance(i, dict) and i.get("type") == "function_call_output"]
    text, call = S.reply_for(turn, texts)
    if call is None:
        return ResponseBuilders.output_message(text)
    return ResponseBuilders.tool_call(json.dumps(call["args"]), call["name"], call_id=call["id"])


def receipt_of(world: World) -> list[str]:
    return list(world.feed.posts)


__all__ = ["WORLD", "TicketWorkflow", "World", "outlive", "post_digest", "read_attachment",
           "reply"]
