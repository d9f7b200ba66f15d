"""``temporal://HOST:PORT[/NAMESPACE]``: outlive's ledger on a Temporal server.

Each work's ledger is an entity workflow (see :mod:`outlive_temporal._workflow`); every command is
one update whose validator runs the core ledger, so a refused command writes nothing and an
accepted one is durable when ``execute`` returns. The backend runs its own Temporal workers inside
``start()``: one for the ledger workflows (shared task queue, any process may serve it) and one for
step activities on a task queue unique to this process.

Why the step queue is per process: ``run_step`` receives a Python closure, which cannot travel
through Temporal. The closure waits in an in-process registry under a random key; the ledger
workflow schedules a real activity (``maximum_attempts=1``, heartbeat timeout) carrying only that
key, and this process's worker runs the closure. If the process dies, the activity times out and
nobody retries it: outlive's controller, not Temporal, admits a successor. A cross-process
deployment registers named step functions as ordinary activities on worker processes instead.

Query parameters: ``task_queue`` (ledger queue, default ``outlive-ledger``), ``heartbeat_ms``
(step heartbeat timeout, default 10000), ``start_to_close_ms`` (default 3600000),
``auto_heartbeat`` (1/0: heartbeat while this process is alive, default 1), ``can_after``
(updates per run before continue-as-new, default 1000), ``retry_s`` (how long to ride out an
unreachable server before raising ``BackendUnavailable``, default 30), ``sandbox`` (1: run the
ledger workflow in Temporal's sandbox; default 0 — the ledger is pure and deterministic by design,
and the sandbox costs CPU on every workflow task).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar
from urllib.parse import quote, unquote

from temporalio import activity
from temporalio.client import (
    Client,
    WithStartWorkflowOperation,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import UnsandboxedWorkflowRunner, Worker, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from outlive import codec
from outlive import ledger as L
from outlive.backend import Backend, StepCall
from outlive.errors import (
    BackendUnavailable,
    ConfigError,
    InvalidRecord,
    NotFound,
    OutliveError,
    PayloadTooLarge,
    error_from_dict,
)
from outlive.records import WorkState

from ._config import parse_url
from ._errors import typed_error
from ._workflow import (
    LEDGER_WORKFLOW,
    STEP_ACTIVITY,
    BatchItem,
    BatchReply,
    BatchRequest,
    LedgerArgs,
    LedgerWorkflow,
    StepReply,
    StepRequest,
)

__all__ = ["LOST_TASK_TRIES", "MAX_BATCH_STEPS", "MAX_COMMAND_BYTES", "StepReport", "TemporalBackend",
           "parse_url", "work_id_of", "workflow_id"]

#: Temporal refuses payloads over 2 MB; a command bigger than this is refused before sending.
MAX_COMMAND_BYTES = 1_900_000
#: At most this many steps per ``steps`` update (each step adds ~6 history events; the rest of a
#: longer batch goes in the next update).
MAX_BATCH_STEPS = 500
#: Step results up to this size travel back through the activity completion; larger ones are
#: handed over in-process by reference (history keeps the reference, not the blob).
INLINE_RESULT_BYTES = 64 * 1024
#: How many times one step is dispatched when Temporal times its activity out before the body
#: started in this process (a task lost between the server and this worker; see ``_run``).
LOST_TASK_TRIES = 5

_PREFIX = "outlive-ledger:"
_RETRYABLE = {RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED,
              RPCStatusCode.UNKNOWN, RPCStatusCode.RESOURCE_EXHAUSTED,
              RPCStatusCode.INTERNAL, RPCStatusCode.ABORTED}

T = TypeVar("T")
#: ``_batch``: the batch stopped on a step whose activity was lost before its body ran.
_LOST = object()
#: The caller gets the body's own exception; Temporal need not log these as warnings.
_BENIGN = ApplicationErrorCategory.BENIGN


def workflow_id(work_id: str) -> str:
    """A safe, injective workflow id: percent-encoded (``/``, ``#``, spaces, unicode), or hashed
    when too long for Temporal's id limit (the work id then lives in the workflow's memo)."""
    wid = _PREFIX + quote(work_id, safe="")
    if len(wid) <= 900:
        return wid
    return _PREFIX + "sha256:" + hashlib.sha256(work_id.encode()).hexdigest()


def work_id_of(wid: str) -> str | None:
    """Invert :func:`workflow_id` when the id is the percent-encoded form."""
    if not wid.startswith(_PREFIX) or wid.startswith(_PREFIX + "sha256:"):
        return None
    return unquote(wid[len(_PREFIX):])


@dataclass
class _Pending:
    fn: Callable[[], Awaitable[Any]]
    task: asyncio.Task[Any] | None = None


@dataclass(frozen=True, kw_only=True)
class StepReport:
    """How Temporal saw one step activity end: ``completed``, ``timed_out`` or ``failed``."""

    work_id: str
    attempt: int
    step: str
    status: str
    detail: str = ""
    inline: bool = False


@dataclass
class _Stats:
    updates: int = 0
    retries: int = 0
    #: Step activities Temporal timed out before their body started here (dispatched again).
    lost: int = 0
    reports: list[StepReport] = field(default_factory=list)


class TemporalBackend(Backend):
    """The five records on Temporal: ledger = entity workflow + updates; steps = activities."""

    capabilities = frozenset({"atomic-commands", "durable", "multi-process", "engine-steps"})

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.config = parse_url(url)
        self._client: Client | None = None
        self._workers: list[Worker] = []
        self._runs: list[asyncio.Task[None]] = []
        self._pending: dict[str, _Pending] = {}
        self.step_queue = f"outlive-steps-{uuid.uuid4().hex}"
        self.stats = _Stats()

    # -- lifecycle -----------------------------------------------------------------------------
    async def start(self) -> None:
        if self._client is not None:
            return  # ``async with await open_backend(url)`` calls start() twice
        cfg = self.config
        try:
            client = await asyncio.wait_for(
                Client.connect(cfg.target, namespace=cfg.namespace), timeout=cfg.retry_s)
        except (TimeoutError, RuntimeError, OSError) as exc:
            raise BackendUnavailable(
                f"{self.url}: cannot reach a Temporal server at {cfg.target} ({exc}); "
                f"start one, e.g. python -m outlive_temporal.devserver", url=self.url) from exc
        try:
            from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest

            await client.workflow_service.describe_namespace(
                DescribeNamespaceRequest(namespace=cfg.namespace))
        except RPCError as exc:
            if exc.status == RPCStatusCode.NOT_FOUND:
                raise ConfigError(f"{self.url}: namespace {cfg.namespace!r} does not exist",
                                  url=self.url) from exc
            raise BackendUnavailable(f"{self.url}: {exc}", url=self.url) from exc
        self._client = client
        runner: WorkflowRunner = UnsandboxedWorkflowRunner()
        if cfg.sandbox:
            runner = SandboxedWorkflowRunner(
                restrictions=SandboxRestrictions.default.with_passthrough_modules("outlive"))
        if cfg.eager:
            self.step_queue = cfg.task_queue
            one = Worker(client, task_queue=cfg.task_queue, workflows=[LedgerWorkflow],
                         workflow_runner=runner, max_concurrent_workflow_tasks=200,
                         activities=[self._make_activity()], max_concurrent_activities=5000,
                         graceful_shutdown_timeout=timedelta(seconds=0))
            self._workers = [one]
        else:
            ledger = Worker(client, task_queue=cfg.task_queue, workflows=[LedgerWorkflow],
                            workflow_runner=runner, max_concurrent_workflow_tasks=200)
            steps = Worker(client, task_queue=self.step_queue,
                           activities=[self._make_activity()], max_concurrent_activities=5000,
                           graceful_shutdown_timeout=timedelta(seconds=0))
            self._workers = [ledger, steps]
        self._runs = [asyncio.create_task(w.run()) for w in self._workers]

    async def close(self) -> None:
        workers, self._workers = self._workers, []
        runs, self._runs = self._runs, []
        for pend in list(self._pending.values()):
            if pend.task is not None and not pend.task.done():
                pend.task.cancel()
        await asyncio.gather(*(w.shutdown() for w in workers), return_exceptions=True)
        await asyncio.gather(*runs, return_exceptions=True)
        self._client = None

    def _c(self) -> Client:
        if self._client is None:
            raise BackendUnavailable(f"{self.url}: backend not started (use open_backend)")
        return self._client

    # -- ledger --------------------------------------------------------------------------------
    async def _update(self, work_id: str, name: str, arg: Any, update_id: str,
                      result_type: type[T], what: str) -> T:
        """One update on the work's ledger workflow, resent with the same id across reconnects;
        a ledger workflow that does not exist is ``NotFound``."""
        handle = self._c().get_workflow_handle(workflow_id(work_id))

        async def send() -> T:
            reply: T = await handle.execute_update(name, arg, id=update_id,
                                                   result_type=result_type)
            return reply

        try:
            return await self._retrying(what, send)
        except RPCError as exc:
            raise NotFound(f"work {work_id!r} is not open", work_id=work_id) from exc

    async def _retrying(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        """Ride out an unreachable or restarting server for ``retry_s``, then say so."""
        deadline = time.monotonic() + self.config.retry_s
        delay = 0.05
        while True:
            try:
                return await call()
            except WorkflowUpdateFailedError as exc:
                raise typed_error(exc.cause) or InvalidRecord(
                    f"the ledger workflow failed the update: {exc.cause}") from None
            except (WorkflowUpdateRPCTimeoutOrCancelledError, RPCError) as exc:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    # the SDK turns our caller's cancellation into an RPC error: re-raise it
                    raise asyncio.CancelledError() from exc
                if isinstance(exc, RPCError):
                    if exc.status == RPCStatusCode.NOT_FOUND:
                        raise
                    if exc.status not in _RETRYABLE:
                        raise BackendUnavailable(f"{self.url}: {what}: {exc}",
                                                 url=self.url) from exc
                last: Exception = exc
            if time.monotonic() >= deadline:
                raise BackendUnavailable(
                    f"{self.url}: {what}: server unreachable for {self.config.retry_s}s ({last}); "
                    f"nothing was written by this call", url=self.url) from last
            self.stats.retries += 1
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def execute(self, work_id: str, command: L.Command) -> L.Outcome:
        client = self._c()
        text = codec.dumps(command)
        size = len(text.encode())
        if size > MAX_COMMAND_BYTES:
            raise PayloadTooLarge(
                f"{type(command).__name__} is {size} bytes; Temporal refuses payloads over 2 MB: "
                f"store a reference", size=size, limit=MAX_COMMAND_BYTES)
        wid = workflow_id(work_id)
        update_id = uuid.uuid4().hex  # a retry after a lost reply is deduplicated within the run
        cfg = self.config

        async def send() -> str:
            if isinstance(command, L.OpenWork):
                op = WithStartWorkflowOperation(
                    LedgerWorkflow.run, LedgerArgs(work_id=work_id, can_after=cfg.can_after),
                    id=wid, task_queue=cfg.task_queue,
                    id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                    id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                    memo={"work_id": work_id})
                out: str = await client.execute_update_with_start_workflow(
                    "command", text, start_workflow_operation=op, id=update_id, result_type=str)
                return out
            handle = client.get_workflow_handle(wid)
            res: str = await handle.execute_update("command", text, id=update_id,
                                                 result_type=str)
            return res

        try:
            raw = await self._retrying(f"{type(command).__name__} on {work_id!r}", send)
        except RPCError as exc:
            raise NotFound(f"work {work_id!r} is not open", work_id=work_id) from exc
        self.stats.updates += 1
        outcome = codec.loads(raw)
        if not isinstance(outcome, L.Outcome):
            raise InvalidRecord(f"{work_id}: the ledger workflow answered {type(outcome).__name__}")
        return outcome

    async def load(self, work_id: str) -> WorkState | None:
        handle = self._c().get_workflow_handle(workflow_id(work_id))

        async def ask() -> str | None:
            res: str | None = await handle.query(LedgerWorkflow.state,
                                                 rpc_timeout=timedelta(seconds=10))
            return res

        try:
            raw = await self._retrying(f"load {work_id!r}", ask)
        except RPCError:
            return None
        if raw is None:
            return None
        st = codec.loads(raw)
        if not isinstance(st, WorkState) or st.work_id != work_id:
            raise InvalidRecord(f"the ledger workflow of {work_id!r} holds a corrupt state",
                                work_id=work_id)
        return st

    async def works(self) -> list[str]:
        """Running ledger workflows, from Temporal's visibility store (eventually consistent)."""
        client = self._c()
        out: set[str] = set()
        query = f"WorkflowType = '{LEDGER_WORKFLOW}' AND ExecutionStatus = 'Running'"
        async for wf in client.list_workflows(query):
            wid = work_id_of(wf.id)
            if wid is None:
                memo = await wf.memo()
                wid = str(memo.get("work_id", "")) or None
            if wid is not None:
                out.add(wid)
        return sorted(out)

    async def generation(self, work_id: str) -> int:
        """How many times the work's ledger workflow continued-as-new (for tests and docs)."""
        handle = self._c().get_workflow_handle(workflow_id(work_id))
        gen: int = await handle.query(LedgerWorkflow.generation)
        return gen

    # -- steps ---------------------------------------------------------------------------------
    def _make_activity(self) -> Callable[[str], Awaitable[str]]:
        pending = self._pending
        cfg = self.config

        @activity.defn(name=STEP_ACTIVITY)
        async def outlive_step(key: str) -> str:
            pend = pending.get(key)
            if pend is None:
                raise ApplicationError("no step body under this key in this process "
                                       "(its caller is gone)", type="StepLost", non_retryable=True)
            if pend.task is not None:
                raise ApplicationError("step body already started once", type="StepRepeated",
                                       non_retryable=True)
            pend.task = asyncio.ensure_future(pend.fn())
            interval = max(cfg.heartbeat_ms / 3000.0, 0.05)
            while True:
                done, _ = await asyncio.wait({pend.task}, timeout=interval)
                if done:
                    break
                if cfg.auto_heartbeat:
                    activity.heartbeat()
            if pend.task.cancelled():
                raise ApplicationError("step body abandoned by its caller", type="StepAbandoned",
                                       category=_BENIGN, non_retryable=True)
            exc = pend.task.exception()
            if exc is not None:
                raise ApplicationError(f"step body raised {type(exc).__name__}: {exc}",
                                       type="StepFailed", category=_BENIGN, non_retryable=True)
            try:
                text = codec.dumps(pend.task.result())
            except OutliveError:
                return "r:"
            return "v:" + text if len(text) <= INLINE_RESULT_BYTES else "r:"

        return outlive_step

    async def run_step(self, call: StepCall, fn: Callable[[], Awaitable[Any]]) -> Any:
        """Run the body once as an activity; Temporal never retries it.

        If Temporal gives up on the activity (heartbeat or start-to-close timeout) it will refuse
        the late completion on its own; the body's result is still handed back here, and the
        worker's journal write then meets outlive's fencing — the check Temporal cannot make.
        """
        result, _reply = await self._run(call, fn, None)
        return result

    async def run_and_record(self, call: StepCall, fn: Callable[[], Awaitable[Any]],
                             record: Callable[[Any], L.Command]) -> tuple[Any, L.Outcome]:
        """Run the body as an activity *and* journal its result in the same update.

        One round trip per journaled step instead of two (``run_step`` + ``RecordSteps``). The
        ledger still decides (fencing, declared inputs, pins, size): the workflow applies
        ``record(result)`` with the core ledger right after the activity completes, in the same
        workflow task, and a refusal raises the same typed error with no journal entry written.
        The command is built before dispatch (``record`` is called with a placeholder), so its
        ``at`` is the clock when the step was dispatched. If the result is too large to come
        back inline, or Temporal timed the activity out, the write is sent separately after the
        body returns — exactly the default ``run_step`` + ``execute`` path.
        """
        template = record(None)
        if not (isinstance(template, L.RecordSteps) and len(template.entries) == 1):
            return await super().run_and_record(call, fn, record)
        result, reply = await self._run(call, fn, codec.dumps(template))
        if reply.rejection is not None:
            raise error_from_dict(reply.rejection)
        if reply.outcome is not None:
            out = codec.loads(reply.outcome)
            if not isinstance(out, L.Outcome):
                raise InvalidRecord(f"{call.work_id}: the step update answered {out!r}")
            return result, out
        return result, await self.execute(call.work_id, record(result))

    async def run_and_record_many(
            self, calls: list[StepCall], fns: list[Callable[[], Awaitable[Any]]],
            records: list[Callable[[Any], L.Command]]) -> list[Any]:
        """Run a known sequence of steps with one ``steps`` update driving the whole batch.

        The ledger workflow runs the step activities back to back and applies each step's
        ``RecordSteps`` (fenced, by the core ledger) in the workflow task that received its
        result, before scheduling the next activity — so the client is not in the loop between
        steps. The batch stops at the first step the workflow could not journal: a refusal
        (e.g. ``StaleOwner``: the steps before stay journaled, the error is raised), a failed or
        timed-out activity, or a result too big to come back inline (journaled here with
        ``execute``, then the rest continues as a new batch). Like :meth:`run_and_record`, the
        commands are built before dispatch, so their ``at`` is the clock when the batch starts.
        """
        if len(calls) != len(fns) or len(calls) != len(records):
            raise ValueError("calls, fns and records must have the same length")
        templates = [record(None) for record in records]
        if not all(isinstance(t, L.RecordSteps) and len(t.entries) == 1 for t in templates) \
                or len({c.work_id for c in calls}) > 1:
            return await super().run_and_record_many(calls, fns, records)
        texts = [codec.dumps(t) for t in templates]
        results: list[Any] = []
        i = lost = 0
        while i < len(calls):
            j, size = i, 0
            while j < len(calls) and j - i < MAX_BATCH_STEPS \
                    and (j == i or size + len(texts[j]) + 200 < MAX_COMMAND_BYTES):
                size += len(texts[j]) + 200
                j += 1
            done, stop_result = await self._batch(calls[i:j], fns[i:j], texts[i:j])
            results.extend(done)
            i += len(done)
            if stop_result is _LOST:  # nothing ran for the stopping step: the rest goes again
                lost += 1
                if lost >= LOST_TASK_TRIES:
                    raise BackendUnavailable(
                        f"step {calls[i].step!r} of {calls[i].work_id!r}: {lost} activity tasks "
                        f"timed out before their body ran", work_id=calls[i].work_id)
                continue
            if isinstance(stop_result, tuple):  # journal the stopping step here, continue after
                value = stop_result[0]
                await self.execute(calls[i].work_id, records[i](value))
                results.append(value)
                i += 1
        return results

    async def _batch(self, calls: list[StepCall], fns: list[Callable[[], Awaitable[Any]]],
                     texts: list[str]) -> tuple[list[Any], tuple[Any] | object | None]:
        """One ``steps`` update. Returns the journaled results and, if the batch stopped on a
        step that ran but could not be journaled in the workflow, that step's result (``_LOST``:
        Temporal timed the stopping step out before its body started: nothing happened)."""
        self._c()  # not started: BackendUnavailable before any body is registered
        cfg = self.config
        pends = [_Pending(fn=fn) for fn in fns]
        keys = [uuid.uuid4().hex for _ in fns]
        for key, pend in zip(keys, pends, strict=True):
            self._pending[key] = pend
        req = BatchRequest(
            items=[BatchItem(key=k, step=c.step, attempt=c.attempt, record=t)
                   for k, c, t in zip(keys, calls, texts, strict=True)],
            task_queue=self.step_queue, heartbeat_ms=cfg.heartbeat_ms,
            start_to_close_ms=cfg.start_to_close_ms)
        work_id = calls[0].work_id
        try:
            reply = await self._update(work_id, "steps", req, f"steps-{keys[0]}", BatchReply,
                                       f"{len(calls)} steps of {work_id!r}")
            results: list[Any] = []
            for call, pend in zip(calls[:reply.journaled], pends, strict=False):
                assert pend.task is not None and pend.task.done()
                # the journaled value is the codec round trip of the body's result
                results.append(codec.loads(codec.dumps(pend.task.result())))
                self.stats.reports.append(StepReport(
                    work_id=call.work_id, attempt=call.attempt, step=call.step,
                    status="completed", inline=True))
            stop = reply.stop
            if stop is None:
                return results, None
            call, pend = calls[reply.journaled], pends[reply.journaled]
            if stop.status == "timed_out" and self._lost(keys[reply.journaled], pend):
                self.stats.reports.append(StepReport(
                    work_id=call.work_id, attempt=call.attempt, step=call.step, status="lost",
                    detail=stop.detail))
                return results, _LOST
            inline = stop.status == "completed" and (stop.result or "").startswith("v:")
            self.stats.reports.append(StepReport(
                work_id=call.work_id, attempt=call.attempt, step=call.step, status=stop.status,
                detail=stop.detail, inline=inline))
            if stop.rejection is not None:
                raise error_from_dict(stop.rejection)
            if pend.task is None:
                raise BackendUnavailable(
                    f"step {call.step!r} of {call.work_id!r}: the activity never ran "
                    f"({stop.status}: {stop.detail})", work_id=call.work_id)
            return results, (await pend.task,)
        except asyncio.CancelledError:
            for pend in pends:
                if pend.task is not None and not pend.task.done():
                    pend.task.cancel()
            raise
        finally:
            for key in keys:
                self._pending.pop(key, None)

    async def _run(self, call: StepCall, fn: Callable[[], Awaitable[Any]],
                   record: str | None) -> tuple[Any, StepReply]:
        """One step activity; dispatched again if Temporal timed it out before the body ran."""
        for _ in range(LOST_TASK_TRIES):
            out = await self._run_once(call, fn, record)
            if out is not None:
                return out
        raise BackendUnavailable(
            f"step {call.step!r} of {call.work_id!r}: {LOST_TASK_TRIES} activity tasks timed out "
            f"before the body ran", work_id=call.work_id)

    async def _run_once(self, call: StepCall, fn: Callable[[], Awaitable[Any]],
                        record: str | None) -> tuple[Any, StepReply] | None:
        """None: the task was lost before the body ran (nothing happened; dispatch again)."""
        self._c()  # not started: BackendUnavailable before any body is registered
        key = uuid.uuid4().hex
        pend = _Pending(fn=fn)
        self._pending[key] = pend
        cfg = self.config
        req = StepRequest(key=key, task_queue=self.step_queue, step=call.step,
                          attempt=call.attempt, heartbeat_ms=cfg.heartbeat_ms,
                          start_to_close_ms=cfg.start_to_close_ms, record=record)
        try:
            try:
                reply = await self._update(call.work_id, "step", req, f"step-{key}", StepReply,
                                           f"step {call.step!r} of {call.work_id!r}")
            except BackendUnavailable:
                if pend.task is None:
                    raise  # the body never ran: nothing happened
                reply = StepReply(status="unreachable")
            if reply.status == "timed_out" and self._lost(key, pend):
                self.stats.reports.append(StepReport(
                    work_id=call.work_id, attempt=call.attempt, step=call.step, status="lost",
                    detail=reply.detail))
                return None
            inline = reply.status == "completed" and (reply.result or "").startswith("v:")
            self.stats.reports.append(StepReport(
                work_id=call.work_id, attempt=call.attempt, step=call.step, status=reply.status,
                detail=reply.detail, inline=inline))
            if inline:
                assert reply.result is not None
                return codec.loads(reply.result[2:]), reply
            if pend.task is None:
                raise BackendUnavailable(
                    f"step {call.step!r} of {call.work_id!r}: the activity never ran "
                    f"({reply.status}: {reply.detail})", work_id=call.work_id)
            return await pend.task, reply
        except asyncio.CancelledError:
            if pend.task is not None and not pend.task.done():
                pend.task.cancel()
            raise
        finally:
            self._pending.pop(key, None)

    def _lost(self, key: str, pend: _Pending) -> bool:
        """Did Temporal time out a task whose body never started here? Then the body can never
        start for it (its key is withdrawn in the same step, with no await in between)."""
        if pend.task is not None:
            return False
        self._pending.pop(key, None)
        self.stats.lost += 1
        return True
