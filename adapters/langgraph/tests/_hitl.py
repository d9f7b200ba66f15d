"""A person answers from another process (run as a script: ``python _hitl.py MODE URL RUN_DIR``).

``ask``: process A opens the work, admits attempt #1 and invokes the user's StateGraph directly
(``graph.ainvoke(x, attempt_config(...))``) until ``interrupt()``; then it exits. ``answer``:
process B, started afterwards, rejoins the waiting attempt from what the database kept, resumes
with ``Command(resume=...)``, submits the candidate, accepts it and posts the one announcement.
Each process prints one JSON line of what it saw.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

import outlive
from outlive import Contract, Controller, Worker
from outlive.receiver import SqliteReceiver
from outlive_langgraph import LangGraphBackend, attempt_config, outlive_node, rejoin

WORK = "review/report-7"
THREAD = {"configurable": {"thread_id": "report-7"}}
CONTRACT = Contract(name="reviewed", version="1", assessor="test")
REPORT = {"text": "revenue was 4.7 million"}


class Report(TypedDict, total=False):
    text: str
    summary: str
    approved: str
    posted: str


def build(backend: LangGraphBackend, run_dir: Path) -> Any:
    def called(name: str) -> None:
        with (run_dir / "calls.log").open("a") as f:
            f.write(name + "\n")

    @outlive_node(inputs=("text",))
    async def summarise(state: Report) -> Report:
        called("summarise")                 # the model call: made once, in process A
        return {"summary": state["text"].upper()}

    @outlive_node(inputs=("summary",), external=("summary",))
    async def review(state: Report) -> Report:
        return {"approved": str(interrupt({"summary": state["summary"]}))}

    @outlive_node(inputs=("summary", "approved"), external=("summary", "approved"))
    async def post(state: Report) -> Report:
        called("post")
        return {"posted": f"{state['summary']} ({state['approved']})"}

    g = StateGraph(Report)
    for fn in (summarise, review, post):
        g.add_node(fn)
    g.add_edge(START, "summarise")
    g.add_edge("summarise", "review")
    g.add_edge("review", "post")
    g.add_edge("post", END)
    return g.compile(checkpointer=backend.checkpointer)


async def ask(url: str, run_dir: Path) -> None:
    backend = await outlive.open_backend(url)
    assert isinstance(backend, LangGraphBackend)
    ctl = Controller(backend)
    await ctl.open_work(WORK)
    await ctl.publish(WORK, "v1", REPORT)
    worker = Worker(backend, await ctl.admit(WORK), REPORT)
    await worker.start()
    out = await build(backend, run_dir).ainvoke(REPORT, attempt_config(worker, THREAD))
    st = await backend.load(WORK)
    assert st is not None
    print(json.dumps({"interrupted": "__interrupt__" in out, "state": st.attempts[0].state.value,
                      "waiting_for": st.attempts[0].waiting_for}), flush=True)
    await backend.close()


async def answer(url: str, run_dir: Path, decision: str) -> None:
    backend = await outlive.open_backend(url)
    assert isinstance(backend, LangGraphBackend)
    worker = await rejoin(backend, WORK, REPORT)      # the secret: from what the database kept
    out = await build(backend, run_dir).ainvoke(Command(resume=decision),
                                                attempt_config(worker, THREAD))
    cand = await worker.candidate({"posted": out["posted"]})
    acc = await Controller(backend).assess(WORK, cand.digest, CONTRACT, lambda c, v: (True, "ok"))
    receiver = SqliteReceiver(str(run_dir / "feed.db"))

    def send(key: str | None, payload: Any) -> outlive.Receipt:
        def apply(conn: sqlite3.Connection, p: Any) -> str:
            conn.execute("CREATE TABLE IF NOT EXISTS posts (text TEXT)")
            conn.execute("INSERT INTO posts VALUES (?)", (p,))
            return "post-1"
        return receiver.receive(key, payload, apply)

    await worker.effect(f"announce:{WORK}:{cand.digest}", out["posted"], send)
    await worker.finish()
    receiver.close()
    print(json.dumps({"posted": out["posted"], "parts": [p.step for p in cand.parts],
                      "accepted": acc.version}), flush=True)
    await backend.close()


if __name__ == "__main__":
    mode, url, folder = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    if mode == "ask":
        asyncio.run(ask(url, folder))
    else:
        asyncio.run(answer(url, folder, sys.argv[4]))
