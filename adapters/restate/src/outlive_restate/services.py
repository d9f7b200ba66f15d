"""The Restate services outlive runs: the ledger Virtual Object and the step service.

``outlive_ledger`` is a Virtual Object keyed by work id. Its exclusive handler ``execute`` is the
only writer of a work's ledger: Restate runs at most one exclusive invocation per key at a time,
so "load state, ``outlive.ledger.apply``, store state" is atomic per work without any lock of
ours, and durable because the state write commits with the invocation's journal. A rejection
becomes a :class:`restate.TerminalError` carrying the typed outlive error (``to_dict``), and the
handler returns before ``ctx.set``: nothing is written. ``load`` is a shared handler (reads run
concurrently with the writer and see the last committed state). ``suspect`` is the target of a
durable timer (a delayed send): Restate's own form of "silence -> unknown".

The step service (``make_step_service``) runs a step's body as a ``ctx.run_typed`` journal entry.
The body is a Python closure, so it cannot travel to another process: the caller parks it in an
in-process registry (:data:`PENDING`) and the step service, served by the same process, looks it
up by id. See ``docs/engines/restate.md`` for the cross-process shape.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

import restate
from restate.retry_policy import InvocationRetryPolicy
from restate.serde import BytesSerde

from outlive import codec
from outlive import ledger as L
from outlive.errors import InvalidRecord, OutliveError, Rejected
from outlive.records import AttemptState, JournalEntry, WorkState

__all__ = [
    "ERROR_PREFIX",
    "FEED",
    "LEDGER",
    "PENDING",
    "Pending",
    "ledger_app",
    "ledger_object",
    "make_step_service",
]

#: Name of the ledger Virtual Object.
LEDGER = "outlive_ledger"
#: Name of the example receiver (a feed) served beside the ledger.
FEED = "outlive_feed"
#: TerminalError messages that carry a typed outlive error start with this.
ERROR_PREFIX = "outlive-error:"

_B = BytesSerde()

ledger_object = restate.VirtualObject(
    LEDGER,
    description="outlive: one work's ledger (fenced state machine) per key",
    # A handler error that is not terminal is a bug or an outage: retry, but never forever.
    invocation_retry_policy=InvocationRetryPolicy(
        initial_interval=timedelta(milliseconds=50), max_interval=timedelta(seconds=2),
        max_attempts=200, on_max_attempts="pause"),
    # The state is the record; a finished command's journal is not needed. Completions are
    # kept for the idempotency window in which a client retries a command (seconds).
    journal_retention=timedelta(0),
    idempotency_retention=timedelta(minutes=10),
)


def _terminal(exc: OutliveError) -> restate.TerminalError:
    code = 409 if isinstance(exc, Rejected) else 400 if isinstance(exc, InvalidRecord) else 500
    return restate.TerminalError(ERROR_PREFIX + json.dumps(exc.to_dict(), default=str),
                                 status_code=code)


# Storage layout in the object's K/V state (one Virtual Object per work):
#   "core"      -> {"n": journal length, "k": {collection: [length, seq]}, "s": the WorkState's
#                   scalars, its attempts and the journal's last entry}     (rewritten each change)
#   "c/<name>/<seq>" -> one collection (inputs, candidates, acceptances or effects) as written
#                   by the change with that seq; a new key only when a command changes it
#   "j/<i>"     -> journal entry i                                   (written once)
#   "r/<rid>"   -> "i": where the entry with result id <rid> lives    (written once)
# A command writes the small core, the collections it changed and its new journal entries, never
# the whole history again (a step does not re-encode the published input versions, say); all of
# them commit with the invocation's journal.
#
# A command reads only what the pure ``ledger.apply`` looks at for it: the core, the non-empty
# collections (the core says which), and for ``RecordSteps`` and ``SubmitCandidate`` the journal
# entries they name by result id (to dedupe a retried write and to check a candidate's parts),
# through "r/<rid>". So the reads are a function of the stored core and the command alone. That
# matters: each read is a journal entry Restate replays, and a replay that reads differently fails
# with a journal mismatch (RT0016; reads that depended on an in-process cache once did exactly
# that). ``apply`` then runs on a *view* of the state whose journal holds those entries and the
# last one, in journal order: it dedupes against them, appends after them, and its
# ``journal[-1]`` is the real last entry. An index that points at or past "n", or at another
# entry, is an entry that never committed (a write cut short by a kill, see ``owned``): it counts
# as absent. The core is the commit point: every other key a command writes is one no committed
# core reaches yet (an entry at or past "n", an index checked against it, a collection under a
# seq no core names), so a write cut short anywhere leaves the state as it was plus unreachable
# keys, which the next committed write overwrites. A replaced collection's old key is cleared
# after the core moved on. Decoded values are cached in-process to save decoding only: a cached
# value is used when the bytes Restate hands us are the ones it was decoded from.
_CORE = "core"
#: Kept apart from the core. Attempts stay in the core: a write by an attempt touches its
#: attempt record (sign of life) and the core is written anyway.
_COLLECTIONS = ("inputs", "candidates", "acceptances", "effects")
_DECODED: dict[tuple[str, str], tuple[bytes, Any]] = {}
_CACHE_MAX = 8192


@dataclass(frozen=True)
class _View:
    """The state a command sees: ``n`` journal entries stored, ``state.journal`` a sorted subset.

    ``stamps`` names the stored collections: ``{name: (length, seq)}``.
    """

    n: int
    state: WorkState
    stamps: dict[str, tuple[int, int]]


def _corrupt(key: str, why: object) -> InvalidRecord:
    return InvalidRecord(f"the stored ledger of {key!r} is corrupt: {why}", work_id=key)


def _remember(key: tuple[str, str], raw: bytes, value: Any) -> None:
    if key not in _DECODED and len(_DECODED) >= _CACHE_MAX:
        _DECODED.pop(next(iter(_DECODED)))
    _DECODED[key] = (raw, value)


def _core(key: str, core: bytes) -> tuple[int, dict[str, tuple[int, int]], WorkState]:
    hit = _DECODED.get((key, _CORE))
    if hit is not None and hit[0] == core:
        got: tuple[int, dict[str, tuple[int, int]], WorkState] = hit[1]
        return got
    try:
        head = json.loads(core)
        n = int(head["n"])
        stamps = {str(k): (int(v[0]), int(v[1])) for k, v in dict(head.get("k", {})).items()}
        base = codec.decode(head["s"])
    except (ValueError, KeyError, TypeError, AttributeError, OutliveError) as exc:
        raise _corrupt(key, exc) from exc
    if not isinstance(base, WorkState) or base.work_id != key or n < len(base.journal) or \
            any(k not in _COLLECTIONS for k in stamps):
        raise _corrupt(key, "bad core record")
    _remember((key, _CORE), core, (n, stamps, base))
    return n, stamps, base


async def _collection(ctx: restate.ObjectSharedContext | restate.ObjectContext, name: str,
                      stamp: tuple[int, int]) -> tuple[Any, ...]:
    key = ctx.key()
    count, seq = stamp
    raw = await ctx.get(f"c/{name}/{seq}", serde=_B)
    if raw is None:
        raise _corrupt(key, f"{name} (seq {seq}) is missing")
    hit = _DECODED.get((key, name))
    if hit is not None and hit[0] == raw:
        value: tuple[Any, ...] = hit[1]
    else:
        try:
            value = codec.loads(raw)
        except OutliveError as exc:
            raise _corrupt(key, exc) from exc
        if not isinstance(value, tuple):
            raise _corrupt(key, f"{name} is a {type(value).__name__}")
        _remember((key, name), raw, value)
    if len(value) != count:
        raise _corrupt(key, f"{name} holds {len(value)} records, the core says {count}")
    return value


async def _entry(ctx: restate.ObjectSharedContext | restate.ObjectContext, i: int) -> JournalEntry:
    raw = await ctx.get(f"j/{i}", serde=_B)
    if raw is None:
        raise InvalidRecord(f"journal entry {i} of {ctx.key()!r} is missing", work_id=ctx.key())
    try:
        e = codec.loads(raw)
    except OutliveError as exc:  # codec raises InvalidRecord for bad JSON and bad records
        raise _corrupt(ctx.key(), exc) from exc
    if not isinstance(e, JournalEntry):
        raise _corrupt(ctx.key(), f"entry {i} is a {type(e).__name__}")
    return e


async def _view(ctx: restate.ObjectSharedContext | restate.ObjectContext,
                rids: frozenset[str] = frozenset()) -> _View | None:
    """The core, plus the committed entries whose result ids are in ``rids``."""
    key = ctx.key()
    core = await ctx.get(_CORE, serde=_B)
    if not core:
        return None
    n, stamps, base = _core(key, core)
    cols = {name: await _collection(ctx, name, stamps[name])
            for name in _COLLECTIONS if name in stamps}
    if cols:
        base = replace(base, **cols)  # type: ignore[arg-type]
    found: dict[int, JournalEntry] = {}
    for rid in sorted(rids):  # sorted: the same reads in the same order on every replay
        raw = await ctx.get(f"r/{rid}", serde=_B)
        if raw is None:
            continue
        try:
            i = int(raw)
        except ValueError as exc:
            raise _corrupt(key, exc) from exc
        if not 0 <= i < n or i in found:
            continue
        e = base.journal[-1] if i == n - 1 and base.journal else await _entry(ctx, i)
        if e.result_id == rid:
            found[i] = e
    if n:
        found[n - 1] = base.journal[-1] if base.journal else await _entry(ctx, n - 1)
    return _View(n, replace(base, journal=tuple(found[i] for i in sorted(found))), stamps)


async def _read_all(ctx: restate.ObjectSharedContext | restate.ObjectContext) -> _View | None:
    """The whole state, every journal entry included (``load``: restore and inspection)."""
    view = await _view(ctx)
    if view is None:
        return None
    entries = [await _entry(ctx, i) for i in range(view.n)]
    return replace(view, state=replace(view.state, journal=tuple(entries)))


def _rids(cmd: L.Command) -> frozenset[str]:
    """The result ids ``apply`` looks up for ``cmd`` (the only journal entries it reads)."""
    if isinstance(cmd, L.RecordSteps):
        return frozenset(w.result_id for w in cmd.entries)
    if isinstance(cmd, L.SubmitCandidate):
        return frozenset([*(w.result_id for w in cmd.flush), *(p.result_id for p in cmd.parts)])
    return frozenset()


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _write(ctx: restate.ObjectContext, view: _View | None, new: WorkState) -> _View:
    """Store ``new`` (the result of ``apply`` on ``view``): what changed, then the core.

    Returns the view of what is now stored (``new`` itself as the state).
    """
    key = ctx.key()
    old = view.state if view is not None else None
    n, seen = (view.n, len(view.state.journal)) if view is not None else (0, 0)
    # apply appends to the journal it was given and keeps its entries (identity), so checking
    # the last one is enough (and O(1): an owner's view holds the whole journal)
    if old is not None and seen and (len(new.journal) < seen
                                     or new.journal[seen - 1] is not old.journal[-1]):
        raise _corrupt(key, "a command rewrote journal history")  # apply never does
    added = new.journal[seen:]
    last: Any = None
    for k, e in enumerate(added):
        last = codec.encode(e)
        ctx.set(f"j/{n + k}", _json(last), serde=_B)
        ctx.set(f"r/{e.result_id}", str(n + k).encode(), serde=_B)
    n += len(added)
    before = view.stamps if view is not None else {}
    stamps = dict(before)
    for name in _COLLECTIONS:
        value = getattr(new, name)
        if value and (old is None or value is not getattr(old, name)):
            raw = codec.dumps(value).encode()
            ctx.set(f"c/{name}/{new.seq}", raw, serde=_B)
            _remember((key, name), raw, value)
            stamps[name] = (len(value), new.seq)
        elif not value:
            stamps.pop(name, None)
    head = replace(new, journal=new.journal[-1:], inputs=(), candidates=(), acceptances=(),
                   effects=())
    enc = codec.encode(replace(head, journal=()))
    if head.journal:  # the last entry, encoded once for its own key and the core
        enc["v"]["journal"] = {"@l": [last if last is not None else codec.encode(head.journal[0])]}
    core = _json({"n": n, "k": {k: list(v) for k, v in stamps.items()}, "s": enc})
    ctx.set(_CORE, core, serde=_B)
    _remember((key, _CORE), core, (n, stamps, head))
    for name, (_count, seq) in before.items():
        if stamps.get(name, (0, -1))[1] != seq:
            ctx.clear(f"c/{name}/{seq}")  # replaced: the core no longer names it
    return _View(n, new, stamps)


async def _apply(ctx: restate.ObjectContext, cmd: L.Command) -> bytes:
    try:
        view = await _view(ctx, _rids(cmd))
        state = view.state if view is not None else None
        new, outcome = L.apply(state, cmd, work_id=ctx.key())
        if new is not state:
            _write(ctx, view, new)
    except OutliveError as exc:
        raise _terminal(exc) from None
    return codec.dumps(outcome).encode()


@ledger_object.handler(kind="exclusive", input_serde=_B, output_serde=_B)
async def execute(ctx: restate.ObjectContext, req: bytes) -> bytes:
    """Apply one encoded command to this key's ledger; the only writer of the state."""
    try:
        cmd = codec.loads(req)
    except OutliveError as exc:
        raise _terminal(exc) from None
    if not isinstance(cmd, L.OpenWork | L.PublishInput | L.Admit | L.Heartbeat | L.MarkUnknown
                      | L.MarkStopped | L.RecordSteps | L.SubmitCandidate | L.Accept
                      | L.RecordIntent | L.ConfirmEffect | L.Finish):
        raise _terminal(InvalidRecord(f"not a ledger command: {type(cmd).__name__}"))
    return await _apply(ctx, cmd)


@ledger_object.handler(kind="shared", input_serde=_B, output_serde=_B)
async def load(ctx: restate.ObjectSharedContext, req: bytes) -> bytes:
    """The last committed state (empty body: never opened). Runs beside the writer."""
    del req
    try:
        view = await _read_all(ctx)
    except OutliveError as exc:
        raise _terminal(exc) from None
    return codec.dumps(view.state).encode() if view is not None else b""


@ledger_object.handler(kind="exclusive", input_serde=_B, output_serde=_B)
async def suspect(ctx: restate.ObjectContext, req: bytes) -> bytes:
    """Fired by a durable timer: mark the attempt unknown if it showed no sign of life since.

    The timer carries the attempt's heartbeat count and last heartbeat as seen when it was set;
    any write by the attempt moves one of them, so a live worker is never suspected.
    """
    r = json.loads(req)
    view = await _view(ctx)
    state = view.state if view is not None else None
    if state is None:
        return b'{"kind":"absent"}'
    att = state.attempt(int(r["attempt"]))
    live = (AttemptState.ADMITTED, AttemptState.RUNNING)
    if att is None or att.state not in live or (att.heartbeats, att.last_heartbeat) != (
            int(r["heartbeats"]), int(r["last_heartbeat"])):
        return b'{"kind":"alive"}'
    await _apply(ctx, L.MarkUnknown(attempt=att.number, at=int(r["at"])))
    return b'{"kind":"unknown"}'


#: An example receiver that is itself a Restate handler: a feed keyed by name. Restate dedupes
#: calls by idempotency key (outlive sends the operation key) for ``idempotency_retention``.
feed_object = restate.VirtualObject(
    FEED, description="outlive example receiver: posts to a feed, once per idempotency key",
    idempotency_retention=timedelta(hours=24))


@feed_object.handler(kind="exclusive")
async def post(ctx: restate.ObjectContext, payload: Any) -> dict[str, Any]:
    """Apply the post; the effect id is written with the effect, atomically."""
    posts: list[Any] = await ctx.get("posts", type_hint=list) or []
    effect_id = f"P{len(posts) + 1}"
    posts.append({"effect_id": effect_id, "payload": payload})
    ctx.set("posts", posts)
    return {"effect_id": effect_id}


@feed_object.handler(kind="shared")
async def posts(ctx: restate.ObjectSharedContext) -> list[Any]:
    got: list[Any] = await ctx.get("posts", type_hint=list) or []
    return got


def ledger_app(protocol: str | None = None) -> Any:
    """The ASGI app a deployment process serves (``python -m outlive_restate.deployment``)."""
    return restate.app([ledger_object, feed_object], protocol=protocol)  # type: ignore[arg-type]


# -- steps ---------------------------------------------------------------------------------------
@dataclass
class Pending:
    """A step body parked by its caller until the step service runs it (at most once)."""

    fn: Callable[[], Awaitable[Any]]
    #: For ``run_and_record``: builds the fenced ``RecordSteps`` from the (decoded) result.
    record: Callable[[Any], L.Command] | None = None
    task: asyncio.Task[Any] | None = None
    error: BaseException | None = None
    cancelled: bool = False
    runs: int = 0
    #: The body's result as the journal holds it (encoded, then decoded), once it returned.
    result: Any = None
    #: Set by the ``run`` handler with the journaled bytes once Restate acknowledged the entry.
    journaled: asyncio.Future[bytes] | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> bytes:
        """Run the body once; a replayed or retried invocation awaits the same task."""
        if self.cancelled:
            raise restate.TerminalError("outlive: the step's caller was cancelled", 499)
        if self.task is None:
            self.runs += 1
            self.task = asyncio.ensure_future(self.fn())
        try:
            result = await asyncio.shield(self.task)
        except asyncio.CancelledError:
            if self.cancelled:
                raise restate.TerminalError("outlive: the step's caller was cancelled",
                                            499) from None
            raise
        except Exception as exc:
            self.error = exc
            raise restate.TerminalError(f"outlive: step body raised {type(exc).__name__}: {exc}",
                                        500) from None
        try:
            encoded = codec.dumps(result).encode()
            if self.record is None:
                return encoded
            # The command (with the logical clock's ``at``) is built here, inside the journal
            # entry, so a replayed invocation sends the very same command to the ledger.
            self.result = codec.loads(encoded)
            return codec.dumps(self.record(self.result)).encode()
        except OutliveError as exc:
            self.error = exc
            raise restate.TerminalError(f"outlive: step result not encodable: {exc}", 500) from None

    def cancel(self) -> None:
        self.cancelled = True
        if self.task is not None:
            self.task.cancel()


#: Step bodies of this process, by id (see the module docstring for why it is in-process).
PENDING: dict[str, Pending] = {}


async def _step(ctx: restate.Context | restate.ObjectSharedContext, req: bytes) -> bytes:
    """One outlive step *and* its fenced journal write, in one invocation.

    The body runs as a ``ctx.run_typed`` entry whose journaled value is the ``RecordSteps``
    command built from its result; the command then goes to the work's ledger object as an
    awaited durable call (the ledger's exclusive handler runs the fence; the body never runs
    inside it, so a held body does not lock the ledger). Answers ``O`` + the encoded outcome,
    or ``E`` + the typed rejection (``to_dict``): the step itself did complete in Restate,
    the ledger refused the write, and nothing was written.
    """
    r = json.loads(req)
    pid = str(r["id"])

    async def action() -> bytes:
        pending = PENDING.get(pid)
        if pending is None or pending.record is None:
            raise restate.TerminalError(
                "outlive: no pending body with this id in the serving process (its caller "
                "is gone, or lives in another process)", 410)
        return await pending.run()

    cmd: bytes = await ctx.run_typed(f"step:{r['step']}#{r['attempt']}", action,
                                     restate.RunOptions(max_attempts=1, serde=_B))
    try:
        outcome: bytes = await ctx.object_call(execute, key=str(r["work_id"]), arg=cmd)
    except restate.TerminalError as exc:
        msg = exc.message or ""
        i = msg.find(ERROR_PREFIX)
        if i < 0:
            raise
        return b"E" + msg[i + len(ERROR_PREFIX):].encode()
    return b"O" + outcome


def make_step_service(name: str) -> restate.Service:
    """A step service under a per-process name, so each caller's bodies reach its own process."""
    svc = restate.Service(
        name,
        description="outlive: step bodies as ctx.run_typed entries (served in the caller's process)",
        # A held (paused) body must not be aborted by wall-clock timeouts: the logical outcome
        # is outlive's to decide. Abandoned invocations are killed, never retried for ever.
        inactivity_timeout=timedelta(hours=1),
        abort_timeout=timedelta(hours=1),
        invocation_retry_policy=InvocationRetryPolicy(
            initial_interval=timedelta(milliseconds=50), max_interval=timedelta(seconds=1),
            max_attempts=20, on_max_attempts="kill"),
    )

    @svc.handler(input_serde=_B, output_serde=_B)
    async def run(ctx: restate.Context, req: bytes) -> bytes:
        """One outlive step: the body as one journal entry, run at most once (max_attempts=1)."""
        r = json.loads(req)
        pid = str(r["id"])

        async def action() -> bytes:
            pending = PENDING.get(pid)
            if pending is None:
                raise restate.TerminalError(
                    "outlive: no pending body with this id in the serving process (its caller "
                    "is gone, or lives in another process)", 410)
            return await pending.run()

        out: bytes = await ctx.run_typed(f"step:{r['step']}#{r['attempt']}", action,
                                         restate.RunOptions(max_attempts=1, serde=_B))
        pending = PENDING.get(pid)
        if pending is not None and pending.journaled is not None and not pending.journaled.done():
            # Restate has acknowledged the entry: the caller may start the journal write now,
            # while this invocation ends (see ``RestateBackend.run_and_record``).
            pending.journaled.set_result(out)
        return out

    @svc.handler(name="step", input_serde=_B, output_serde=_B)
    async def step(ctx: restate.Context, req: bytes) -> bytes:
        """One outlive step and its fenced journal write in one invocation (see ``_step``)."""
        return await _step(ctx, req)

    @svc.handler(input_serde=_B, output_serde=_B)
    async def raw(ctx: restate.Context, req: bytes) -> bytes:
        """The baseline: one bare ``ctx.run_typed`` step per invocation (for the benchmark)."""
        async def action() -> bytes:
            return req

        out: bytes = await ctx.run_typed("raw", action, restate.RunOptions(max_attempts=1, serde=_B))
        return out

    @svc.handler(input_serde=_B, output_serde=_B)
    async def raw_loop(ctx: restate.Context, req: bytes) -> bytes:
        """The floor: N ``ctx.run_typed`` steps inside one running invocation (benchmark)."""
        n = int(json.loads(req)["n"])

        async def action() -> bytes:
            return b"1"

        for i in range(n):
            await ctx.run_typed(f"raw{i}", action, restate.RunOptions(max_attempts=1, serde=_B))
        return str(n).encode()

    return svc
