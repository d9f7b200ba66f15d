"""The ledger as a Temporal entity workflow: one per work id.

Commands arrive as updates. The validator runs the core's pure ``outlive.ledger.apply`` on the
current state (states are frozen, so this is a copy by construction): a rejected command fails
validation and leaves no event in history. The handler applies it for real and the returned
outcome is durable once the client's ``execute_update`` returns. Reads are queries. The state is
carried across continue-as-new as a codec blob.

A second update, ``step``, runs one step body as a real activity (no server retries, heartbeat
timeout) on the caller's process-unique task queue and reports how Temporal saw it finish.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutError

with workflow.unsafe.imports_passed_through():
    from outlive import codec
    from outlive import ledger as L
    from outlive.errors import InvalidRecord, OutliveError
    from outlive.records import WorkState

__all__ = ["LEDGER_WORKFLOW", "STEP_ACTIVITY", "LedgerArgs", "LedgerWorkflow", "StepReply",
           "StepRequest", "rejection"]

LEDGER_WORKFLOW = "OutliveLedger"
STEP_ACTIVITY = "outlive_step"

_COMMANDS = (L.OpenWork, L.PublishInput, L.Admit, L.Heartbeat, L.MarkUnknown, L.MarkStopped,
             L.RecordSteps, L.SubmitCandidate, L.Accept, L.RecordIntent, L.ConfirmEffect, L.Finish)


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


def rejection(exc: BaseException) -> ApplicationError:
    """An outlive error as an ApplicationError whose details rebuild the same typed error."""
    if not isinstance(exc, OutliveError):
        exc = InvalidRecord(f"malformed command: {type(exc).__name__}: {exc}")
    return ApplicationError(exc.message, exc.to_dict(), type=type(exc).__name__,
                            non_retryable=True)


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
            if not isinstance(cmd, _COMMANDS):
                raise InvalidRecord(f"not a ledger command: {type(cmd).__name__}")
            return L.apply(self._state, cmd, work_id=self._work_id)
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

    @workflow.update(name="step")
    async def step(self, req: StepRequest) -> StepReply:
        self._updates += 1
        try:
            result = await workflow.execute_activity(
                STEP_ACTIVITY, req.key, task_queue=req.task_queue,
                activity_id=f"{req.attempt}:{req.step}:{req.key[:12]}",
                start_to_close_timeout=timedelta(milliseconds=req.start_to_close_ms),
                heartbeat_timeout=timedelta(milliseconds=req.heartbeat_ms),
                retry_policy=RetryPolicy(maximum_attempts=1),
                result_type=str,
            )
        except ActivityError as err:
            cause = err.cause
            if isinstance(cause, TimeoutError):
                return StepReply(status="timed_out", detail=cause.type.name if cause.type else "")
            return StepReply(status="failed", detail=str(cause or err))
        if req.record is None or not result.startswith("v:"):
            return StepReply(status="completed", result=result)
        try:
            cmd = codec.loads(req.record)
            value = codec.loads(result[2:])
            if not isinstance(cmd, L.RecordSteps) or len(cmd.entries) != 1:
                raise InvalidRecord("record must be a RecordSteps with one entry")
            cmd = replace(cmd, entries=(replace(cmd.entries[0], result=value),))
            new, outcome = L.apply(self._state, cmd, work_id=self._work_id)
        except Exception as exc:  # a refusal must never fail the workflow task
            refusal = exc if isinstance(exc, OutliveError) else InvalidRecord(
                f"malformed step record: {type(exc).__name__}: {exc}")
            return StepReply(status="completed", result=result, rejection=refusal.to_dict())
        self._state = new
        return StepReply(status="completed", result=result, outcome=codec.dumps(outcome))

    @workflow.query(name="state")
    def state(self) -> str | None:
        return None if self._state is None else codec.dumps(self._state)

    @workflow.query(name="generation")
    def generation(self) -> int:
        return self._generation

    def __repr__(self) -> str:
        return f"LedgerWorkflow({self._work_id!r})"
