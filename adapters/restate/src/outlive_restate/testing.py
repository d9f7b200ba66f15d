"""``restate+handler://HOST:PORT?admin=PORT``: the conformance scenario run *inside* a handler.

The conformance harness holds, crashes and counts its model calls in its own process, so each
attempt's engine side runs in a handler served by that process: :class:`HandlerDrivenBackend`
serves one Service (``outlive_drive_<id>``) in-process and registers it once when it starts, as
a test registers its app. Each attempt of a work is an invocation of that handler (headers and
idempotency key as the dispatcher sets them), and everything the attempt's Worker does goes
through that invocation, with the same :class:`~outlive_restate.HandlerBackend` a user's handler
gets from :func:`outlive_restate.attempt`:

* a step is ``ctx.run_typed`` in the attempt's invocation, and its fenced journal write a durable
  call from inside it to the work's ledger object;
* every other write of the attempt (heartbeat, candidate, effect intent and confirmation,
  finish) is a durable call from inside it, with the harness's logical time as given;
* the controller's commands (open, publish, admit, unknown, stop, accept) and reads go through
  the ingress, as any controller's.

Every write asks the ledger to answer with the state it left (the :data:`~outlive_restate._ledger.ANSWER`
header): :meth:`HandlerDrivenBackend.answered` hands it to the conformance harness, which plays
every party of a run in this process and so knows when no other write came between; its next
read of the work is then that answer rather than another invocation.

So the outcome of every run must equal ``memory://``'s with the attempts' writes made from a
Restate handler. Not for production: the driven handler takes its operations from this process.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import httpx
import restate
from restate.retry_policy import InvocationRetryPolicy
from restate.serde import BytesSerde

from outlive import ledger as L
from outlive.backend import StepCall
from outlive.errors import BackendUnavailable, OutliveError
from outlive.records import WorkState

from . import _errors
from ._backend import RestateBackend
from ._engine import HEADER_ATTEMPT, HEADER_LEDGER, HEADER_TOKEN, HEADER_WORK, HandlerBackend
from ._ledger import ANSWER, EXECUTE, answer
from .server import RestateServer, free_port

__all__ = ["HandlerDrivenBackend", "RestateServer"]

_B = BytesSerde()
_ASK = {ANSWER: "state"}
#: An attempt's invocation ends after this long without an operation (a later one starts anew).
_IDLE = 5.0


class _Abandoned(Exception):
    """The caller gave up on this operation (its task was cancelled): write nothing."""


@dataclass
class _Op:
    kind: str                       # "step" | "run" | "execute"
    call: StepCall | None = None
    fn: Callable[[], Awaitable[Any]] | None = None
    record: Callable[[Any], L.Command] | None = None
    command: L.Command | None = None
    future: asyncio.Future[Any] = field(default_factory=lambda: asyncio.get_running_loop()
                                        .create_future())
    cancelled: bool = False
    error: BaseException | None = None


@dataclass
class _Box:
    owner: HandlerDrivenBackend
    work_id: str
    attempt: int
    token: int
    queue: asyncio.Queue[_Op | None] = field(default_factory=asyncio.Queue)
    open: bool = True
    sent: asyncio.Task[Any] | None = None


_BOXES: dict[str, _Box] = {}


async def _serve_op(backend: HandlerBackend, box: _Box, op: _Op) -> None:
    if op.kind == "execute":
        assert op.command is not None
        op.future.set_result(await box.owner.write(backend, box.work_id, op.command))
        return
    assert op.call is not None and op.fn is not None
    fn = op.fn

    async def body() -> Any:
        try:
            return await fn()
        except Exception as exc:   # the body's own failure, handed back with its own type
            op.error = exc
            raise restate.TerminalError(f"step body raised {type(exc).__name__}: {exc}") from None

    result = await backend.run_step(op.call, body)
    if op.cancelled:
        raise _Abandoned()
    if op.kind == "run":
        op.future.set_result(result)
        return
    assert op.record is not None
    outcome = await box.owner.write(backend, box.work_id, op.record(result))
    op.future.set_result((result, outcome))


def drive_service(name: str, ledger: str) -> restate.Service:
    """The Service whose invocations are the harness's attempts (served in its process)."""
    svc = restate.Service(
        name, description="outlive conformance: attempts driven from the harness's process",
        inactivity_timeout=timedelta(hours=1), abort_timeout=timedelta(hours=1),
        invocation_retry_policy=InvocationRetryPolicy(max_attempts=1, on_max_attempts="kill"))

    @svc.handler(input_serde=_B, output_serde=_B, accept="*/*")
    async def attempt(ctx: restate.Context, req: bytes) -> bytes:
        box = _BOXES.get(req.decode())
        if box is None:
            return b"gone"
        backend = HandlerBackend(ctx, ledger=ledger, stamp=False)
        op: _Op | None = None
        try:
            while True:
                try:
                    op = await asyncio.wait_for(box.queue.get(), _IDLE)
                except TimeoutError:
                    return b"idle"
                if op is None:
                    return b"closed"
                try:
                    await _serve_op(backend, box, op)
                except _Abandoned:
                    if not op.future.done():
                        op.future.cancel()
                except restate.TerminalError as exc:
                    if not op.future.done():
                        op.future.set_exception(op.error or exc)
                except OutliveError as exc:
                    if not op.future.done():
                        op.future.set_exception(exc)
                if op.kind == "execute" and isinstance(op.command, L.Finish):
                    return b"finished"
        finally:
            box.open = False
            if op is not None and not op.future.done():
                # the invocation ended under it (a broken connection; Restate does not retry
                # these invocations): say so, typed, rather than leave the caller waiting
                op.future.set_exception(BackendUnavailable(
                    f"the attempt's invocation ended during {op.kind}"))

    return svc


def _drain(queue: asyncio.Queue[_Op | None]) -> list[_Op | None]:
    out = []
    while not queue.empty():
        out.append(queue.get_nowait())
    return out


class HandlerDrivenBackend(RestateBackend):
    """Restate with every attempt's writes made from inside a handler invocation (see module)."""

    capabilities = frozenset({"atomic-commands", "durable", "engine-steps"})
    #: A step alone (``run_step``) is a ``ctx.run_typed`` entry of the attempt's invocation: it
    #: writes nothing to the ledger (the conformance harness keeps what it read across it).
    steps_write_ledger = False

    def __init__(self, url: str) -> None:
        super().__init__(url.replace("restate+handler://", "restate://", 1))
        self.url = url
        self.service = f"outlive_drive_{uuid.uuid4().hex[:10]}"
        self._boxes: dict[tuple[str, int, int], _Box] = {}
        self._seq = itertools.count()
        self._stop: asyncio.Event | None = None
        self._serving: asyncio.Task[None] | None = None
        #: The attempts' invocations, each held open for the attempt's life, on their own
        #: connections: in the commands' pool they would make every request scan them.
        self._held: httpx.AsyncClient | None = None
        #: Per work: the last state read or answered (whose journal a write's answer extends),
        #: and the state the last write answered with, until :meth:`answered` takes it.
        self._known: dict[str, WorkState] = {}
        self._answers: dict[str, WorkState] = {}

    async def start(self) -> None:
        await super().start()
        self._held = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=5.0),
                                       limits=httpx.Limits(max_connections=None,
                                                           max_keepalive_connections=16))
        from hypercorn.asyncio import serve
        from hypercorn.config import Config

        if self.config.admin is None:
            raise BackendUnavailable(f"{self.url}: the handler driver registers its app: ?admin=")
        port = free_port()
        config = Config()
        config.bind = [f"127.0.0.1:{port}"]
        config.accesslog = None
        config.errorlog = None
        config.graceful_timeout = 0.2
        self._stop = asyncio.Event()
        app = restate.app([drive_service(self.service, self.ledger)])
        self._serving = asyncio.ensure_future(serve(app, config,
                                                    shutdown_trigger=self._stop.wait))
        http = self._client()
        deadline = time.monotonic() + 30
        while True:   # listening, then registered once, then callable (healthy is not ready)
            try:
                r = await http.post(f"{self.config.admin}/deployments",
                                    json={"uri": f"http://127.0.0.1:{port}", "force": False})
                if r.status_code in (200, 201):
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise BackendUnavailable(f"{self.url}: could not register the driven handler")
            await asyncio.sleep(0.05)
        while (r := await http.post(f"{self.ingress}/{self.service}/attempt", content=b"probe",
                                    headers={"content-type": "application/octet-stream"})
               ).status_code != 200:
            if time.monotonic() > deadline:
                raise BackendUnavailable(f"{self.url}: the driven handler never answered "
                                         f"({r.status_code} {r.text[:200]})")
            await asyncio.sleep(0.05)

    async def close(self) -> None:
        for box in self._boxes.values():
            if box.open:
                box.queue.put_nowait(None)
        for box in self._boxes.values():
            if box.sent is not None:
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await asyncio.wait_for(box.sent, 5)
            _BOXES.pop(f"{id(box)}", None)
        self._boxes.clear()
        if self._stop is not None:
            self._stop.set()
        if self._serving is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self._serving, 5)
        if self._held is not None:
            await self._held.aclose()
            self._held = None
        await super().close()

    def answered(self, work_id: str) -> WorkState | None:
        """The state the last write to ``work_id`` left, as the ledger answered it (once)."""
        return self._answers.pop(work_id, None)

    def _answer(self, work_id: str, raw: bytes) -> L.Outcome:
        outcome, state = answer(raw, self._known.get(work_id))
        if state is not None:
            self._known[work_id] = self._answers[work_id] = state
        return outcome

    async def write(self, backend: HandlerBackend, work_id: str, command: L.Command) -> L.Outcome:
        """``command`` as a durable call from the attempt's invocation, answered with the state."""
        self._answers.pop(work_id, None)
        return self._answer(work_id, await backend._call(EXECUTE, work_id, _errors.dumps(command),
                                                         headers=_ASK))

    async def load(self, work_id: str) -> WorkState | None:
        state = await super().load(work_id)
        if state is not None:
            self._known[work_id] = state
        return state

    def _box(self, work_id: str, attempt: int, token: int) -> _Box:
        box = self._boxes.get((work_id, attempt, token))
        if box is not None and box.open:
            return box
        box = _Box(self, work_id, attempt, token)
        name = f"{id(box)}"
        _BOXES[name] = box
        self._boxes[(work_id, attempt, token)] = box
        headers = {HEADER_WORK: work_id, HEADER_ATTEMPT: str(attempt), HEADER_TOKEN: str(token),
                   HEADER_LEDGER: self.ledger, "content-type": "application/octet-stream",
                   "idempotency-key": f"outlive:{work_id}#{attempt}#{next(self._seq)}"}

        async def send() -> None:
            try:
                if self._held is None:
                    raise BackendUnavailable(f"{self.url}: backend not started")
                await self._held.post(f"{self.ingress}/{self.service}/attempt",
                                      content=name.encode(), headers=headers)
            finally:
                box.open = False
                _BOXES.pop(name, None)
                left = [op for op in _drain(box.queue) if op is not None and not op.future.done()]
                if left:   # operations that arrived as the invocation ended: a new invocation
                    nxt = self._box(work_id, attempt, token)
                    for op in left:
                        nxt.queue.put_nowait(op)

        box.sent = asyncio.ensure_future(send())
        return box

    async def _ask(self, work_id: str, attempt: int, token: int, op: _Op) -> Any:
        box = self._box(work_id, attempt, token)
        box.queue.put_nowait(op)
        try:
            return await asyncio.shield(op.future)
        except asyncio.CancelledError:
            op.cancelled = True
            raise

    async def execute(self, work_id: str, command: L.Command) -> L.Outcome:
        token = getattr(command, "token", None)
        if token is None:   # a controller's command, through the ingress
            self._answers.pop(work_id, None)
            return self._answer(work_id, await self._execute(work_id, command, _ASK))
        out: L.Outcome = await self._ask(work_id, command.attempt, token,  # type: ignore[union-attr]
                                         _Op("execute", command=command))
        return out

    async def run_step(self, call: StepCall, fn: Callable[[], Awaitable[Any]]) -> Any:
        return await self._ask(call.work_id, call.attempt, call.token, _Op("run", call=call, fn=fn))

    async def run_and_record(self, call: StepCall, fn: Callable[[], Awaitable[Any]],
                             record: Callable[[Any], L.Command]) -> tuple[Any, L.Outcome]:
        got: tuple[Any, L.Outcome] = await self._ask(
            call.work_id, call.attempt, call.token, _Op("step", call=call, fn=fn, record=record))
        return got
