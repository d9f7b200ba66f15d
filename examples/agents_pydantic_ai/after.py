"""AFTER: the same sample on outlive: the guess is a published version, the supervisor runs each
attempt, every model request and tool call is journaled (a successor restores the die's roll, it
does not roll again), the answer is a candidate the supervisor accepts.

Only the model differs from pydantic-ai's sample, as in ``before.py``.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.models.test import TestModel

import outlive
from outlive_agents.pydantic_ai import agent_attempt

agent = Agent(
    TestModel(),
    deps_type=str,
    instructions=(
        "You're a dice game, you should roll the die and see if the number "
        "you get back matches the user's guess. If so, tell them they're a winner. "
        "Use the player's name in the response."
    ),
)


@agent.tool_plain
def roll_dice() -> str:
    """Roll a six-sided die and return the result."""
    return str(random.randint(1, 6))


@agent.tool
def get_player_name(ctx: RunContext[str]) -> str:
    """Get the player's name."""
    return ctx.deps


work = outlive.WorkDefinition(
    work_id="dice/anne", contract=outlive.Contract(name="answered", version="1", assessor="any"),
    attempt=agent_attempt(agent, prompt=lambda ctx: ctx.inputs["guess"], deps=lambda ctx: "Anne"),
    inputs=lambda version: {"guess": "My guess is 4"})


async def main(url: str = "sqlite:///dice.db") -> Any:
    backend = await outlive.open_backend(url)
    async with outlive.Supervisor(backend, work) as sup:
        await sup.publish("v1", {"guess": "My guess is 4"})
        done = await sup.run()
    state = await backend.load(work.work_id)
    await backend.close()
    return done, state


if __name__ == "__main__":
    done, state = asyncio.run(main())
    print(state.candidate(done.acceptance.digest).content["answer"])
