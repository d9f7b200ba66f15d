"""AFTER: the same sample with outlive inside the workflow: the question is the work's input
version, the workflow's execution is the work's ledger, each model call and tool activity is a
journaled step of an attempt, and the answer is accepted for the version it was built from.

Only the model differs from Temporal's sample, as in ``before.py``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.contrib import openai_agents as temporal_agents
from temporalio.contrib.openai_agents.testing import (
    ResponseBuilders,
    TestModel,
    TestModelProvider,
)
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from agents import Agent

    from outlive_agents.openai_agents import OutliveAgentsPlugin, run_agent
    from outlive_temporal import Attempt, OutlivePlugin, Work, WorkHandle


@dataclass
class Weather:
    city: str
    temperature_range: str
    conditions: str


@activity.defn
async def get_weather(city: str) -> Weather:
    """
    Get the weather for a given city.
    """
    return Weather(city=city, temperature_range="14-20C", conditions="Sunny with wind.")


@workflow.defn
class ToolsWorkflow(Work):
    @workflow.run
    async def run(self, question: str) -> str:
        return await self.drive(self.attempt, {"question": question})

    async def attempt(self, a: Attempt, inputs: dict[str, str]) -> str:
        agent = Agent(
            name="Hello world",
            instructions="You are a helpful agent.",
            tools=[
                temporal_agents.workflow.activity_as_tool(
                    get_weather, start_to_close_timeout=timedelta(seconds=10)
                )
            ],
        )

        result = await run_agent(a, agent, inputs["question"], inputs=inputs)
        await a.accept({"answer": result.final_output})
        return result.final_output


def scripted_model() -> TestModel:
    return TestModel.returning_responses([
        ResponseBuilders.tool_call('{"city": "Tokyo"}', "get_weather", call_id="call-1"),
        ResponseBuilders.output_message("Sunny with wind in Tokyo, 14-20C."),
    ])


async def main(address: str) -> Any:
    plugin = temporal_agents.OpenAIAgentsPlugin(
        model_params=temporal_agents.ModelActivityParameters(
            start_to_close_timeout=timedelta(seconds=30)),
        model_provider=TestModelProvider(scripted_model()))
    client = await Client.connect(address, plugins=[plugin, OutlivePlugin(), OutliveAgentsPlugin()])
    queue = f"tools-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, workflows=[ToolsWorkflow],
                      activities=[get_weather]):
        work = await client.start_workflow(ToolsWorkflow.run, "What is the weather in Tokyo?",
                                           id=f"tools-{queue}", task_queue=queue)
        return await work.result(), await WorkHandle(work).ledger()
