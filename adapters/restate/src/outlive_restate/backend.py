"""``restate://HOST:INGRESS_PORT?admin=ADMIN_PORT``: outlive's ledgers as Restate Virtual Objects.

Every ledger command is one call to the exclusive handler ``outlive_ledger/{work id}/execute``
(see :mod:`outlive_restate.services`), sent with a fresh Restate idempotency key: if the
connection breaks (server restart, network blip) the call is retried with the same key, and Restate
either attaches to the invocation already running or returns its stored result, so a retry never
applies a command twice. Reads go through the shared handler ``load``.

Steps run as ``ctx.run_typed`` entries of a step service that this process serves itself (an
in-process hypercorn deployment, registered on first use) because a step body is a Python closure
that cannot leave the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import httpx

from outlive import codec
from outlive import ledger as L
from outlive.backend import Backend, StepCall
from outlive.errors import (
    BackendUnavailable,
    ConfigError,
    InvalidRecord,
    OutliveError,
    StaleOwner,
    error_from_dict,
)
from outlive.records import Attempt, WorkState

from .services import (
    ERROR_PREFIX,
    LEDGER,
    PENDING,
    Pending,
    make_step_service,
)

__all__ = ["RestateBackend", "free_port", "parse_url", "serve_in_process"]


def parse_url(url: str) -> tuple[str, str]:
    """``restate://127.0.0.1:8080?admin=9070`` -> (ingress base URL, admin base URL)."""
    parts = urlsplit(url)
    if parts.scheme != "restate" or not parts.hostname:
        raise ConfigError(f"{url}: expected restate://HOST:INGRESS_PORT?admin=ADMIN_PORT", url=url)
    host = parts.hostname
    try:
        port = parts.port or 8080
        q = parse_qs(parts.query)
        admin = q.get("admin", ["9070"])[0]
        admin_url = admin if "://" in admin else f"http://{host}:{int(admin)}"
    except ValueError as exc:
        raise ConfigError(f"{url}: {exc}", url=url) from exc
    return f"http://{host}:{port}", admin_url.rstrip("/")


def free_port() -> int:
    """A free loopback TCP port (the tiny race with other binders is accepted)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RestateBackend(Backend):
    """The ledger in Restate K/V state, one Virtual Object per work; steps as journal entries."""

    capabilities = frozenset({"atomic-commands", "durable", "multi-process", "engine-steps",
                              "durable-timers"})

    #: How long a command keeps retrying (same idempotency key) while the server is unreachable.
    retry_for: float = 30.0

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.ingress, self.admin = parse_url(url)
        q = parse_qs(urlsplit(url).query)
        if "retry_for" in q:
            self.retry_for = float(q["retry_for"][0])
        #: How Restate talks to this process's step service: "bidi" (h2c, the default) or
        #: "request_response" (HTTP/1.1; replays the journal at each step: slower).
        self.steps_protocol = q.get("steps_protocol", ["bidi"])[0]
        if self.steps_protocol not in ("bidi", "request_response"):
            raise ConfigError(f"{url}: steps_protocol is bidi or request_response", url=url)
        #: How a step's journal write travels (``run_and_record``): "overlap" (the default: the
        #: ledger call starts as soon as Restate acknowledged the step's entry, while the step
        #: invocation ends) or "inside" (the step invocation makes the ledger call itself).
        self.step_record = q.get("step_record", ["overlap"])[0]
        if self.step_record not in ("overlap", "inside"):
            raise ConfigError(f"{url}: step_record is overlap or inside", url=url)
        self._http: httpx.AsyncClient | None = None
        self._steps_name = f"outlive_steps_{uuid.uuid4().hex[:12]}"
        self._steps_lock = asyncio.Lock()
        self._steps_ready = False
        self._steps_stop: asyncio.Event | None = None
        self._steps_task: asyncio.Task[None] | None = None
        self._steps_deployment: str | None = None
        self._inflight: dict[str, StepCall] = {}
        self._revoked: set[str] = set()

    # -- connection ------------------------------------------------------------------------------
    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            raise BackendUnavailable(f"{self.url}: backend not started (use open_backend)")
        return self._http

    async def start(self) -> None:
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(None, connect=5.0),
            limits=httpx.Limits(max_connections=1000, max_keepalive_connections=200),
        )
        try:
            r = await self._http.get(f"{self.admin}/services/{LEDGER}")
        except httpx.HTTPError as exc:
            await self.close()
            raise BackendUnavailable(
                f"{self.url}: the Restate admin API at {self.admin} is unreachable ({exc!r}); "
                f"start a server with `python -m outlive_restate.server`", url=self.url) from exc
        if r.status_code != 200:
            await self.close()
            raise BackendUnavailable(
                f"{self.url}: the service {LEDGER!r} is not registered on this Restate server "
                f"(admin answered {r.status_code}); serve it with `python -m "
                f"outlive_restate.deployment` and register it, or use `python -m "
                f"outlive_restate.server`", url=self.url)

    async def close(self) -> None:
        if self._steps_deployment is not None and self._http is not None:
            with contextlib.suppress(httpx.HTTPError):
                await self._http.delete(
                    f"{self.admin}/deployments/{self._steps_deployment}", params={"force": "true"})
            self._steps_deployment = None
        if self._steps_stop is not None:
            self._steps_stop.set()
        if self._steps_task is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self._steps_task, 5)
            self._steps_task = None
        self._steps_ready = False
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    # -- calls -----------------------------------------------------------------------------------
    async def _call(self, path: str, body: bytes, *, key: str | None,
                    retry: bool = True) -> bytes:
        """POST to the ingress; retry transport failures (with the same idempotency key).

        ``key=None`` is only for reads, which are safe to repeat without one.
        """
        http = self._client()
        headers = {"content-type": "application/json"} if body else {}
        if key is not None:
            headers["idempotency-key"] = key
        deadline = time.monotonic() + self.retry_for
        delay = 0.02
        while True:
            try:
                r = await http.post(f"{self.ingress}{path}", content=body, headers=headers)
            except httpx.TransportError as exc:
                if not retry or time.monotonic() > deadline:
                    raise BackendUnavailable(
                        f"{self.url}: Restate ingress unreachable ({exc!r}); the command was "
                        f"not confirmed (retry with the same call: it is idempotent)",
                        url=self.url) from exc
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)
                continue
            if r.status_code in (200, 202):  # 202: a delayed send was accepted
                return r.content
            err = _error(r)
            if err is not None:
                raise err
            if r.status_code in (502, 503, 504) and retry and time.monotonic() <= deadline:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)
                continue
            raise BackendUnavailable(
                f"{self.url}: Restate answered {r.status_code} on {path}: {r.text[:300]}",
                url=self.url, status=r.status_code)

    async def execute(self, work_id: str, command: L.Command) -> L.Outcome:
        if not isinstance(work_id, str) or not work_id:
            raise InvalidRecord("a work id must be a non-empty string", field="work_id")
        body = codec.dumps(command).encode()
        path = f"/{LEDGER}/{quote(work_id, safe='')}/execute"
        # Shielded: once sent, a command is applied or rejected whole even if our caller is
        # cancelled (as an embedded backend's synchronous write would be).
        sent = asyncio.ensure_future(self._call(path, body, key=uuid.uuid4().hex))
        try:
            raw = await asyncio.shield(sent)
        except asyncio.CancelledError:
            # our caller is gone; the command still completes (or fails) whole, unobserved
            sent.add_done_callback(lambda t: t.cancelled() or t.exception())
            raise
        outcome = codec.loads(raw)
        if not isinstance(outcome, L.Outcome):
            raise InvalidRecord(f"{work_id}: the ledger answered with {type(outcome).__name__}")
        return outcome

    async def load(self, work_id: str) -> WorkState | None:
        raw = await self._call(f"/{LEDGER}/{quote(work_id, safe='')}/load", b"", key=None)
        if not raw:
            return None
        state = codec.loads(raw)
        if not isinstance(state, WorkState):
            raise InvalidRecord(f"{work_id}: the ledger state is corrupt", work_id=work_id)
        return state

    async def works(self) -> list[str]:
        """Keys of ``outlive_ledger`` that hold state, from the admin SQL introspection API."""
        q = (f"SELECT DISTINCT service_key FROM state WHERE service_name = '{LEDGER}' "
             f"ORDER BY service_key")
        return [str(row["service_key"]) for row in await self._query(q)]

    async def _query(self, q: str) -> list[dict[str, Any]]:
        """Rows of an admin SQL introspection query."""
        http = self._client()
        try:
            r = await http.post(f"{self.admin}/query", json={"query": q},
                                headers={"accept": "application/json"})
        except httpx.HTTPError as exc:
            raise BackendUnavailable(f"{self.url}: admin unreachable ({exc!r})") from exc
        if r.status_code != 200:
            raise BackendUnavailable(f"{self.url}: admin query failed: {r.text[:300]}")
        rows: list[dict[str, Any]] = r.json().get("rows", [])
        return rows

    async def suspect_after(self, work_id: str, attempt: int, delay: timedelta, *,
                            at: int) -> None:
        """Set a durable timer: mark ``attempt`` unknown after ``delay`` unless it shows life.

        Restate keeps the timer (a delayed send) across restarts of the server and of this
        process; ``at`` is the logical time written into the ``unknown`` record.
        """
        st = await self.load(work_id)
        att = st.attempt(attempt) if st is not None else None
        if att is None:
            raise error_from_dict({"type": "NotFound", "message": f"attempt #{attempt} of "
                                   f"{work_id!r} does not exist", "details": {}})
        body = json.dumps({"attempt": attempt, "heartbeats": att.heartbeats,
                           "last_heartbeat": att.last_heartbeat, "at": at}).encode()
        ms = max(0, int(delay.total_seconds() * 1000))
        await self._call(f"/{LEDGER}/{quote(work_id, safe='')}/suspect/send?delay={ms}ms",
                         body, key=uuid.uuid4().hex)

    # -- steps -----------------------------------------------------------------------------------
    @property
    def step_service(self) -> str:
        """This process's step service name (one per backend: its bodies live here)."""
        return self._steps_name

    async def _ensure_steps(self) -> None:
        if self._steps_ready:
            return
        async with self._steps_lock:
            if self._steps_ready:
                return
            await self._serve_steps()
            self._steps_ready = True

    async def _serve_steps(self) -> None:
        import restate

        app = restate.app([make_step_service(self._steps_name)],
                          protocol=self.steps_protocol)  # type: ignore[arg-type]
        served = await serve_in_process(self._client(), self.admin, app,
                                        http11=self.steps_protocol == "request_response")
        self._steps_stop, self._steps_task, self._steps_deployment = served
        # Registered is not callable yet: wait for a real call (ENGINE-NOTES pitfall 9).
        http = self._client()
        deadline = time.monotonic() + 20
        while True:
            try:
                r = await http.post(f"{self.ingress}/{self._steps_name}/raw", content=b"1",
                                    headers={"content-type": "application/json"})
                if r.status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise BackendUnavailable(f"{self.url}: the step service never became callable")
            await asyncio.sleep(0.05)

    async def run_step(self, call: StepCall, fn: Callable[[], Awaitable[Any]]) -> Any:
        """Run the body once as a ``ctx.run_typed`` entry of an invocation of the step service.

        The invocation's idempotency key is the pending id, so a broken connection re-attaches
        to the same invocation instead of running the body again. Cancelling the caller (a
        crashed worker) cancels the body, and the invocation ends with a terminal error.
        """
        await self._ensure_steps()
        pid = uuid.uuid4().hex
        pending = Pending(fn)
        PENDING[pid] = pending
        self._inflight[pid] = call
        sent = asyncio.ensure_future(
            self._call(f"/{self._steps_name}/run", self._step_body(pid, call), key=pid))
        try:
            raw = await self._step_answer(call, pid, pending, sent)
        except asyncio.CancelledError:
            pending.cancel()
            raise
        finally:
            PENDING.pop(pid, None)
            self._inflight.pop(pid, None)
            self._revoked.discard(pid)
        return codec.loads(raw)

    async def run_and_record(self, call: StepCall, fn: Callable[[], Awaitable[Any]],
                             record: Callable[[Any], L.Command]) -> tuple[Any, L.Outcome]:
        """Run the step as ``ctx.run_typed`` and journal it with the fenced write, overlapped.

        "overlap" (default): the step service's ``run`` handler signals this process the moment
        Restate has acknowledged the ``ctx.run_typed`` entry, and the ``RecordSteps`` built by
        ``record(result)`` goes to the ledger at once, while the step invocation finishes
        (its output and end) concurrently. Same order as ``run_step`` then ``execute`` (the
        entry is journaled before the ledger write), minus the invocation's tail.
        "inside": one invocation does both (the ledger call is a durable ``object_call`` from
        the step handler); measured slower on Restate 1.7 (see docs/engines/restate.md).
        """
        if self.step_record == "inside":
            return await self._run_and_record_inside(call, fn, record)
        await self._ensure_steps()
        pid = uuid.uuid4().hex
        loop = asyncio.get_running_loop()
        pending = Pending(fn, journaled=loop.create_future())
        assert pending.journaled is not None
        PENDING[pid] = pending
        self._inflight[pid] = call
        sent = asyncio.ensure_future(
            self._call(f"/{self._steps_name}/run", self._step_body(pid, call), key=pid))
        try:
            try:
                await asyncio.wait({sent, pending.journaled},
                                   return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:
                pending.cancel()
                sent.cancel()
                raise
            if pending.journaled.done():
                raw = pending.journaled.result()
            else:
                raw = await self._step_answer(call, pid, pending, sent)
            result = codec.loads(raw)
            try:
                outcome = await self.execute(call.work_id, record(result))
            finally:
                if not sent.done():
                    # the invocation only has to end now; its answer is the same journaled bytes
                    with contextlib.suppress(Exception):
                        await asyncio.shield(sent)
                sent.add_done_callback(lambda t: t.cancelled() or t.exception())
        finally:
            PENDING.pop(pid, None)
            self._inflight.pop(pid, None)
            self._revoked.discard(pid)
        return result, outcome

    @staticmethod
    def _step_body(pid: str, call: StepCall) -> bytes:
        return json.dumps({"id": pid, "work_id": call.work_id, "attempt": call.attempt,
                           "token": call.token, "step": call.step,
                           "input_key": call.input_key}).encode()

    async def _step_answer(self, call: StepCall, pid: str, pending: Pending,
                           sent: asyncio.Future[bytes]) -> bytes:
        """The step invocation's answer, or the typed reason it ended without one."""
        try:
            return await sent
        except OutliveError as exc:
            pending.cancel()  # the invocation ended without the body: never let it finish
            if pending.error is not None:
                raise pending.error from None
            if pid in self._revoked:
                raise StaleOwner(
                    f"Restate refused step {call.step!r} of attempt #{call.attempt}: its "
                    f"invocation was killed when the attempt was revoked", token=call.token,
                    attempt=call.attempt, engine="restate") from exc
            raise

    async def _run_and_record_inside(self, call: StepCall, fn: Callable[[], Awaitable[Any]],
                                     record: Callable[[Any], L.Command]) -> tuple[Any, L.Outcome]:
        """One invocation: ``ctx.run_typed`` journals the command, then an ``object_call``."""
        await self._ensure_steps()
        pid = uuid.uuid4().hex
        pending = Pending(fn, record=record)
        PENDING[pid] = pending
        self._inflight[pid] = call
        sent = asyncio.ensure_future(
            self._call(f"/{self._steps_name}/step", self._step_body(pid, call), key=pid))
        try:
            raw = await self._step_answer(call, pid, pending, sent)
        except asyncio.CancelledError:
            pending.cancel()
            sent.cancel()
            raise
        finally:
            PENDING.pop(pid, None)
            self._inflight.pop(pid, None)
            self._revoked.discard(pid)
        if raw[:1] == b"E":
            raise error_from_dict(json.loads(raw[1:]))
        outcome = codec.loads(raw[1:])
        if raw[:1] != b"O" or not isinstance(outcome, L.Outcome):
            raise InvalidRecord(f"{call.work_id}: the step service answered {raw[:80]!r}")
        return pending.result, outcome

    # -- owners (the worker as a handler of the ledger object, see outlive_restate.owned) --------
    async def run_owner(self, work_id: str, handler: str, attempt: Attempt, arg: Any = None, *,
                        snapshot: Mapping[str, Any] | None = None, at: int | None = None,
                        persist: str = "step") -> Any:
        """Run ``attempt`` as the owner handler ``handler`` of the work's ledger object.

        One invocation per attempt: its idempotency key is :func:`~outlive_restate.owned.
        owner_key`, so a repeated call (a client that lost the connection, a restarted
        controller) attaches to the same invocation or gets its stored answer, and never runs
        the attempt twice. A successor is a new attempt, so a new invocation. Returns the
        owner's result, or raises its typed outlive error.
        """
        from .owned import owner_key, owner_request

        body = owner_request(attempt.number, attempt.token, arg, snapshot=snapshot, at=at,
                             persist=persist)
        path = f"/{LEDGER}/{quote(work_id, safe='')}/{quote(handler, safe='')}"
        raw = await self._call(path, body, key=owner_key(work_id, attempt.number))
        return codec.loads(raw)

    async def revoke_owner(self, work_id: str, attempt: int) -> int:
        """Kill ``attempt``'s running owner invocation (Restate's own fence); how many.

        What it journaled stays (Restate applies state writes as it journals them); whatever it
        still tries is refused by Restate, since the invocation no longer exists. The lock is
        released, so the controller can mark the attempt unknown and admit a successor.
        """
        from .owned import owner_key

        return await self._kill(await self._running(LEDGER, owner_key(work_id, attempt)))

    async def _running(self, service: str, idempotency_key: str) -> list[dict[str, Any]]:
        """The ids of ``service``'s invocations under ``idempotency_key`` that have not ended."""
        return await self._query(
            f"SELECT id FROM sys_invocation WHERE target_service_name = {_sql_str(service)} "
            f"AND idempotency_key = {_sql_str(idempotency_key)} AND status != 'completed'")

    async def _kill(self, rows: list[dict[str, Any]]) -> int:
        """Kill the invocations whose ``id`` the rows name; how many Restate accepted."""
        killed = 0
        for row in rows:
            k = await self._client().patch(f"{self.admin}/invocations/{row['id']}/kill")
            killed += int(k.status_code < 300)
        return killed

    async def revoke_steps(self, work_id: str, attempt: int) -> int:
        """Kill the running step invocations of ``attempt`` (Restate's own fence); how many.

        Restate then refuses their completions natively: a late ``ctx.run_typed`` result of a
        killed invocation is never journaled, and ``run_step`` raises ``StaleOwner``. Only
        steps started through this backend object are known here (the bodies live here).
        """
        pids = [p for p, c in self._inflight.items()
                if c.work_id == work_id and c.attempt == attempt]
        killed = 0
        for pid in pids:
            rows = await self._running(self._steps_name, pid)
            if rows:
                self._revoked.add(pid)  # before the kill: the failed call is read as revoked
            killed += await self._kill(rows)
        return killed


async def serve_in_process(http: httpx.AsyncClient, admin: str, app: Any, *,
                           http11: bool = False) -> tuple[asyncio.Event, asyncio.Task[None], str]:
    """Serve an ASGI Restate app from this event loop (hypercorn, h2c) and register it.

    Returns (stop event, serving task, deployment id). Used for the step service, whose bodies
    must run in the caller's process, and by tests serving handler-side workers.
    """
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    port = free_port()
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 0.2
    stop = asyncio.Event()
    task = asyncio.ensure_future(serve(app, config, shutdown_trigger=stop.wait))
    deadline = time.monotonic() + 10
    while True:
        try:
            _r, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            break
        except OSError:
            if time.monotonic() > deadline or task.done():
                stop.set()
                raise BackendUnavailable(f"could not serve a deployment on :{port}") from None
            await asyncio.sleep(0.02)
    try:
        r = await http.post(f"{admin}/deployments",
                            json={"uri": f"http://127.0.0.1:{port}", "force": True,
                                  "use_http_11": http11})
    except httpx.HTTPError as exc:
        stop.set()
        raise BackendUnavailable(f"{admin}: admin unreachable ({exc!r})") from exc
    if r.status_code not in (200, 201):
        stop.set()
        raise BackendUnavailable(f"registering a deployment failed: {r.status_code} "
                                 f"{r.text[:300]}")
    return stop, task, str(r.json()["id"])


def _sql_str(s: str) -> str:
    """A SQL string literal for the admin query API (quotes doubled)."""
    return "'" + s.replace("'", "''") + "'"


def _error(r: httpx.Response) -> OutliveError | None:
    """Turn a terminal failure carrying an outlive error back into the same class."""
    try:
        data = r.json()
    except ValueError:
        return None
    msg = data.get("message") if isinstance(data, dict) else None
    if not isinstance(msg, str):
        return None
    i = msg.find(ERROR_PREFIX)
    if i >= 0:
        try:
            return error_from_dict(json.loads(msg[i + len(ERROR_PREFIX):]))
        except ValueError:
            return None
    if msg.startswith("outlive:") or "outlive:" in msg[:200]:
        return InvalidRecord(f"step failed: {msg}", status=r.status_code)
    return None
