"""AFTER: the same sample on outlive: the question is a published version, the supervisor runs
each attempt, every model and tool call is journaled, the answer is a candidate it accepts.

Only the model differs from LangGraph's sample, as in ``before.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import create_react_agent

import outlive
from outlive_agents.langgraph import agent_attempt, journaled, outlive_tools


class FakeModel(GenericFakeChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self   # the fake takes no schemas; the replies below name the tool


def fake_model() -> FakeModel:
    return FakeModel(messages=iter([
        AIMessage(content="", tool_calls=[{"name": "get_weather", "args": {"city": "sf"},
                                           "id": "call-1", "type": "tool_call"}]),
        AIMessage(content="It's always sunny in sf!"),
    ]))


def get_weather(city: str) -> str:
    """Get weather for a given city."""
    return f"It's always sunny in {city}!"


agent = create_react_agent(
    model=journaled(fake_model()),
    tools=outlive_tools([get_weather]),
    prompt="You are a helpful assistant",
    checkpointer=InMemorySaver(),
)

work = outlive.WorkDefinition(
    work_id="question/weather-sf", contract=outlive.Contract(name="answered", version="1",
                                                            assessor="any"),
    attempt=agent_attempt(lambda ctx: agent, input=lambda ctx: {"messages": [
        {"role": "user", "content": ctx.inputs["question"]}]}),
    inputs=lambda version: {"question": "what is the weather in sf"})


async def main(url: str = "sqlite:///weather.db") -> Any:
    backend = await outlive.open_backend(url)
    async with outlive.Supervisor(backend, work) as sup:
        await sup.publish("v1", {"question": "what is the weather in sf"})
        done = await sup.run()
    state = await backend.load(work.work_id)
    await backend.close()
    return done, state


if __name__ == "__main__":
    done, state = asyncio.run(main())
    print(state.candidate(done.acceptance.digest).content["answer"])
