"""Per model call: an agent with outlive's records against the framework's own durable baseline.

Side by side, alternating in rounds, the same agent and fake model (a read-only tool called
``--turns`` times, then an answer):

- LangGraph: ``create_react_agent`` with an ``AsyncSqliteSaver`` (the checkpointer alone) vs the
  same agent with ``journaled(model)`` and ``outlive_tools`` on ``langgraph+sqlite`` (the ledger
  in the checkpoints' file; each model call and tool call one journaled step, its entry carried
  in the node's own save);
- pydantic-ai: ``DBOSAgent`` (pydantic-ai's durable agent, DBOS on SQLite) vs the same agent
  under ``outlive_overrides`` on a ``sqlite://`` ledger;
- the OpenAI Agents SDK on Temporal: a workflow running the agent with ``OpenAIAgentsPlugin``
  alone (each model call and tool call an activity) vs the same workflow extending
  ``outlive_temporal.Work`` with ``run_agent`` and ``OutliveAgentsPlugin`` (a dev server).

Reported: microseconds per model call (median of each round's runs) and, per round, the median
ratio outlive / baseline over pairs of runs taken back to back (target <= 1.10). Run: ``make bench-agents``.
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
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.prebuilt import create_react_agent
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


@tool
def read_attachment_tool(name: str) -> str:
    """Read one attachment of the ticket."""
    return TEXT


class _LangGraph:
    """The baseline on LangGraph's ``AsyncSqliteSaver`` (its own file); outlive's side on
    ``langgraph+sqlite`` (the ledger in the checkpoints' file, ``backend.checkpointer``); both
    under LangGraph's default durability (``"async"``). Each step's journal entry rides the
    node's own save (``node_step``): a superstep is one commit, the baseline's two."""

    def __init__(self, tmp: Path, turns: int) -> None:
        self.tmp, self.turns = tmp, turns

    async def __aenter__(self) -> _LangGraph:
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        from outlive_agents.langgraph import journaled, outlive_tools

        self._saver_cm = AsyncSqliteSaver.from_conn_string(str(self.tmp / "lg.db"))
        saver = await self._saver_cm.__aenter__()
        self.backend = await outlive.open_backend(f"langgraph+sqlite:///{self.tmp / 'o.db'}")
        model = _lg_model(self.turns)
        self.plain = create_react_agent(model, [read_attachment_tool], checkpointer=saver)
        self.ours = create_react_agent(journaled(model), outlive_tools([read_attachment_tool]),
                                       checkpointer=self.backend.checkpointer)  # type: ignore[attr-defined]
        return self

    async def once(self, ours: bool, seq: list[int]) -> float:
        from outlive_langgraph import run

        seq[0] += 1
        cfg: Any = {"configurable": {"thread_id": f"t{seq[0]}"}}
        prompt = {"messages": [HumanMessage("Write the Q3 digest.")]}
        if ours:
            worker = await _attempt(self.backend, f"w{seq[0]}")
            t0 = time.perf_counter()
            # LangGraph's default durability, the baseline's (each superstep's checkpoint is
            # saved while the next one runs; the journal entries ride those saves)
            await run(self.ours, prompt, worker=worker, config=cfg, durability="async")
        else:
            t0 = time.perf_counter()
            await self.plain.ainvoke(prompt, cfg)
        return (time.perf_counter() - t0) / (self.turns + 1)

    async def __aexit__(self, *exc: object) -> None:
        await self.backend.close()
        await self._saver_cm.__aexit__(None, None, None)


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


class _PydanticAiOurs:
    def __init__(self, tmp: Path, turns: int) -> None:
        self.tmp, self.turns = tmp, turns
        self.agent = _pa_agent(turns, "ours")

    async def __aenter__(self) -> _PydanticAiOurs:
        self.backend = await outlive.open_backend(f"sqlite:///{self.tmp / 'pa.db'}")
        return self

    async def once(self, seq: list[int]) -> float:
        from outlive_agents.pydantic_ai import outlive_overrides

        seq[0] += 1
        worker = await _attempt(self.backend, f"p{seq[0]}")
        t0 = time.perf_counter()
        with outlive_overrides(self.agent, worker=worker):
            await self.agent.run("Write the Q3 digest.")
        return (time.perf_counter() - t0) / (self.turns + 1)

    async def __aexit__(self, *exc: object) -> None:
        await self.backend.close()


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

    async def once(self) -> float:
        t0 = time.perf_counter()
        await self.agent.run("Write the Q3 digest.")
        return (time.perf_counter() - t0) / (self.turns + 1)

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

    async def once(self, ours: bool, seq: list[int]) -> float:
        workflow = self.parts["ours" if ours else "baseline"]
        seq[0] += 1
        t0 = time.perf_counter()
        await self.client.execute_workflow(workflow.run, "Write the Q3 digest.",
                                           id=f"t{seq[0]}", task_queue="bench-agents")
        return (time.perf_counter() - t0) / (self.turns + 1)

    async def __aexit__(self, *exc: object) -> None:
        await self.worker.__aexit__(None, None, None)
        self.server.__exit__(None, None, None)


async def _paired(rounds: int, runs: int, base: Any, ours: Any) -> list[dict[str, float]]:
    """Rounds of ``runs`` pairs, one baseline run and one outlive run each, in alternating order
    (load that comes and goes hits both sides of a pair alike); per round, the median of the
    pairs' ratios and of each side's time per model call."""
    out = []
    for _ in range(rounds):
        pairs: list[tuple[float, float]] = []
        for i in range(runs):
            if i % 2 == 0:
                b = await base()
                o = await ours()
            else:
                o = await ours()
                b = await base()
            pairs.append((b, o))
        out.append({"baseline_us": statistics.median(b for b, _ in pairs) * 1e6,
                    "outlive_us": statistics.median(o for _, o in pairs) * 1e6,
                    "ratio": statistics.median(o / b for b, o in pairs)})
    return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=20, help="pairs of agent runs per round")
    ap.add_argument("--turns", type=int, default=8, help="tool turns per run (model calls - 1)")
    ap.add_argument("--temporal-runs", type=int, default=6,
                    help="pairs of workflow runs per round on Temporal")
    ap.add_argument("--skip-temporal", action="store_true")
    ap.add_argument("--only", choices=("langgraph", "pydantic-ai", "openai-agents-temporal"),
                    help="run one row only")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    rows: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        seq = [0]

        def wanted(row: str) -> bool:
            return args.only is None or args.only == row

        if wanted("langgraph"):
            async with _LangGraph(tmp, args.turns) as lg:
                for ours in (False, True, False, True):            # warm-up, not reported
                    await lg.once(ours, seq)
                rows["langgraph"] = await _paired(args.rounds, args.runs,
                                                  lambda: lg.once(False, seq),
                                                  lambda: lg.once(True, seq))
        if wanted("pydantic-ai"):
            dbos = _Dbos(tmp, args.turns)
            try:
                async with _PydanticAiOurs(tmp, args.turns) as pa:
                    for _ in range(2):
                        await dbos.once()
                        await pa.once(seq)
                    rows["pydantic-ai"] = await _paired(args.rounds, args.runs, dbos.once,
                                                        lambda: pa.once(seq))
            finally:
                dbos.close()
        if wanted("openai-agents-temporal") and not args.skip_temporal:
            async with _Temporal(tmp, args.turns) as temporal:
                for ours in (False, True, False, True):
                    await temporal.once(ours, seq)
                rows["openai-agents-temporal"] = await _paired(
                    args.rounds, args.temporal_runs, lambda: temporal.once(False, seq),
                    lambda: temporal.once(True, seq))
    names = {"langgraph": "LangGraph create_react_agent: AsyncSqliteSaver alone vs + outlive "
                          "(langgraph+sqlite)",
             "pydantic-ai": "pydantic-ai Agent: DBOSAgent (SQLite) vs outlive (sqlite://)",
             "openai-agents-temporal": "OpenAI Agents SDK on Temporal: OpenAIAgentsPlugin alone "
                                       "vs + OutliveAgentsPlugin (Work, run_agent)"}
    for key, rounds in rows.items():
        ratios = [x["ratio"] for x in rounds]
        base = [x["baseline_us"] for x in rounds]
        mine = [x["outlive_us"] for x in rounds]
        print(f"{names[key]}: per model call baseline {min(base):.0f}-{max(base):.0f} us, "
              f"outlive {min(mine):.0f}-{max(mine):.0f} us, paired ratio {min(ratios):.3f}-"
              f"{max(ratios):.3f} (median {statistics.median(ratios):.3f}; target <= 1.10)")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"turns": args.turns, "runs": args.runs, "rounds": rows},
                                       indent=1))


if __name__ == "__main__":
    asyncio.run(main())
