"""outlive for agent frameworks: the five records on the loops people already run.

Each framework has its own module, imported on demand and guarded with its install line:
``outlive_agents.langgraph`` (LangGraph's prebuilt agent), ``outlive_agents.pydantic_ai``
(pydantic-ai's ``Agent``), ``outlive_agents.openai_agents`` (the OpenAI Agents SDK on Temporal)
and ``outlive_agents.judge`` (an agent as the assessor). What they share lives here: a model
call is a step keyed by the conversation so far, a read-only tool a step keyed by its arguments
and the parts it reads, a tool marked with :func:`effect` an operation-keyed effect whose key
(:func:`tool_operation_key`) comes from the work, the pinned version and the call's arguments.
"""

from __future__ import annotations

from ._records import (
    effect,
    effect_receipt,
    effect_tool_call,
    is_marked_effect,
    jsonable,
    model_step,
    operation_key,
    read_tool_step,
    tool_operation_key,
)

__all__ = [
    "effect",
    "effect_receipt",
    "effect_tool_call",
    "is_marked_effect",
    "jsonable",
    "model_step",
    "operation_key",
    "read_tool_step",
    "tool_operation_key",
]
