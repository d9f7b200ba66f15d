"""The ledger as a Temporal entity workflow: one per work id.

Commands arrive as updates. The validator runs the core's pure ``outlive.ledger.apply`` on the
current state (states are frozen, so this is a copy by construction): a rejected command fails
validation and leaves no event in history. The handler applies it for real and the returned
outcome is durable once the client's ``execute_update`` returns. Reads are queries. The state is
carried across continue-as-new as a codec blob.

A second update, ``step``, runs one step body as a real activity (no server retries, heartbeat
timeout) on the caller's process-unique task queue and reports how Temporal saw it finish. A third,
``steps``, drives a known sequence of steps in one update: activity, journal write, next activity —
the client is out of the loop until the batch ends or a step cannot be journaled in the workflow.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, TimeoutError

with workflow.unsafe.imports_passed_through():
    from outlive import codec
    from outlive import ledger as L
    from outlive.errors import InvalidRecord, OutliveError
    from outlive.records import WorkState

    from ._engine import engine_now
    from ._errors import rejection

__all__ = ["LEDGER_WORKFLOW", "STEP_ACTIVITY", "BatchItem", "BatchReply", "BatchRequest",
           "LedgerArgs", "LedgerWorkflow", "StepReply", "StepRequest"]

LEDGER_WORKFLOW = "OutliveLedger"
STEP_ACTIVITY = "outlive_step"



@dataclass
class LedgerArgs:
    """Workflow input: the work id, the carried state (after continue-as-new) and the CAN bound."""

    work_id: str
    state: str | None = None
    can_after: int = 1000
    generation: int = 0


@dataclass
class StepRequest:
    key: str
    task_queue: str
    step: str
    attempt: int
    heartbeat_ms: int
    start_to_close_ms: int
    #: Optional codec-encoded ``RecordSteps`` (result left empty) to apply in the same update as
    #: the activity result: one round trip per journaled step instead of two.
    record: str | None = None


@dataclass
class StepReply:
    """``completed`` (value or by reference), ``timed_out`` (HEARTBEAT/START_TO_CLOSE), ``failed``."""

    status: str
    result: str | None = None
    detail: str = ""
    #: With ``record``: the codec-encoded outcome, or the rejection as ``OutliveError.to_dict()``.
    outcome: str | None = None
    rejection: dict[str, Any] | None = None


@dataclass
class BatchItem:
    """One step of a batch: its registry key and its ``RecordSteps`` template (result empty)."""

    key: str
    step: str
    attempt: int
    record: str


@dataclass
class BatchRequest:
    items: list[BatchItem]
    task_queue: str
    heartbeat_ms: int
    start_to_close_ms: int


@dataclass
class BatchReply:
    """``journaled`` steps were run and journaled in order; ``stop`` says why the next one was not.

    ``stop`` is None when the whole batch was journaled. Otherwise it is the reply for item
    ``journaled``: timed out, failed, refused by the ledger (``rejection``), or completed with a
    result that came back by reference (the client journals that one itself).
    """

    journaled: int
    stop: StepReply | None = None


@workflow.defn(name=LEDGER_WORKFLOW)
class LedgerWorkflow:
    """Holds one work's ledger state; every mutation is an update validated by the pure ledger."""

    @workflow.init
    def __init__(self, args: LedgerArgs) -> None:
        self._work_id = args.work_id
        self._state: WorkState | None = None
        if args.state is not None:
            st = codec.loads(args.state)
            assert isinstance(st, WorkState)
            self._state = st
        self._can_after = args.can_after
        self._generation = args.generation
        self._updates = 0

    @workflow.run
    async def run(self, args: LedgerArgs) -> None:
        await workflow.wait_condition(
            lambda: self._updates >= self._can_after
            or workflow.info().is_continue_as_new_suggested())
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(LedgerArgs(
            work_id=self._work_id,
            state=None if self._state is None else codec.dumps(self._state),
            can_after=self._can_after, generation=self._generation + 1))

    def _apply(self, text: str) -> tuple[WorkState, L.Outcome]:
        try:
            cmd = codec.loads(text)
            if not L.is_command(cmd):
                raise InvalidRecord(f"not a ledger command: {type(cmd).__name__}")
            return L.apply(self._state, cmd, work_id=self._work_id, now=engine_now())
        except Exception as exc:
            raise rejection(exc) from None

    @workflow.update(name="command")
    async def command(self, text: str) -> str:
        new, outcome = self._apply(text)
        self._state = new
        self._updates += 1
        return codec.dumps(outcome)

    @command.validator
    def _validate(self, text: str) -> None:
        self._apply(text)

    async def _activity(self, key: str, step: str, attempt: int, task_queue: str,
                        heartbeat_ms: int, start_to_close_ms: int) -> StepReply:
        try:
            result = await workflow.execute_activity(
                STEP_ACTIVITY, key, task_queue=task_queue,
                activity_id=f"{attempt}:{step}:{key[:12]}",
                start_to_close_timeout=timedelta(milliseconds=start_to_close_ms),
                heartbeat_timeout=timedelta(milliseconds=heartbeat_ms),
                retry_policy=RetryPolicy(maximum_attempts=1),
                result_type=str,
            )
        except ActivityError as err:
            cause = err.cause
            if isinstance(cause, TimeoutError):
                return StepReply(status="timed_out", detail=cause.type.name if cause.type else "")
            return StepReply(status="failed", detail=str(cause or err))
        return StepReply(status="completed", result=result)

    def _journal(self, record: str | None, reply: StepReply) -> StepReply:
        """Apply the step's ``RecordSteps`` template with the result filled in, via the ledger."""
        result = reply.result
        if record is None or reply.status != "completed" or result is None \
                or not result.startswith("v:"):
            return reply
        try:
            cmd = codec.loads(record)
            value = codec.loads(result[2:])
            if not isinstance(cmd, L.RecordSteps) or len(cmd.entries) != 1:
                raise InvalidRecord("record must be a RecordSteps with one entry")
            cmd = replace(cmd, entries=(replace(cmd.entries[0], result=value),))
            new, outcome = L.apply(self._state, cmd, work_id=self._work_id, now=engine_now())
        except Exception as exc:  # a refusal must never fail the workflow task
            refusal = exc if isinstance(exc, OutliveError) else InvalidRecord(
                f"malformed step record: {type(exc).__name__}: {exc}")
            return StepReply(status="completed", result=result, rejection=refusal.to_dict())
        self._state = new
        return StepReply(status="completed", result=result, outcome=codec.dumps(outcome))

    @workflow.update(name="step")
    async def step(self, req: StepRequest) -> StepReply:
        self._updates += 1
        reply = await self._activity(req.key, req.step, req.attempt, req.task_queue,
                                     req.heartbeat_ms, req.start_to_close_ms)
        return self._journal(req.record, reply)

    @workflow.update(name="steps")
    async def steps(self, req: BatchRequest) -> BatchReply:
        """Run the items in order, journaling each (fenced) before the next activity starts."""
        self._updates += 1
        for i, item in enumerate(req.items):
            reply = await self._activity(item.key, item.step, item.attempt, req.task_queue,
                                         req.heartbeat_ms, req.start_to_close_ms)
            reply = self._journal(item.record, reply)
            if reply.outcome is None:
                return BatchReply(journaled=i, stop=reply)
        return BatchReply(journaled=len(req.items))

    @workflow.query(name="state")
    def state(self) -> str | None:
        return None if self._state is None else codec.dumps(self._state)

    @workflow.query(name="generation")
    def generation(self) -> int:
        return self._generation

    def __repr__(self) -> str:
        return f"LedgerWorkflow({self._work_id!r})"
