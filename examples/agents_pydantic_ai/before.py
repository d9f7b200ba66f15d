"""BEFORE: pydantic-ai's own dice-game sample (its documentation's tools example, MIT licence).

Only the model differs: the sample names a hosted model; here it is pydantic-ai's own
``TestModel`` (it calls every tool, then answers with their results), so it runs offline.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from pydantic_ai import Agent, RunContext
from pydantic_ai.models.test import TestModel

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


async def main() -> Any:
    dice_result = await agent.run("My guess is 4", deps="Anne")
    return dice_result.output


if __name__ == "__main__":
    print(asyncio.run(main()))
