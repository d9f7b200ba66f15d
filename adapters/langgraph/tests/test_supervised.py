"""Supervision: LangGraph has no supervisor, so the library's supervisor dispatches attempts as
invocations of the user's graph — in process and as ``outlive worker`` processes. Attempt #1
dies in node ``s2``; the supervisor admits #2, which invokes the graph on the same (user's)
thread and restores ``s1`` from the journal instead of calling the model again."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

import outlive
from outlive.supervisor import Lease, Supervisor, TaskDispatcher, WorkDefinition

from . import supervised_graph as sg

HERE = Path(__file__).resolve().parent


def _definition(attempt: object, inputs: object) -> WorkDefinition:
    return WorkDefinition(work_id="digest/q3", attempt=attempt, inputs=inputs,  # type: ignore[arg-type]
                          contract=sg.CONTRACT,
                          # The takeover here comes from the dispatcher seeing its runner die, not
                          # from the lease: a generous lease keeps a starved, live worker on a
                          # loaded machine from being taken over before the scene under test.
                          lease=Lease(heartbeat_interval=1_000, missed_beats=30,
                                      start_grace=120_000))


@pytest.mark.parametrize("where", ["in-process", "subprocess"])
async def test_the_supervisor_takes_over_a_dead_graph_invocation(
        where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OUTLIVE_RUN_DIR", str(tmp_path))
    (tmp_path / "crash-1").write_text("")
    url = f"langgraph+sqlite:///{tmp_path / 'lg.db'}"
    async with await outlive.open_backend(url) as backend:
        if where == "in-process":
            monkeypatch.setenv("OUTLIVE_IN_PROCESS", "1")
            definition = _definition(sg.attempt, sg.inputs)
            dispatcher: outlive.supervisor.Dispatcher = TaskDispatcher(backend)
        else:
            from outlive._process import SubprocessDispatcher

            definition = _definition("supervised_graph:attempt", "supervised_graph:inputs")
            dispatcher = SubprocessDispatcher(
                env={"PYTHONPATH": os.pathsep.join([str(HERE), *sys.path[1:]])},
                log_dir=tmp_path / "logs")
        async with Supervisor(backend, definition, dispatcher, poll=0.05) as sup:
            await sup.publish("v1", sg.V1)
            done = await sup.run()
        st = await backend.load("digest/q3")
    assert st is not None and done is not None
    acc = st.latest_acceptance
    assert acc is not None and acc.version == "v1"
    assert st.candidates[-1].content == {"digest": "A STEADY QUARTER. REVENUE WAS 4.7 MILLION. "
                                                   "COSTS FELL."}
    calls = [tuple(json.loads(line)) for line in (tmp_path / "calls.log").read_text().splitlines()]
    assert calls == [(1, "s1"), (1, "s2"), (2, "s2"), (2, "s3")], "s1 restored by #2"
    assert [(e.step, e.attempt) for e in st.journal] == [("s1", 1), ("s2", 2), ("s3", 2),
                                                         ("assembly", 2)]
    # In process #1 raises (an answer: recorded as failed, retried); a killed process is silence.
    first = outlive.AttemptState.FAILED if where == "in-process" else outlive.AttemptState.UNKNOWN
    assert [a.state for a in st.attempts] == [first, outlive.AttemptState.FINISHED]
