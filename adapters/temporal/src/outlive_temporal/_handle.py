"""Outside the workflow: a client's and an activity's view of a work that runs as a :class:`Work`.

A client starts the user's workflow as usual (or with :func:`start_work`: the work id is the
workflow id, and starting it again returns the same execution), publishes a corrected input,
reads the ledger, asks what a consumer may rely on, and awaits the work's end. On Temporal a work
*is* the user's workflow execution, so :class:`WorkHandle` answers ``outlive.Runtime``'s handle
API (``result()``, ``publish()``, ``dependable()``, ``state()``) from that execution.

An activity started by a step knows the attempt and token it
was started for (they are in its activity id) and can make its own fenced writes — which is how a
paused worker's *late* write meets the owner token, after Temporal already refused its late
completion.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from outlive import codec
from outlive import ledger as L
from outlive.controller import default_credential
from outlive.errors import GaveUp, InvalidRecord, NotFound, WorkFailed
from outlive.records import Acceptance, InputVersion, WorkState
from outlive.rules import Dependable, Rule
from outlive.runtime import WorkStatus, last_error, status_of
from outlive.supervisor import Completed

from ._credential import prove, publish_text, work_key
from ._engine import (
    COMMAND_UPDATE,
    DEPENDABLE_QUERY,
    PUBLISH_UPDATE,
    STATE_QUERY,
    parse_activity_id,
    rule_to_text,
)
from ._errors import typed_error

__all__ = ["AttemptRef", "WorkHandle", "current_attempt", "start_work"]


async def _update(handle: WorkflowHandle[Any, Any], name: str, *args: Any) -> str:
    try:
        out: str = await handle.execute_update(name, args=list(args), result_type=str)
    except WorkflowUpdateFailedError as exc:
        err = typed_error(exc.cause)
        raise (err or InvalidRecord(f"{name} failed: {exc.cause}")) from None
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:  # the work closed: nothing is written any more
            raise NotFound(f"work {handle.id!r} is not running ({exc.message})",
                           work_id=handle.id) from None
        raise
    return out


def _proof(secret: str | None, work_id: str, text: str) -> str:
    """A controller's proof for ``text`` on ``work_id`` (see :mod:`._credential`), or ""."""
    return prove(work_key(secret, work_id), text) if secret else ""


@dataclass(frozen=True)
class WorkHandle:
    """A work that runs as a :class:`Work` workflow, seen from a client.

    ``credential`` is the controller's secret the workers hold (default: this user's controller
    key, as for :class:`~outlive.Controller`): the handle proves it on a publish and on a
    controller's command, and never sends it (:mod:`outlive_temporal._credential`).
    ``signs=False`` proves nothing: the view an attempt's activity gets.
    """

    handle: WorkflowHandle[Any, Any]
    credential: str | None = field(default=None, repr=False)
    signs: bool = True

    @classmethod
    def of(cls, client: Client, workflow_id: str, *, credential: str | None = None) -> WorkHandle:
        return cls(client.get_workflow_handle(workflow_id), credential)

    def _secret(self) -> str | None:
        if not self.signs:
            return None
        return self.credential if self.credential is not None else default_credential()

    async def state(self) -> WorkStatus:
        """What ``outlive.WorkHandle.state()`` answers on every other backend: the ledger's
        state and one word for it (``running``, ``waiting``, ``completed``, ``failed`` or
        ``open``), with the last error."""
        st = await self.ledger()
        desc = await self.handle.describe()
        if desc.status == WorkflowExecutionStatus.RUNNING:
            word = status_of(st, None)
            word = "open" if word == "completed" else word
        elif desc.status == WorkflowExecutionStatus.COMPLETED and st.failure is None:
            word = "completed"
        else:
            word = "failed"
        return WorkStatus(work_id=self.handle.id, kind=st.kind, status=word, state=st,
                          last_error=last_error(st))

    async def ledger(self) -> WorkState:
        """The work's ledger state as the workflow holds it (one query, no describe)."""
        raw: str | None = await self.handle.query(STATE_QUERY, result_type=str)
        if raw is None:
            raise NotFound(f"work {self.handle.id!r} is not open yet", work_id=self.handle.id)
        st = codec.loads(raw)
        if not isinstance(st, WorkState):
            raise InvalidRecord(f"the work {self.handle.id!r} answered a corrupt state")
        return st

    async def publish(self, version: str, parts: Any) -> InputVersion:
        """A corrected input (a mapping, or the dataclass or model the workflow takes): it
        becomes current; the running attempt stays pinned to its own."""
        proof = _proof(self._secret(), self.handle.id, publish_text(version))
        rec = codec.loads(await _update(self.handle, PUBLISH_UPDATE, version, parts, proof))
        assert isinstance(rec, InputVersion)
        return rec

    async def execute(self, command: L.Command) -> L.Outcome:
        """One fenced ledger command, validated by the core ledger inside the workflow. A
        controller's command (``MarkUnknown``, ``MarkStopped``, ``Accept``) goes with the proof
        of this handle's credential."""
        text = codec.dumps(command)
        proof = _proof(self._secret(), self.handle.id, text) \
            if isinstance(command, L.CONTROLLER_COMMANDS) else ""
        out = codec.loads(await _update(self.handle, COMMAND_UPDATE, text, proof))
        assert isinstance(out, L.Outcome)
        return out

    async def dependable(self, rule: str | Rule = "strict") -> Dependable | None:
        """What a consumer may rely on under ``rule`` (a :mod:`outlive.rules` rule, its
        ``contract`` included, or its text, see :func:`~outlive_temporal.rule_from_text`): the
        same :class:`~outlive.rules.Dependable` as ``outlive.WorkHandle.dependable``, or None."""
        res: dict[str, Any] | None = await self.handle.query(DEPENDABLE_QUERY, rule_to_text(rule))
        if res is None:
            return None
        acc = codec.loads(res["acceptance"]) if res.get("acceptance") else None
        if acc is not None and not isinstance(acc, Acceptance):
            raise InvalidRecord(f"the work {self.handle.id!r} answered a corrupt acceptance")
        return Dependable(digest=res["digest"], version=res["version"], content=res["content"],
                          acceptance=acc)

    async def result(self, *, timeout: float | None = None) -> Completed:
        """Wait until the workflow execution ends, as ``outlive.WorkHandle.result()`` does:
        :class:`~outlive.supervisor.Completed` with the work's latest acceptance, or
        :class:`~outlive.errors.WorkFailed` naming the error it failed with (its type, message
        and traceback, as the ledger recorded them), or :class:`~outlive.errors.GaveUp`.
        The workflow's own return value stays ``self.handle.result()``'s."""
        try:
            await asyncio.wait_for(self.handle.result(), timeout)
        except WorkflowFailureError as exc:
            typed = typed_error(exc.cause)
            if typed is not None:
                raise typed from None
            raise await self._failed(exc.cause) from None
        st = await self.ledger()
        acc = st.latest_acceptance
        if acc is None:
            raise GaveUp(f"work {self.handle.id!r} ended without an accepted result",
                         work_id=self.handle.id, attempts=[a.number for a in st.attempts])
        return Completed(work_id=self.handle.id, acceptance=acc, attempts=st.attempts)

    async def _failed(self, cause: BaseException | None) -> WorkFailed:
        try:
            failure = (await self.ledger()).failure
        except NotFound:
            failure = None
        if failure is not None:
            kind, message, trace = failure.type, failure.message, failure.traceback
        elif isinstance(cause, ApplicationError):
            kind, message, trace = cause.type or "ApplicationError", cause.message, ""
        else:
            kind, message, trace = type(cause).__name__, str(cause), ""
        return WorkFailed(f"work {self.handle.id!r} failed: {kind}: {message}",
                          work_id=self.handle.id, type=kind, error=message, traceback=trace)

    async def status(self) -> WorkStatus:
        """The same as :meth:`state` (its name before the handles answered alike)."""
        return await self.state()


async def start_work(client: Client, workflow: Any, work_id: str, inputs: Any, *,
                     task_queue: str, version: str = "v1", credential: str | None = None,
                     **options: Any) -> WorkHandle:
    """``outlive.Runtime.start`` on Temporal: start ``workflow`` (its ``run``) with ``inputs`` as
    workflow id ``work_id``, and publish them as ``version`` in the same request
    (update-with-start). Starting an id that is running returns the same execution (Temporal's
    ``USE_EXISTING``); if that work holds ``version`` with other parts, the publish is refused
    with :class:`~outlive.errors.InputConflict`. Returns once the work has opened (its ``run``
    called ``drive``). ``credential``: as for :class:`WorkHandle` (the publish is proved)."""
    secret = credential if credential is not None else default_credential()
    options.setdefault("id_conflict_policy", WorkflowIDConflictPolicy.USE_EXISTING)
    op: WithStartWorkflowOperation[Any, Any] = WithStartWorkflowOperation(
        workflow, inputs, id=work_id, task_queue=task_queue, **options)
    try:
        await client.execute_update_with_start_workflow(
            PUBLISH_UPDATE, args=[version, inputs, _proof(secret, work_id, publish_text(version))],
            start_workflow_operation=op, result_type=str)
    except WorkflowUpdateFailedError as exc:
        err = typed_error(exc.cause)
        raise (err or InvalidRecord(f"starting {work_id!r} failed: {exc.cause}")) from None
    handle = await op.workflow_handle()
    return WorkHandle(client.get_workflow_handle(handle.id), credential)


@dataclass(frozen=True)
class AttemptRef:
    """The attempt an activity was started for: its work, number and owner token."""

    workflow_id: str
    attempt: int
    token: int
    step: str

    async def execute(self, command: L.Command) -> L.Outcome:
        """A fenced write by this activity (it must carry this ref's attempt and token). It
        proves no controller's credential: a controller's command from here is refused
        (:class:`~outlive.errors.NotController`)."""
        handle = activity.client().get_workflow_handle(self.workflow_id)
        return await WorkHandle(handle, signs=False).execute(command)


def current_attempt() -> AttemptRef:
    """Inside an activity a step started: which attempt, with which token."""
    info = activity.info()
    parsed = parse_activity_id(info.activity_id)
    if parsed is None:
        raise InvalidRecord(f"activity {info.activity_id!r} was not started by an outlive step")
    attempt, token, step = parsed
    return AttemptRef(workflow_id=info.workflow_id or "", attempt=attempt, token=token, step=step)
