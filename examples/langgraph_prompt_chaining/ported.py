# LangGraph's prompt-chaining tutorial ("Workflows and agents", Prompt chaining), as its
# documentation gives it. Copyright (c) LangChain, Inc.; MIT License. Changed only where it must
# run offline: ``llm`` is a stand-in (see _model.py) and the graph drawing is left out.
# ruff: noqa  (kept in the documentation's own style, so that the port's diff stays the port)
# Ported to outlive: each model call is a durable step, the run a work in outlive's runtime.
import asyncio
import sys

from typing_extensions import TypedDict
from langgraph.graph import StateGraph, START, END

import outlive
from outlive_langgraph import graph_attempt, outlive_node
from examples.langgraph_prompt_chaining._model import llm


# Graph state
class State(TypedDict):
    topic: str
    joke: str
    improved_joke: str
    final_joke: str


# Nodes
@outlive_node(inputs=("topic",))
def generate_joke(state: State):
    """First LLM call to generate initial joke"""

    msg = llm.invoke(f"Write a short joke about {state['topic']}")
    return {"joke": msg.content}


def check_punchline(state: State):
    """Gate function to check if the joke has a punchline"""

    # Simple check - does the joke contain "?" or "!"
    if "?" in state["joke"] or "!" in state["joke"]:
        return "Pass"
    return "Fail"


@outlive_node(inputs=("joke",), external=("joke",))
def improve_joke(state: State):
    """Second LLM call to improve the joke"""

    msg = llm.invoke(f"Make this joke funnier by adding wordplay: {state['joke']}")
    return {"improved_joke": msg.content}


@outlive_node(inputs=("improved_joke",), external=("improved_joke",))
def polish_joke(state: State):
    """Third LLM call for final polish"""

    msg = llm.invoke(f"Add a surprising twist to this joke: {state['improved_joke']}")
    return {"final_joke": msg.content}


# Build workflow
workflow = StateGraph(State)

# Add nodes
workflow.add_node("generate_joke", generate_joke)
workflow.add_node("improve_joke", improve_joke)
workflow.add_node("polish_joke", polish_joke)

# Add edges to connect nodes
workflow.add_edge(START, "generate_joke")
workflow.add_conditional_edges(
    "generate_joke", check_punchline, {"Fail": "improve_joke", "Pass": END}
)
workflow.add_edge("improve_joke", "polish_joke")
workflow.add_edge("polish_joke", END)

# Compile, once per attempt, on the work's own checkpointer
chain = graph_attempt(lambda ctx: workflow.compile(checkpointer=ctx.worker.backend.checkpointer),
                      input=lambda ctx: ctx.inputs, candidate=lambda state: state)


async def main(url: str) -> dict:
    kind = outlive.Kind(name="joke", attempt=chain, contract=outlive.Contract(name="joke", version="1", assessor="none"))
    async with outlive.Runtime(url, kinds=[kind]) as rt:
        await (await rt.start(kind, "jokes/cats", "v1", {"topic": "cats"})).result()
        return (await rt.backend.load("jokes/cats")).candidates[-1].content


# Invoke
state = asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "langgraph+sqlite:///jokes.db"))
print("Initial joke:")
print(state["joke"])
print("\n--- --- ---\n")
if "improved_joke" in state:
    print("Improved joke:")
    print(state["improved_joke"])
    print("\n--- --- ---\n")

    print("Final joke:")
    print(state["final_joke"])
else:
    print("Joke failed quality gate - no punchline detected!")
