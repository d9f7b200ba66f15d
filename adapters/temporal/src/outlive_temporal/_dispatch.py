"""The Temporal dispatcher: Temporal runs each admitted attempt and drives the takeover.

For a work followed by outlive's :class:`~outlive.supervisor.Supervisor` whose ledger lives on any
backend (``sqlite://``, ``temporal://``, ...). The supervisor opens the work, admits the first
attempt and calls :meth:`TemporalDispatcher.dispatch`, which starts one workflow per work
(``OutliveSupervise``, registered on the user's workers by :class:`~outlive_temporal.OutlivePlugin`).
From then on the engine does the rest, with its own timers and its own cancel:

* each attempt runs as an activity (``outlive_run_attempt``: the core's ``run_attempt``, the
  attempt function imported by name) whose **heartbeat timeout is the lease** (the activity
  heartbeats every ``lease.heartbeat_interval`` while the attempt runs). It holds no
  controller: beside it the workflow runs ``outlive_judge_attempt``, another activity, which
  judges the candidates the attempt submits on the way (so an attempt waiting in
  ``ctx.submit`` needs no supervisor process) with the controller's credential, which the
  attempt's activity never holds;
* when the activity times out, fails or ends, an activity (``outlive_next_attempt``) applies the
  supervisor's own rules to the ledger — mark the attempt ``unknown``, judge, admit the successor
  (capped per version, with the definition's backoff as a durable timer) — and the workflow runs
  the successor; ``Supervisor.stop`` becomes a signal that cancels the attempt's activity.

So the supervisor process may die once the first attempt is dispatched: the work still ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import quote

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.common import RetryPolicy, WorkflowIDConflictPolicy
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from outlive import codec
    from outlive.backend import Backend, open_backend
    from outlive.errors import ConfigError, GaveUp
    from outlive.ledger import is_live
    from outlive.records import Contract, Policy
    from outlive.supervisor import (
        Assignment,
        Dispatcher,
        Lease,
        Supervisor,
        WorkDefinition,
        run_attempt,
    )

__all__ = ["SUPERVISE_WORKFLOW", "AttemptArgs", "NextAttempt", "SuperviseWorkflow",
           "TemporalDispatcher", "judge_attempt_activity", "next_attempt_activity",
           "run_attempt_activity"]

SUPERVISE_WORKFLOW = "OutliveSupervise"


@dataclass
class AttemptArgs:
    """One admitted attempt of a work, by name: what any worker needs to run or follow it."""

    backend_url: str
    definition: dict[str, Any]
    attempt: int
    token: int
    pinned_version: str | None


@dataclass
class NextAttempt:
    """What the ledger says after an attempt: done, a successor, wait, or give up."""

    done: bool = False
    successor: AttemptArgs | None = None
    wait_ms: int = 0
    gave_up: str = ""


def definition_to_data(d: WorkDefinition) -> dict[str, Any]:
    """A definition that can cross processes: every callable must be registered by name."""
    for what, ref in (("attempt", d.attempt), ("assessor", d.assessor), ("inputs", d.inputs)):
        if ref is not None and not isinstance(ref, str):
            raise ConfigError(f"the Temporal dispatcher runs attempts on other processes: give "
                              f"{what} as 'module:function', not {ref!r}", field=what)
    if d.complete is not None:
        raise ConfigError("the Temporal dispatcher cannot ship a 'complete' callable", field="complete")
    return {"work_id": d.work_id, "attempt": d.attempt, "assessor": d.assessor, "inputs": d.inputs,
            "contract": codec.dumps(d.contract), "policy": codec.dumps(d.policy),
            "persist": d.persist, "max_attempts": d.max_attempts, "backoff": d.backoff,
            "max_backoff": d.max_backoff, "args": list(d.args),
            "lease": [d.lease.heartbeat_interval, d.lease.missed_beats, d.lease.start_grace]}


def definition_from_data(data: dict[str, Any]) -> WorkDefinition:
    contract = codec.loads(data["contract"])
    policy = codec.loads(data["policy"])
    assert isinstance(contract, Contract) and isinstance(policy, Policy)
    beat, missed, grace = data["lease"]
    return WorkDefinition(
        work_id=data["work_id"], attempt=data["attempt"], contract=contract,
        assessor=data["assessor"], inputs=data["inputs"], policy=policy, persist=data["persist"],
        lease=Lease(heartbeat_interval=beat, missed_beats=missed, start_grace=grace),
        max_attempts=data["max_attempts"], backoff=data["backoff"],
        max_backoff=data["max_backoff"], args=tuple(data["args"]))


_BACKENDS: dict[str, Backend] = {}
_OPENING = asyncio.Lock()


async def _backend(url: str) -> Backend:
    """One backend per URL per worker process (a ``temporal://`` one starts its own workers)."""
    async with _OPENING:
        if url not in _BACKENDS:
            _BACKENDS[url] = await open_backend(url)
        return _BACKENDS[url]


class _Capture(Dispatcher):
    """What the supervisor's rules would dispatch, captured for the workflow to run."""

    #: The attempt travels as activity arguments, which Temporal keeps in its history: a token's
    #: secret part must not go there, so these attempts are admitted by the epoch alone.
    carries_secret = False

    def __init__(self) -> None:
        self.assigned: list[Assignment] = []

    async def dispatch(self, assignment: Assignment) -> None:
        self.assigned.append(assignment)


def _args_of(a: Assignment, data: dict[str, Any]) -> AttemptArgs:
    return AttemptArgs(backend_url=a.backend_url, definition=data, attempt=a.attempt,
                       token=a.token, pinned_version=a.pinned_version)


@activity.defn(name="outlive_run_attempt")
async def run_attempt_activity(args: AttemptArgs) -> None:
    """Run one attempt here; the activity heartbeat is its lease. It holds no controller (no
    supervisor, no credential): ``outlive_judge_attempt`` judges its candidates."""
    d = definition_from_data(args.definition)
    backend = await _backend(args.backend_url)
    assignment = Assignment(backend_url=args.backend_url, work_id=d.work_id, attempt=args.attempt,
                            token=args.token, pinned_version=args.pinned_version,
                            function=d.attempt_ref, definition=d)

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(d.lease.heartbeat_interval / 1000)

    lease = asyncio.create_task(beat())
    try:
        await run_attempt(backend, assignment)
    finally:
        lease.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await lease


@activity.defn(name="outlive_judge_attempt")
async def judge_attempt_activity(args: AttemptArgs) -> None:
    """The controller beside a running attempt: judges the candidates it submits, every
    heartbeat interval, until the workflow cancels it (the attempt ended)."""
    d = definition_from_data(args.definition)
    backend = await _backend(args.backend_url)
    sup = Supervisor(backend, d, _Capture())
    while True:
        activity.heartbeat()
        with contextlib.suppress(Exception):   # a judge that fails now judges next beat
            st = await backend.load(d.work_id)
            if st is not None and st.candidates:
                await sup.judge(st)
        await asyncio.sleep(d.lease.heartbeat_interval / 1000)


@activity.defn(name="outlive_next_attempt")
async def next_attempt_activity(args: AttemptArgs, silent: bool) -> NextAttempt:
    """The supervisor's rules after an attempt ended or went silent, applied to the ledger."""
    d = definition_from_data(args.definition)
    backend = await _backend(args.backend_url)
    capture = _Capture()
    sup = Supervisor(backend, d, capture)
    if silent:
        await sup.controller.mark_unknown(d.work_id, args.attempt)
    st = await backend.load(d.work_id)
    assert st is not None
    if st.candidates:
        await sup.judge(st)
    try:
        status = await sup.succeed()
    except GaveUp as exc:
        return NextAttempt(gave_up=str(exc))
    if capture.assigned:
        return NextAttempt(successor=_args_of(capture.assigned[-1], args.definition))
    cur = status.state.current_attempt
    if status.complete and not is_live(cur):
        return NextAttempt(done=True)
    if status.backoff_left:
        return NextAttempt(wait_ms=status.backoff_left)
    if cur is not None and is_live(cur) and cur.number > args.attempt:
        # a retried activity whose first try admitted already: follow that attempt
        return NextAttempt(successor=_args_of(Assignment.of(backend, d, cur), args.definition))
    if cur is not None and is_live(cur) and cur.number == args.attempt:
        return NextAttempt(wait_ms=d.lease.heartbeat_interval)   # still working elsewhere
    return NextAttempt(wait_ms=d.lease.heartbeat_interval)


@workflow.defn(name=SUPERVISE_WORKFLOW)
class SuperviseWorkflow:
    """One per work: runs its attempts as activities; Temporal's timers drive the takeover."""

    def __init__(self) -> None:
        self._stop: set[int] = set()
        self._current = 0

    @workflow.run
    async def run(self, first: AttemptArgs) -> str:
        cur = first
        while True:
            self._current = cur.attempt
            beat, missed, _grace = cur.definition["lease"]
            handle = workflow.start_activity(
                run_attempt_activity, cur, activity_id=f"attempt-{cur.attempt}-{cur.token}",
                heartbeat_timeout=timedelta(milliseconds=beat * missed),
                start_to_close_timeout=timedelta(days=7),
                retry_policy=RetryPolicy(maximum_attempts=1))
            judge = workflow.start_activity(
                judge_attempt_activity, cur, activity_id=f"judge-{cur.attempt}-{cur.token}",
                heartbeat_timeout=timedelta(milliseconds=beat * missed),
                start_to_close_timeout=timedelta(days=7),
                cancellation_type=ActivityCancellationType.TRY_CANCEL,
                retry_policy=RetryPolicy(maximum_interval=timedelta(milliseconds=beat * missed)))
            number = cur.attempt
            await workflow.wait_condition(functools.partial(self._ended, handle, number))
            judge.cancel()
            if not handle.done():
                handle.cancel()
            silent = False
            try:
                await handle
            except ActivityError:
                silent = number not in self._stop   # timed out or raised: it went silent
            except asyncio.CancelledError:
                pass
            while True:
                nxt = await workflow.execute_activity(
                    next_attempt_activity, args=[cur, silent],
                    start_to_close_timeout=timedelta(minutes=5))
                silent = False   # marked once; a retry of the loop must not mark again
                if nxt.wait_ms and nxt.successor is None:
                    await workflow.sleep(timedelta(milliseconds=nxt.wait_ms))
                    continue
                break
            if nxt.gave_up:
                raise ApplicationError(nxt.gave_up, type="GaveUp", non_retryable=True)
            if nxt.done or nxt.successor is None:
                return f"done after attempt #{cur.attempt}"
            cur = nxt.successor

    def _ended(self, handle: Any, number: int) -> bool:
        return bool(handle.done()) or number in self._stop

    @workflow.signal(name="outlive_stop_attempt")
    def stop_attempt(self, attempt: int) -> None:
        self._stop.add(attempt)

    @workflow.query(name="outlive_current_attempt")
    def current_attempt(self) -> int:
        return self._current


def supervise_workflow_id(work_id: str) -> str:
    return "outlive-supervise:" + quote(work_id, safe="")


class TemporalDispatcher(Dispatcher):
    """Hands a work's attempts to Temporal: the engine detects silence and takes over itself."""

    drives_takeover = True
    #: As for the engine's own successors: no secret in Temporal's history (epoch alone).
    carries_secret = False

    def __init__(self, client: Client, task_queue: str) -> None:
        self.client = client
        self.task_queue = task_queue

    async def dispatch(self, assignment: Assignment) -> None:
        args = AttemptArgs(backend_url=assignment.backend_url,
                           definition=definition_to_data(assignment.definition),
                           attempt=assignment.attempt, token=assignment.token,
                           pinned_version=assignment.pinned_version)
        await self.client.start_workflow(
            SuperviseWorkflow.run, args, id=supervise_workflow_id(assignment.work_id),
            task_queue=self.task_queue, id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING)

    async def stop(self, assignment: Assignment) -> None:
        with contextlib.suppress(Exception):   # best effort: fencing is the guarantee
            await self.client.get_workflow_handle(supervise_workflow_id(assignment.work_id)) \
                .signal(SuperviseWorkflow.stop_attempt, assignment.attempt)
