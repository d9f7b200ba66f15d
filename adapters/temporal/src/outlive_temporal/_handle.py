"""Outside the workflow: a client's and an activity's view of a work that runs as a :class:`Work`.

A client starts the user's workflow as usual, publishes a corrected input, reads the ledger and
asks what a consumer may rely on. An activity started by a step knows the attempt and token it
was started for (they are in its activity id) and can make its own fenced writes — which is how a
paused worker's *late* write meets the owner token, after Temporal already refused its late
completion.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from temporalio import activity
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from outlive import codec
from outlive import ledger as L
from outlive.errors import InvalidRecord, NotFound
from outlive.records import InputVersion, WorkState

from ._engine import COMMAND_UPDATE, DEPENDABLE_QUERY, PUBLISH_UPDATE, STATE_QUERY, parse_activity_id
from ._errors import typed_error

__all__ = ["AttemptRef", "WorkHandle", "current_attempt"]


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


@dataclass(frozen=True)
class WorkHandle:
    """A work that runs as a :class:`Work` workflow, seen from a client."""

    handle: WorkflowHandle[Any, Any]

    @classmethod
    def of(cls, client: Client, workflow_id: str) -> WorkHandle:
        return cls(client.get_workflow_handle(workflow_id))

    async def state(self) -> WorkState:
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
        rec = codec.loads(await _update(self.handle, PUBLISH_UPDATE, version, parts))
        assert isinstance(rec, InputVersion)
        return rec

    async def execute(self, command: L.Command) -> L.Outcome:
        """One fenced ledger command, validated by the core ledger inside the workflow."""
        out = codec.loads(await _update(self.handle, COMMAND_UPDATE, codec.dumps(command)))
        assert isinstance(out, L.Outcome)
        return out

    async def dependable(self, rule: str = "strict") -> dict[str, Any] | None:
        """``strict`` | ``latest_accepted`` | ``latest_finished`` | ``pinned:<version>``."""
        res: dict[str, Any] | None = await self.handle.query(DEPENDABLE_QUERY, rule)
        return res


@dataclass(frozen=True)
class AttemptRef:
    """The attempt an activity was started for: its work, number and owner token."""

    workflow_id: str
    attempt: int
    token: int
    step: str

    async def execute(self, command: L.Command) -> L.Outcome:
        """A fenced write by this activity (it must carry this ref's attempt and token)."""
        return await WorkHandle.of(activity.client(), self.workflow_id).execute(command)


def current_attempt() -> AttemptRef:
    """Inside an activity a step started: which attempt, with which token."""
    info = activity.info()
    parsed = parse_activity_id(info.activity_id)
    if parsed is None:
        raise InvalidRecord(f"activity {info.activity_id!r} was not started by an outlive step")
    attempt, token, step = parsed
    return AttemptRef(workflow_id=info.workflow_id or "", attempt=attempt, token=token, step=step)
