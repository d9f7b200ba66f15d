# LangGraph's approve/reject example (human-in-the-loop guide, "Approve or reject", extended
# example), as its documentation gives it. Copyright (c) LangChain, Inc.; MIT License.
# ruff: noqa  (kept in the documentation's own style, so that the port's diff stays the port)
# Ported to outlive: the person answers from another process (``... URL approve``), hours later.
from typing import Literal, TypedDict
import asyncio, sys

from langgraph.constants import START, END
from langgraph.graph import StateGraph
from langgraph.types import interrupt, Command
import outlive
from outlive_langgraph import invoke_work, outlive_node

# Define the shared graph state
class State(TypedDict):
    llm_output: str
    decision: str

# Simulate an LLM output node
@outlive_node(inputs=())   # the model call: a durable, fenced step
def generate_llm_output(state: State) -> State:
    return {"llm_output": "This is the generated output."}

# Human approval node
def human_approval(state: State) -> Command[Literal["approved_path", "rejected_path"]]:
    decision = interrupt({
        "question": "Do you approve the following output?",
        "llm_output": state["llm_output"]
    })

    if decision == "approve":
        return Command(goto="approved_path", update={"decision": "approved"})
    else:
        return Command(goto="rejected_path", update={"decision": "rejected"})

# Next steps after approval
def approved_node(state: State) -> State:
    print("✅ Approved path taken.")
    return state

# Alternative path after rejection
def rejected_node(state: State) -> State:
    print("❌ Rejected path taken.")
    return state

# Build the graph
builder = StateGraph(State)
builder.add_node("generate_llm_output", generate_llm_output)
builder.add_node("human_approval", human_approval)
builder.add_node("approved_path", approved_node)
builder.add_node("rejected_path", rejected_node)

builder.set_entry_point("generate_llm_output")
builder.add_edge("generate_llm_output", "human_approval")
builder.add_edge("approved_path", END)
builder.add_edge("rejected_path", END)

async def main(url, answer=None):
    async with await outlive.open_backend(url) as backend:
        graph = builder.compile(checkpointer=backend.checkpointer)
        # Run until interrupt and exit; later, in another process, resume with the human's input
        result = await invoke_work(backend, graph, Command(resume=answer) if answer else {}, work_id="approval-1",
                                   parts={"request": "approve the output"}, contract=CONTRACT, announce=announce)
        print(result.get("__interrupt__") or result)

CONTRACT = outlive.Contract(name="approved", version="1", assessor="a person")
announce = lambda key, decision: outlive.SqliteReceiver("feed.db").receive(key, decision, lambda conn, d: d["decision"])
asyncio.run(main(*sys.argv[1:]))
