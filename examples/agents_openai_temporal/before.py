"""BEFORE: Temporal's OpenAI Agents SDK sample ``openai_agents/basic`` (the tools workflow and its
weather activity, from temporalio/samples-python, MIT licence), with the worker and client that
run it.

Only the model differs: the sample calls a hosted model; here the plugin's model provider is
Temporal's own ``TestModelProvider`` with a scripted model (a tool call, then the answer), so
the sample runs offline.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from agents import Agent, Runner
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.contrib import openai_agents as temporal_agents
from temporalio.contrib.openai_agents.testing import (
    ResponseBuilders,
    TestModel,
    TestModelProvider,
)
from temporalio.worker import Worker


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
class ToolsWorkflow:
    @workflow.run
    async def run(self, question: str) -> str:
        agent = Agent(
            name="Hello world",
            instructions="You are a helpful agent.",
            tools=[
                temporal_agents.workflow.activity_as_tool(
                    get_weather, start_to_close_timeout=timedelta(seconds=10)
                )
            ],
        )

        result = await Runner.run(agent, input=question)
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
    client = await Client.connect(address, plugins=[plugin])
    queue = f"tools-{uuid.uuid4().hex[:8]}"
    async with Worker(client, task_queue=queue, workflows=[ToolsWorkflow],
                      activities=[get_weather]):
        return await client.execute_workflow(ToolsWorkflow.run, "What is the weather in Tokyo?",
                                             id=f"tools-{queue}", task_queue=queue)
