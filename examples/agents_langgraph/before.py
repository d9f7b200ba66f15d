"""BEFORE: LangGraph's own prebuilt-agent sample (its README's quickstart, MIT licence).

Only the model differs: the sample names a hosted model; here it is LangChain's own
``GenericFakeChatModel`` playing the two replies the hosted model gives (a tool call, then the
answer), so the sample runs offline.
"""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langgraph.prebuilt import create_react_agent


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
    model=fake_model(),
    tools=[get_weather],
    prompt="You are a helpful assistant",
)


async def main() -> Any:
    return await agent.ainvoke({"messages": [{"role": "user", "content": "what is the weather in sf"}]})


if __name__ == "__main__":
    print(asyncio.run(main())["messages"][-1].content)
