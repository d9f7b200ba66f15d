"""The sample's worker and starter in one process, before or after the port.

``python -m examples.porting_temporal_triage.app [--ported] [--scene happy|corrected]`` (from the
repository root; starts its own dev server, or ``--address HOST:PORT``). Prints one JSON object:
the result, the model calls paid for, the OpenTelemetry spans exported and, after the port, the
work's records.

As in the sample, the tracer provider comes from ``create_tracer_provider`` (replay-safe) and the
client carries ``OpenTelemetryPlugin(add_temporal_spans=True)``; spans go to an in-memory
exporter instead of Langfuse. The port adds one plugin to that list, and nothing else here.

Scenes: ``happy`` is the sample's starter (start, approve by update, await the result).
``corrected`` (after the port only): while the ticket waits for approval its body is corrected
(published to the same work), then the reviewer approves. The approved attempt's reply is for
the old ticket, so it is not accepted; the next attempt, pinned to the corrected ticket, restores
the account look-up, classifies again and waits for an approval of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.opentelemetry import OpenTelemetryPlugin, create_tracer_provider
from temporalio.worker import Worker

from examples.porting_temporal_triage import activities
from examples.porting_temporal_triage.activities import ApprovalDecision, Ticket

TASK_QUEUE = "ticket-triage-task-queue"
TICKET = Ticket(
    ticket_id="T-1001",
    customer_email="ada@acme.example",
    subject="Charged twice for the July invoice",
    body=("Hi, my card statement shows two identical charges for our July invoice. Can you "
          "check what happened and refund the duplicate?"),
)
CORRECTED = Ticket(
    ticket_id="T-1001",
    customer_email="ada@acme.example",
    subject="Charged twice for the July invoice",
    body="Correction: it was the August invoice, charged twice. Please refund one charge.",
)


async def _waiting(handle: WorkflowHandle[Any, Any], attempts: int) -> None:
    """Until the work's attempt number ``attempts`` waits for its approval."""
    from outlive.errors import NotFound
    from outlive.records import AttemptState
    from outlive_temporal import WorkHandle

    for _ in range(600):
        try:
            st = await WorkHandle(handle).ledger()
        except NotFound:
            st = None
        if st is not None and len(st.attempts) == attempts \
                and st.attempts[-1].state is AttemptState.WAITING:
            return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"attempt #{attempts} never waited for its approval")


async def run(address: str, ported: bool, scene: str) -> dict[str, Any]:
    exporter = InMemorySpanExporter()
    provider = create_tracer_provider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    if ported:
        from examples.porting_temporal_triage.after import TicketTriageWorkflow
        from outlive_temporal import OutlivePlugin, WorkHandle
        plugins: list[Any] = [OpenTelemetryPlugin(add_temporal_spans=True), OutlivePlugin()]
    else:
        from examples.porting_temporal_triage.before import TicketTriageWorkflow  # type: ignore[assignment]
        plugins = [OpenTelemetryPlugin(add_temporal_spans=True)]
    client = await Client.connect(address, plugins=plugins)
    queue = f"{TASK_QUEUE}-{uuid.uuid4().hex[:8]}"
    workflow_id = f"ticket-triage-{uuid.uuid4().hex[:8]}"
    out: dict[str, Any] = {}
    async with Worker(client, task_queue=queue, workflows=[TicketTriageWorkflow],
                      activities=[activities.classify_ticket, activities.lookup_account,
                                  activities.draft_reply]):
        with trace.get_tracer(__name__).start_as_current_span("ticket-triage"):
            handle = await client.start_workflow(TicketTriageWorkflow.run, TICKET,
                                                 id=workflow_id, task_queue=queue)
            if scene == "corrected":
                await _waiting(handle, 1)
                await WorkHandle(handle).publish("v2", CORRECTED)
            out["update"] = await handle.execute_update(
                TicketTriageWorkflow.approve, ApprovalDecision(approved=True, reviewer="ann"))
            if scene == "corrected":
                await _waiting(handle, 2)
                out["second_update"] = await handle.execute_update(
                    TicketTriageWorkflow.approve, ApprovalDecision(approved=True, reviewer="bob"))
            result = await handle.result()
            if ported:
                st = await WorkHandle(handle).ledger()
                out["attempts"] = [(a.number, a.state.value, a.pinned_version)
                                   for a in st.attempts]
                out["journal"] = [(e.step, e.attempt) for e in st.journal]
                out["accepted_for"] = [acc.version for acc in st.acceptances]
        out["result"] = {"status": result.status, "category": result.classification.category,
                         "reply": result.reply}
    provider.force_flush()
    out["calls"] = dict(activities.CALLS)
    out["spans"] = sorted({s.name for s in exporter.get_finished_spans()})
    out["one_trace"] = len({s.context.trace_id for s in exporter.get_finished_spans()}) == 1
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m examples.porting_temporal_triage.app")
    p.add_argument("--ported", action="store_true")
    p.add_argument("--scene", choices=["happy", "corrected"], default="happy")
    p.add_argument("--address")
    args = p.parse_args(argv)
    if args.address:
        res = asyncio.run(run(args.address, args.ported, args.scene))
    else:
        from outlive_temporal.devserver import DevServer

        with DevServer() as srv:
            res = asyncio.run(run(srv.address, args.ported, args.scene))
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Temporal's native worker threads may still call into Python while the interpreter
    # finalizes (a rare "PyGILState_Release" abort after the run's answer is printed): the run
    # is over and nothing is left to clean up, so leave without finalizing.
    os._exit(code)
