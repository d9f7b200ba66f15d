"""Per model call: an agent with outlive's records against the framework's own durable baseline.

Side by side, alternating in rounds, the same agent and fake model (a read-only tool called
``--turns`` times, then an answer):

- LangGraph: ``create_react_agent`` with an ``AsyncSqliteSaver`` (the checkpointer alone) vs the
  same agent with ``journaled(model)`` and ``outlive_tools`` on a ``sqlite://`` ledger beside it
  (each model call and tool call one journaled step);
- pydantic-ai: ``DBOSAgent`` (pydantic-ai's durable agent, DBOS on SQLite) vs the same agent
  under ``outlive_overrides`` on a ``sqlite://`` ledger;
- the OpenAI Agents SDK on Temporal: a workflow running the agent with ``OpenAIAgentsPlugin``
  alone (each model call and tool call an activity) vs the same workflow extending
  ``outlive_temporal.Work`` with ``run_agent`` and ``OutliveAgentsPlugin`` (a dev server).

Reported: microseconds per model call (median of each round's runs) and the ratio
outlive / baseline per round (target <= 1.10). Run: ``make bench-agents``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

from agents import Agent, Model, Runner
from temporalio import activity, workflow
from temporalio.contrib import openai_agents as temporal_agents
from temporalio.contrib.openai_agents.testing import ResponseBuilders

import outlive
from outlive_agents.openai_agents import run_agent
from outlive_temporal import Attempt, Work

warnings.filterwarnings("ignore", category=DeprecationWarning)
# DBOSAgent warns that it is being replaced by the DBOSDurability capability; it is the durable
# agent pydantic-ai documents today, and what this benchmark compares against.
warnings.filterwarnings("ignore", message=".*DBOSAgent.*")

TEXT = "Revenue was 4.7 million for the quarter."


async def _attempt(backend: outlive.Backend, work: str) -> outlive.Worker:
    """A fresh work with one admitted, started attempt (what the supervisor would hand over)."""
    ctl = outlive.Controller(backend)
    await ctl.open_work(work)
    await ctl.publish(work, "v1", {"report": TEXT})
    att = await ctl.admit(work, request_id=f"{work}-1")
    worker = outlive.Worker(backend, att, {"report": TEXT})
    await worker.start()
    return worker


# -- LangGraph ---------------------------------------------------------------------------------
def _lg_model(turns: int) -> Any:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    class Script(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "script"

        def bind_tools(self, tools: Any, **kw: Any) -> Any:
            return self

        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None,
                      **kw: Any) -> ChatResult:
            turn = sum(1 for m in messages if isinstance(m, AIMessage))
            if turn < turns:
                reply = AIMessage(content="", tool_calls=[{"name": "read_attachment", "type": "tool_call",
                                                           "args": {"name": "report"}, "id": f"c{turn}"}])
            else:
                reply = AIMessage(content="Q3 revenue was 4.7 million.")
            return ChatResult(generations=[ChatGeneration(message=reply)])

    return Script()


async def _langgraph(tmp: Path, turns: int, runs: int, ours: bool, seq: list[int]) -> list[float]:
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.prebuilt import create_react_agent

    from outlive_agents.langgraph import journaled, outlive_tools
    from outlive_langgraph import run

    @tool
    def read_attachment(name: str) -> str:
        """Read one attachment of the ticket."""
        return TEXT

    model = _lg_model(turns)
    out = []
    async with AsyncSqliteSaver.from_conn_string(str(tmp / "lg.db")) as saver:
        backend = await outlive.open_backend(f"sqlite:///{tmp / 'o.db'}") if ours else None
        if ours:
            agent = create_react_agent(journaled(model), outlive_tools([read_attachment]),
                                       checkpointer=saver)
        else:
            agent = create_react_agent(model, [read_attachment], checkpointer=saver)
        try:
            for _ in range(runs):
                seq[0] += 1
                cfg: Any = {"configurable": {"thread_id": f"t{seq[0]}"}}
                prompt = {"messages": [HumanMessage("Write the Q3 digest.")]}
                if backend is not None:
                    worker = await _attempt(backend, f"w{seq[0]}")
                    t0 = time.perf_counter()
                    await run(agent, prompt, worker=worker, config=cfg)
                else:
                    t0 = time.perf_counter()
                    await agent.ainvoke(prompt, cfg)
                out.append((time.perf_counter() - t0) / (turns + 1))
        finally:
            if backend is not None:
                await backend.close()
    return out


# -- pydantic-ai -------------------------------------------------------------------------------
def _pa_agent(turns: int, name: str) -> Any:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    def reply(messages: Any, info: Any) -> ModelResponse:
        turn = sum(1 for m in messages if isinstance(m, ModelResponse))
        if turn < turns:
            return ModelResponse(parts=[ToolCallPart("read_attachment", {"name": "report"},
                                                     tool_call_id=f"c{turn}")])
        return ModelResponse(parts=[TextPart("Q3 revenue was 4.7 million.")])

    agent = Agent(FunctionModel(reply), name=name)

    @agent.tool_plain
    def read_attachment(name: str) -> str:
        """Read one attachment of the ticket."""
        return TEXT

    return agent


async def _pydantic_ai_ours(tmp: Path, turns: int, runs: int, seq: list[int]) -> list[float]:
    from outlive_agents.pydantic_ai import outlive_overrides

    agent = _pa_agent(turns, "ours")
    backend = await outlive.open_backend(f"sqlite:///{tmp / 'pa.db'}")
    out = []
    try:
        for _ in range(runs):
            seq[0] += 1
            worker = await _attempt(backend, f"p{seq[0]}")
            t0 = time.perf_counter()
            with outlive_overrides(agent, worker=worker):
                await agent.run("Write the Q3 digest.")
            out.append((time.perf_counter() - t0) / (turns + 1))
    finally:
        await backend.close()
    return out


class _Dbos:
    """One DBOS launch for the whole benchmark (DBOS is a process-wide singleton)."""

    def __init__(self, tmp: Path, turns: int) -> None:
        from dbos import DBOS, DBOSConfig
        from pydantic_ai.durable_exec.dbos import DBOSAgent

        config: DBOSConfig = {"name": "bench-agents",
                              "system_database_url": f"sqlite:///{tmp / 'dbos.db'}",
                              "log_level": "WARNING",
                              "run_admin_server": False}  # type: ignore[typeddict-unknown-key]
        DBOS(config=config)
        self.agent = DBOSAgent(_pa_agent(turns, "baseline"))
        DBOS.launch()
        self.turns = turns

    async def runs(self, runs: int) -> list[float]:
        out = []
        for _ in range(runs):
            t0 = time.perf_counter()
            await self.agent.run("Write the Q3 digest.")
            out.append((time.perf_counter() - t0) / (self.turns + 1))
        return out

    def close(self) -> None:
        from dbos import DBOS

        DBOS.destroy()

# -- the OpenAI Agents SDK on Temporal ---------------------------------------------------------
@activity.defn
async def read_attachment(name: str) -> str:
    """Read one attachment of the ticket."""
    return TEXT


def _agent() -> Any:
    return Agent(name="digest", instructions="Write the Q3 digest.", tools=[
        temporal_agents.workflow.activity_as_tool(
            read_attachment, start_to_close_timeout=timedelta(seconds=30))])


@workflow.defn(name="BaselineAgent")
class BaselineAgent:
    @workflow.run
    async def run(self, question: str) -> str:
        result = await Runner.run(_agent(), input=question)
        return str(result.final_output)


@workflow.defn(name="OutliveAgent")
class OutliveAgent(Work):
    @workflow.run
    async def run(self, question: str) -> str:
        return await self.drive(self.attempt, {"question": question})

    async def attempt(self, a: Attempt, inputs: dict[str, str]) -> str:
        result = await run_agent(a, _agent(), inputs["question"], inputs=inputs)
        await a.accept({"answer": result.final_output})
        return str(result.final_output)


class _Script(Model):
    """Calls the tool ``turns`` times, then answers (in the model activity)."""

    def __init__(self, turns: int) -> None:
        self.turns = turns

    async def get_response(self, system_instructions: Any, input: Any, *args: Any,
                           **kwargs: Any) -> Any:
        items = input if isinstance(input, list) else []
        turn = sum(1 for i in items if isinstance(i, dict) and i.get("type") == "function_call")
        if turn < self.turns:
            return ResponseBuilders.tool_call('{"name": "report"}', "read_attachment",
                                              call_id=f"c{turn}")
        return ResponseBuilders.output_message("Q3 revenue was 4.7 million.")

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def _temporal_parts(turns: int) -> dict[str, Any]:
    return {"baseline": BaselineAgent, "ours": OutliveAgent, "activity": read_attachment,
            "model": _Script(turns)}


class _Temporal:
    """A dev server, one client with both plugins' sets, one worker for both workflows."""

    def __init__(self, tmp: Path, turns: int) -> None:
        self.tmp, self.turns = tmp, turns
        self.parts = _temporal_parts(turns)

    async def __aenter__(self) -> _Temporal:
        from datetime import timedelta

        from agents import set_tracing_disabled
        from temporalio.client import Client
        from temporalio.contrib.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
        from temporalio.contrib.openai_agents.testing import TestModelProvider
        from temporalio.worker import UnsandboxedWorkflowRunner, Worker

        from outlive_agents.openai_agents import OutliveAgentsPlugin
        from outlive_temporal import DevServer, OutlivePlugin

        set_tracing_disabled(True)
        self.server = DevServer(self.tmp / "temporal")
        self.server.__enter__()
        plugin = OpenAIAgentsPlugin(model_params=ModelActivityParameters(
            start_to_close_timeout=timedelta(seconds=30)),
            model_provider=TestModelProvider(self.parts["model"]))
        self.client = await Client.connect(
            self.server.address, plugins=[plugin, OutlivePlugin(), OutliveAgentsPlugin()])
        self.worker = Worker(self.client, task_queue="bench-agents",
                             workflows=[self.parts["baseline"], self.parts["ours"]],
                             activities=[self.parts["activity"]],
                             workflow_runner=UnsandboxedWorkflowRunner())
        await self.worker.__aenter__()
        return self

    async def runs(self, runs: int, ours: bool, seq: list[int]) -> list[float]:
        workflow = self.parts["ours" if ours else "baseline"]
        out = []
        for _ in range(runs):
            seq[0] += 1
            t0 = time.perf_counter()
            await self.client.execute_workflow(workflow.run, "Write the Q3 digest.",
                                               id=f"t{seq[0]}", task_queue="bench-agents")
            out.append((time.perf_counter() - t0) / (self.turns + 1))
        return out

    async def __aexit__(self, *exc: object) -> None:
        await self.worker.__aexit__(None, None, None)
        self.server.__exit__(None, None, None)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=20, help="agent runs per side per round")
    ap.add_argument("--turns", type=int, default=8, help="tool turns per run (model calls - 1)")
    ap.add_argument("--temporal-runs", type=int, default=5,
                    help="workflow runs per side per round on Temporal")
    ap.add_argument("--skip-temporal", action="store_true")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    rows: dict[str, list[dict[str, float]]] = {"langgraph": [], "pydantic-ai": [],
                                               "openai-agents-temporal": []}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        seq = [0]
        dbos = _Dbos(tmp, args.turns)
        try:
            # one warm-up round, not reported
            await _langgraph(tmp, args.turns, 3, False, seq)
            await _langgraph(tmp, args.turns, 3, True, seq)
            await dbos.runs(3)
            await _pydantic_ai_ours(tmp, args.turns, 3, seq)
            for r in range(args.rounds):
                order = (False, True) if r % 2 == 0 else (True, False)
                got = {o: statistics.median(await _langgraph(tmp, args.turns, args.runs, o, seq))
                       for o in order}
                rows["langgraph"].append({"baseline_us": got[False] * 1e6,
                                          "outlive_us": got[True] * 1e6,
                                          "ratio": got[True] / got[False]})
                if r % 2 == 0:
                    base = statistics.median(await dbos.runs(args.runs))
                    ours = statistics.median(await _pydantic_ai_ours(tmp, args.turns, args.runs, seq))
                else:
                    ours = statistics.median(await _pydantic_ai_ours(tmp, args.turns, args.runs, seq))
                    base = statistics.median(await dbos.runs(args.runs))
                rows["pydantic-ai"].append({"baseline_us": base * 1e6, "outlive_us": ours * 1e6,
                                            "ratio": ours / base})
        finally:
            dbos.close()
        if not args.skip_temporal:
            async with _Temporal(tmp, args.turns) as temporal:
                await temporal.runs(2, False, seq)
                await temporal.runs(2, True, seq)
                for r in range(args.rounds):
                    order = (False, True) if r % 2 == 0 else (True, False)
                    got = {o: statistics.median(await temporal.runs(args.temporal_runs, o, seq))
                           for o in order}
                    rows["openai-agents-temporal"].append(
                        {"baseline_us": got[False] * 1e6, "outlive_us": got[True] * 1e6,
                         "ratio": got[True] / got[False]})
    names = {"langgraph": "LangGraph create_react_agent: AsyncSqliteSaver alone vs + outlive",
             "pydantic-ai": "pydantic-ai Agent: DBOSAgent (SQLite) vs outlive (sqlite://)",
             "openai-agents-temporal": "OpenAI Agents SDK on Temporal: OpenAIAgentsPlugin alone "
                                       "vs + OutliveAgentsPlugin (Work, run_agent)"}
    for key, rounds in rows.items():
        if not rounds:
            continue
        ratios = [x["ratio"] for x in rounds]
        base = [x["baseline_us"] for x in rounds]
        ours = [x["outlive_us"] for x in rounds]
        print(f"{names[key]}: per model call baseline {min(base):.0f}-{max(base):.0f} us, "
              f"outlive {min(ours):.0f}-{max(ours):.0f} us, ratio {min(ratios):.3f}-"
              f"{max(ratios):.3f} (median {statistics.median(ratios):.3f}; target <= 1.10)")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"turns": args.turns, "runs": args.runs, "rounds": rows},
                                       indent=1))


if __name__ == "__main__":
    asyncio.run(main())
