"""The Temporal plugin: outlive on the user's own workers, clients and replayers.

``Client.connect(..., plugins=[OutlivePlugin()])`` and ``Worker(client, ...)`` (a worker inherits
its client's plugins) are all a user adds. The plugin

* registers outlive's ledger workflow (the client-driven shape) and the Temporal dispatcher's
  workflow and activities (:class:`~outlive_temporal.TemporalDispatcher`) beside the user's own;
* lets ``outlive`` through the workflow sandbox (the ledger is pure and deterministic; the
  sandbox stays on for the user's code);
* makes an ``OutliveError`` raised in workflow code fail the workflow with its type, instead of
  failing the workflow task over and over;
* adds an interceptor that carries a :class:`~outlive_temporal.Work`'s ledger across
  continue-as-new (the user's ``run`` keeps its own signature);
* wraps every activity a step or an effect started (outlive's activity id) so that it heartbeats
  on the user's behalf while it runs (an alive step is never silence; a paused or dead worker
  still is), and so that a non-retryable error (``outlive.NonRetryable``, outlive's own
  programming errors) reaches Temporal as ``ApplicationError(non_retryable=True)`` under its
  own type name;
* with ``store=``, puts a payload codec on the client's data converter that keeps large payloads
  (step results, the carried ledger) in the store and only their references in history.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import typing
from collections.abc import Sequence
from typing import Any

import temporalio.converter
import temporalio.worker
from temporalio import activity, workflow
from temporalio.exceptions import ApplicationError
from temporalio.plugin import SimplePlugin
from temporalio.worker import (
    ActivityInboundInterceptor,
    ActivityOutboundInterceptor,
    ExecuteActivityInput,
    ExecuteWorkflowInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowRunner,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

import outlive
from outlive._failures import CALLED_WRONG
from outlive.controller import default_credential
from outlive.errors import InvalidRecord, OutliveError, Rejected

from ._dispatch import (
    SuperviseWorkflow,
    judge_attempt_activity,
    next_attempt_activity,
    run_attempt_activity,
)
from ._engine import CARRY_KEY, Work, _Carry, parse_activity_id
from ._store import BlobStore, StoreCodec
from ._workflow import LedgerWorkflow

__all__ = ["OutlivePlugin"]

_PASSTHROUGH = ("outlive", "outlive_temporal")


def _runner(runner: WorkflowRunner | None) -> WorkflowRunner:
    if runner is None:
        raise ValueError("the outlive plugin needs the worker's workflow runner")
    if isinstance(runner, SandboxedWorkflowRunner):
        return dataclasses.replace(
            runner, restrictions=runner.restrictions.with_passthrough_modules(*_PASSTHROUGH))
    return runner


def _run_hints(run_fn: Any) -> list[Any]:
    params = list(inspect.signature(run_fn).parameters.values())[1:]  # drop self
    try:
        hints = typing.get_type_hints(run_fn)
    except Exception:
        hints = {}
    return [hints.get(p.name) for p in params]


class _CarryInbound(WorkflowInboundInterceptor):
    #: The store codec's threshold (0: no store).
    store = 0
    #: The workers' controller secret (None: works open without a credential).
    secret: str | None = None

    async def execute_workflow(self, input: ExecuteWorkflowInput) -> Any:
        if isinstance(input.type, type) and issubclass(input.type, Work):
            args = list(input.args)
            hints = _run_hints(input.run_fn)
            inst = workflow.instance()
            inst.__dict__["_outlive_store"] = self.store
            inst.__dict__["_outlive_secret"] = self.secret
            n = len(hints)
            if len(args) > n and isinstance(args[n], dict) and CARRY_KEY in args[n]:
                raw = dict(args[n][CARRY_KEY])
                k = int(raw.get("chunks", 0))
                raw["journal"] = [str(c) for c in args[n + 1:n + 1 + k]]
                raw["blobs"] = [str(b) for b in args[n + 1 + k:]]
                inst.__dict__["_outlive_carry"] = _Carry(**raw)
                # the payload count did not match the run's parameters, so the SDK decoded the
                # user's arguments without type hints: decode them again with the hints
                conv = workflow.payload_converter()
                args = [conv.from_payloads(conv.to_payloads([a]), [h])[0] if h is not None else a
                        for a, h in zip(args[:n], hints, strict=True)]
            inst.__dict__["_outlive_args"] = list(args)
            input = dataclasses.replace(input, args=args)
        return await self.next.execute_workflow(input)


#: Task tokens of running step activities whose worker plays dead (``testing.go_silent``): the
#: wrapper stops beating for them, as it would in a paused process.
QUIET: set[bytes] = set()


def non_retryable(exc: BaseException) -> bool:
    """Errors no retry can mend: the user's :class:`outlive.NonRetryable`, a ``TypeError`` from
    calling the activity with arguments it does not take (one raised inside it is retried, as
    outlive's runtime does), and outlive's refusals (``InvalidRecord``, ``UndeclaredInput``,
    ``StaleOwner``, ...) - the same code fails the same way again."""
    return (isinstance(exc, (outlive.NonRetryable, InvalidRecord, Rejected))
            or bool(getattr(exc, CALLED_WRONG, False)))


def _mark_called_wrong(exc: BaseException, fn: Any, args: Sequence[Any]) -> None:
    """Mark a ``TypeError`` that came from calling ``fn`` with ``args``, not from inside it."""
    if not isinstance(exc, TypeError) or isinstance(exc, OutliveError):
        return
    try:
        inspect.signature(fn).bind(*args)
    except TypeError:
        setattr(exc, CALLED_WRONG, True)
    except ValueError:   # no signature to read: say nothing
        pass


class _StepOutbound(ActivityOutboundInterceptor):
    """Remembers the user's own heartbeat details, so the wrapper's beats repeat them."""

    details: tuple[Any, ...] = ()

    def heartbeat(self, *details: Any) -> None:
        self.details = details
        self.next.heartbeat(*details)


class _StepInbound(ActivityInboundInterceptor):
    """Heartbeats for a step's activity while it runs; names its non-retryable errors."""

    outbound: _StepOutbound

    def init(self, outbound: ActivityOutboundInterceptor) -> None:
        self.outbound = _StepOutbound(outbound)
        super().init(self.outbound)

    async def _beat(self, every: float, token: bytes) -> None:
        while True:
            await asyncio.sleep(every)
            if token not in QUIET:
                # past the user's outbound: a beat is not the user's call, and it repeats their
                # last details (Temporal keeps only the latest)
                self.outbound.next.heartbeat(*self.outbound.details)

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        if parse_activity_id(info.activity_id) is None:
            return await self.next.execute_activity(input)
        timeout = info.heartbeat_timeout
        beat = None
        if timeout:
            # the SDK throttles sends to 80 % of the timeout; a beat every quarter keeps one due
            beat = asyncio.ensure_future(self._beat(timeout.total_seconds() / 4, info.task_token))
        try:
            return await self.next.execute_activity(input)
        except Exception as exc:
            _mark_called_wrong(exc, input.fn, input.args)
            if non_retryable(exc) and not (isinstance(exc, ApplicationError)
                                           and exc.non_retryable):
                raise ApplicationError(str(exc), type=type(exc).__name__,
                                       non_retryable=True) from exc
            raise
        finally:
            if beat is not None:
                beat.cancel()
            QUIET.discard(info.task_token)


class _Interceptor(Interceptor):
    def __init__(self, store: int, credential: str | None, keyless: bool) -> None:
        self.store = store
        self.credential = credential
        self.keyless = keyless

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _StepInbound(next)

    def workflow_interceptor_class(
            self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor]:
        del input
        store = self.store
        # read when a worker (or a replayer) is built, never by a client alone
        secret = None if self.keyless else self.credential or default_credential()

        class Inbound(_CarryInbound):
            pass

        Inbound.store = store
        Inbound.secret = secret
        return Inbound


class OutlivePlugin(SimplePlugin):
    """outlive's Temporal plugin. ``store``: where large payloads live (by reference).

    ``credential`` is the workers' controller secret (default: this user's controller key,
    ``OUTLIVE_CONTROLLER_KEY`` or the per-user key file): each :class:`~outlive_temporal.Work`
    derives its own credential from it in workflow code and issues the controller's commands
    with it; activities never receive it. Every worker and replayer of a task queue needs the
    same one. ``keyless=True`` opens works without a credential (anyone may then send the
    controller's commands, as before the credential existed).
    """

    def __init__(self, *, store: BlobStore | None = None, threshold: int = 16 * 1024,
                 credential: str | None = None, keyless: bool = False) -> None:
        if credential is not None and (type(credential) is not str or not credential):
            raise InvalidRecord("credential must be a non-empty string", field="credential")
        self.store = store
        converter: Any = None
        if store is not None:
            codec = StoreCodec(store, threshold=threshold)

            def converter(existing: temporalio.converter.DataConverter | None) \
                    -> temporalio.converter.DataConverter:
                base = existing or temporalio.converter.DataConverter.default
                return dataclasses.replace(base, payload_codec=codec)

        failures: Sequence[type[BaseException]] = [OutliveError]
        super().__init__(
            "outlive.OutlivePlugin",
            data_converter=converter,
            workflows=[LedgerWorkflow, SuperviseWorkflow],
            activities=[run_attempt_activity, judge_attempt_activity, next_attempt_activity],
            workflow_runner=_runner,
            interceptors=[_Interceptor(threshold if store is not None else 0, credential,
                                       keyless)],
            workflow_failure_exception_types=failures,
        )

    def configure_worker(self, config: temporalio.worker.WorkerConfig) \
            -> temporalio.worker.WorkerConfig:
        # a worker built without an explicit runner gets the sandboxed default: let outlive in
        config.setdefault("workflow_runner", SandboxedWorkflowRunner())
        return super().configure_worker(config)
