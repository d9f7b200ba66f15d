"""The ledger's home in Restate: a Virtual Object keyed by work id holds the work's ledger.

:func:`keep_ledger` adds three handlers to a Virtual Object: ``outlive_execute`` (exclusive: the
only writer of a work's ledger), ``outlive_execute_lazy`` (the same writer, reading the state
key by key instead of having Restate send all of it: for works with a long journal) and
``outlive_load`` (shared: the last committed state, read beside the writer). Restate runs at
most one exclusive invocation per key at a time, so "read, ``outlive.ledger.apply``, write what
changed" is atomic per work without any lock of ours, and durable because the state writes
commit with the invocation's journal. A rejection ends the invocation with the typed error
(:mod:`._errors`) before any ``ctx.set``: nothing is written.

outlive ships one such object, :data:`ledger_object` (``outlive_ledger``); the owner shape keeps
the ledger on the user's own object instead (:func:`keep_ledger` on it), so the user's exclusive
handler and the ledger share one lock.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import restate
from restate.retry_policy import InvocationRetryPolicy
from restate.serde import BytesSerde

from outlive import codec
from outlive import ledger as L
from outlive._clone import evolve
from outlive.errors import InvalidRecord, OutliveError
from outlive.records import JournalEntry, WorkState

from . import _errors
from ._futures import awaited

__all__ = ["ANSWER", "EXECUTE", "EXECUTE_LAZY", "LEDGER", "LOAD", "STALLED", "apply_command",
           "keep_ledger", "ledger_object", "sent"]

#: Name of outlive's own ledger Virtual Object.
LEDGER = "outlive_ledger"
#: The ledger's handlers, on whichever object keeps it.
EXECUTE = "outlive_execute"
#: The same writer with its state read lazily. Both are exclusive handlers of the same object,
#: so their invocations for a key wait in one queue, in the order sent: which of the two a
#: command goes to changes its cost, never its place. Eagerly, Restate sends every key of the
#: object with each invocation, and a work's batches of journal entries are kept for its whole
#: life; a command reads only the core, the collections and the entries it names (the layout
#: below), in two or three rounds. So a short ledger is cheaper eagerly (no round trip), a
#: long one lazily (its batches are not shipped to the deployment on every write).
EXECUTE_LAZY = "outlive_execute_lazy"
LOAD = "outlive_load"
#: Request header of ``outlive_execute``: ``state`` asks the write to answer with what it left
#: (:func:`answer`), for a caller that keeps the state it read and would read it again next.
ANSWER = "x-outlive-answer"

_B = BytesSerde()

#: Restate's inactivity and abort timeouts for outlive's own objects (the ledger, the lease): an
#: invocation whose deployment process sends nothing for this long is asked to suspend, and if it
#: does not answer for as long again (a paused or wedged replica), Restate aborts it and retries
#: it, through the balancer, on a replica that answers (~10 s in all: Restate also waits ~5 s
#: for the stream to drain). Their handlers are short (no step body runs in them); Restate's
#: defaults (1 min, then 10 min) would hold a lease check, or the work's ledger key, that long
#: behind a paused replica. A second was too short on a loaded 2-core machine: a ledger
#: invocation waiting for its lazily read state was now and then suspended and replayed.
STALLED = timedelta(seconds=3)


# Storage layout in the object's K/V state (one Virtual Object per work):
#   "core"      -> {"n": journal length, "x": first entry that may lack an index entry (absent:
#                   none does), "k": {collection: [length, seq]}, "i": the index runs, oldest
#                   first, as [[entries, seq], ...] (absent: none), "s": the WorkState's scalars,
#                   its attempts and the journal's last entry}               (rewritten each change)
#   "c/<name>/<seq>" -> one collection (inputs, candidates, acceptances, effects or refusals) as written
#                   by the change with that seq; a new key only when a command changes it
#   "b/<k>"     -> the journal entries k, k+1, ... that one change appended (a batch; a step write
#                   in the handler shape, every step of a flush in the owner shape; written once)
#   "i/<seq>"   -> an index run, written by the change with that seq: {rid: [i, k]}, the entry
#                   with result id rid is entry i, in batch "b/<k>"
# A command writes the small core, the collections it changed, one batch of its new journal
# entries and one index run, never the whole history again (a step does not re-encode the
# published input versions, say); all of them commit with the invocation's journal.
#
# The index is log-structured, as an LSM tree's runs are: a change that appends entries writes
# them as a new run, merged with the newest runs no larger than it (each merged run's key is
# cleared once the core no longer names it), so the runs' sizes fall geometrically from the
# oldest and there are O(log n) of them; a lookup reads them all (one read each, issued
# together) and an entry is rewritten O(log n) times over the work's life. The reason: each
# state read and write is an entry the server journals, and a key per entry (layout 3) made a
# held batch of 256 steps 256 index reads and 256 index writes on top of its batch and core.
# Measured with `make bench-restate`'s held row (1,024 steps), the two layouts' processes
# alternating: 1.20x a raw step against 1.22x, the attempt's last settling ~52 ms against
# ~80 ms.
#
# The owner shape writes no index: it reads the whole journal once per invocation and never
# looks an entry up by result id. Its flush leaves "x" at the first entry it wrote (or lower).
# A command of anyone else that names a result id the index does not give reads the batches
# from "x" on, in order (the one place a lookup reads more than the runs: once per owner
# invocation's entries), and when it writes, it indexes them in its run and drops "x".
#
# A command reads only what the pure ``ledger.apply`` looks at for it: the core, the non-empty
# collections (the core says which), and the journal entries the ledger says it reads for that
# command (``ledger.reads``: the result ids a step write or a candidate names), through the
# index runs (read only when it names any) and the batches they name. So the reads are a
# function of the stored core and the command alone. That matters: each read is a journal
# entry Restate replays, and a replay that reads differently fails with a journal mismatch
# (RT0016; reads that depended on an in-process cache once did exactly that). ``apply`` then
# runs on a *view* of the state whose journal holds those entries and the last one, in journal
# order: it dedupes against them, appends after them, and its ``journal[-1]`` is the real last
# entry.
#
# The core is the commit point: every other key a command writes is one no committed core
# reaches yet (a batch at or past "n", a run or a collection under a seq no core names), so a
# write cut short anywhere leaves the state as it was plus unreachable keys.
# Every batch starts at the stored "n" of its time and "n" only grows, so a cut batch sits where
# the next committed change that appends entries writes its own batch, overwriting it: below "n",
# "b/<k>" is always a committed batch starting at entry k. A run's place is believed only when
# its batch, read there, holds an entry with that result id at that index (runs are reached
# through the core only, so this checks the store, not a cut). A replaced collection's or a
# merged run's old key is cleared after the core moved on. Decoded values are cached in-process
# to save decoding only: a cached value is used when the bytes Restate hands us are the ones it was
# decoded from. The core carries the layout's version ("v"): a core without it was written with
# one key per journal entry (before 2026-12) and is refused, not misread. Layouts 2 and 3 kept
# an index key per entry ("r/<rid>"); they are read as this layout with no runs and every entry
# possibly unindexed ("x" at 0): the first lookup reads the batches, the write after it indexes
# them in one run, and the core it writes is of this layout (the old keys are left, unread).
_CORE = "core"
#: Kept apart from the core. Attempts stay in the core: a write by an attempt touches its
#: attempt record (sign of life) and the core is written anyway.
_COLLECTIONS = ("inputs", "candidates", "acceptances", "effects", "refusals")
_DECODED: dict[tuple[str, str], tuple[bytes, Any]] = {}
#: The layout's version, in every core ("v"); the older versions read too.
_LAYOUT = 4
_READS = (2, 3, 4)
_CACHE_MAX = 8192


@dataclass(slots=True)   # not frozen: built twice per owner step, and never changed
class _View:
    """The state a command sees: ``n`` journal entries stored, ``state.journal`` a sorted subset.

    ``stamps`` names the stored collections: ``{name: (length, seq)}``. ``x``: the first entry
    that may lack an index entry (None: none does); ``scanned``: the batches from ``x`` to ``n``
    as ``(start, entries)``, when a lookup had to read them. ``runs``: the index runs the core
    names, ``(entries, seq)`` oldest first; ``indexed``: their values in the same order, when
    a lookup read them (None: not read).
    """

    n: int
    state: WorkState
    stamps: dict[str, tuple[int, int]]
    x: int | None = None
    scanned: tuple[tuple[int, tuple[JournalEntry, ...]], ...] = ()
    runs: tuple[tuple[int, int], ...] = ()
    indexed: tuple[dict[str, list[int]], ...] | None = None


def _read(ctx: restate.ObjectSharedContext | restate.ObjectContext,
          name: str) -> Awaitable[bytes | None]:
    """A state read issued (its journal entry written); its value comes with :func:`awaited`
    (an eagerly sent state's value without a task of its own)."""
    return ctx.get(name, serde=_B)


async def _get(ctx: restate.ObjectSharedContext | restate.ObjectContext, name: str) -> bytes | None:
    """One state value, as stored."""
    return await awaited(_read(ctx, name))


def _corrupt(key: str, why: object) -> InvalidRecord:
    return InvalidRecord(f"the stored ledger of {key!r} is corrupt: {why}", work_id=key)


#: Commands this process sent one-way to a ledger, by their bytes' tail (the last entry's ids
#: and the time: distinct per send): when the ledger's handler runs in the same process (a
#: deployment serving both), it takes the command as sent instead of decoding it again, if the
#: bytes it is handed are the ones sent. A miss (another process, a replay) decodes as usual.
_SENT: dict[bytes, tuple[bytes, L.Command | tuple[L.RecordSteps, L.Command]]] = {}
_SENT_MAX = 64
_TAIL = 160


def sent(raw: bytes, cmd: L.Command | tuple[L.RecordSteps, L.Command]) -> bytes:
    """Remember that ``raw`` is ``cmd`` encoded, as sent to a ledger (see :data:`_SENT`): a
    command, or held steps and the command that carries them."""
    _keep(_SENT, _SENT_MAX, raw[-_TAIL:], raw, cmd)
    return raw


#: How many commands the ledger's handler took as sent, in this process (tests, benchmarks).
taken = 0
#: How many invocations of each ledger writer (by handler name) ran in this process, replays
#: included (tests, benchmarks).
executed: dict[str, int] = {EXECUTE: 0, EXECUTE_LAZY: 0}


def _received(raw: bytes) -> Any:
    """The command ``raw`` encodes: as this process sent it, or decoded."""
    global taken
    hit = _SENT.pop(raw[-_TAIL:], None)
    if hit is not None and hit[0] == raw:
        taken += 1
        return hit[1]
    return codec.loads(raw)


def _keep(cache: dict[Any, tuple[bytes, Any]], most: int, key: Any, raw: bytes,
          value: Any) -> None:
    """``cache[key] = (raw, value)``, the oldest key dropped first to keep at most ``most``."""
    if key not in cache and len(cache) >= most:
        cache.pop(next(iter(cache)))
    cache[key] = (raw, value)


def _remember(key: tuple[str, str], raw: bytes, value: Any) -> None:
    _keep(_DECODED, _CACHE_MAX, key, raw, value)


def _cached(key: str, name: str, raw: bytes) -> Any:
    """The value decoded from ``raw`` under ``(key, name)``, if these are the bytes it was
    decoded from; else None (every stored value decodes to something else than None)."""
    hit = _DECODED.get((key, name))
    return hit[1] if hit is not None and hit[0] == raw else None


_Core = tuple[int, int | None, dict[str, tuple[int, int]], tuple[tuple[int, int], ...], WorkState]


def _core(key: str, core: bytes) -> _Core:
    """``(n, x, stamps, runs, head)`` of a stored core."""
    got: _Core | None = _cached(key, _CORE, core)
    if got is not None:
        return got
    try:
        head = json.loads(core)
        layout = head.get("v", 1)
        n = int(head["n"])
        x = int(head["x"]) if "x" in head else None
        stamps = {str(k): (int(v[0]), int(v[1])) for k, v in dict(head.get("k", {})).items()}
        runs = tuple((int(c), int(q)) for c, q in head.get("i", ()))
        base = codec.decode(head["s"])
    except (ValueError, KeyError, TypeError, AttributeError, OutliveError) as exc:
        raise _corrupt(key, exc) from exc
    if layout not in _READS:
        raise _corrupt(key, f"its core is of layout {layout!r}; this outlive reads layouts "
                            f"{_READS} (a batch key per change, not a key per journal entry)")
    if not isinstance(base, WorkState) or base.work_id != key or n < len(base.journal) or \
            any(k not in _COLLECTIONS for k in stamps) or (x is not None and not 0 <= x < n) or \
            any(c <= 0 for c, _q in runs) or len({q for _c, q in runs}) < len(runs):
        raise _corrupt(key, "bad core record")
    if layout < 4:   # an index key per entry, not read: every entry may be unindexed
        runs, x = (), 0 if n else None
    _remember((key, _CORE), core, (n, x, stamps, runs, base))
    return n, x, stamps, runs, base


def _collection(key: str, name: str, stamp: tuple[int, int], raw: bytes | None) -> tuple[Any, ...]:
    """One stored collection, from the value its key holds."""
    count, seq = stamp
    if raw is None:
        raise _corrupt(key, f"{name} (seq {seq}) is missing")
    value: tuple[Any, ...] | None = _cached(key, name, raw)
    if value is None:
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


def _run_of(key: str, count: int, seq: int, n: int, raw: bytes | None) -> dict[str, list[int]]:
    """One stored index run (``{rid: [i, k]}``, ``count`` entries), from the value its key holds."""
    name = f"i/{seq}"
    if raw is None:
        raise _corrupt(key, f"index run {seq} is missing")
    got: dict[str, list[int]] | None = _cached(key, name, raw)
    if got is not None:
        return got
    try:
        run: dict[str, list[int]] = json.loads(raw)
        ok = isinstance(run, dict) and len(run) == count and all(
            type(p) is list and len(p) == 2 and type(p[0]) is int and type(p[1]) is int
            and 0 <= p[1] <= p[0] < n for p in run.values())
    except ValueError as exc:
        raise _corrupt(key, exc) from exc
    if not ok:
        raise _corrupt(key, f"index run {seq} is not {count} places of committed entries")
    _remember((key, name), raw, run)
    return run


async def _batch(ctx: restate.ObjectSharedContext | restate.ObjectContext, k: int,
                 n: int) -> tuple[JournalEntry, ...]:
    """The committed batch that starts at entry ``k`` (``k < n``, the stored journal length)."""
    return _decoded_batch(ctx.key(), k, n, await _get(ctx, f"b/{k}"))


async def _batches(ctx: restate.ObjectSharedContext | restate.ObjectContext, ks: list[int],
                   n: int) -> dict[int, tuple[JournalEntry, ...]]:
    """The committed batches that start at the entries ``ks``, their reads issued together."""
    futures = [(k, _read(ctx, f"b/{k}")) for k in ks]
    key = ctx.key()
    return {k: _decoded_batch(key, k, n, await awaited(future)) for k, future in futures}


def _decoded_batch(key: str, k: int, n: int, raw: bytes | None) -> tuple[JournalEntry, ...]:
    if raw is None:
        raise InvalidRecord(f"journal entry {k} of {key!r} is missing", work_id=key)
    name = f"b/{k}"
    got: tuple[JournalEntry, ...] | None = _cached(key, name, raw)
    if got is not None:
        return got
    try:
        batch = codec.loads(raw)
    except OutliveError as exc:  # codec raises InvalidRecord for bad JSON and bad records
        raise _corrupt(key, exc) from exc
    if not isinstance(batch, tuple) or not batch or k + len(batch) > n or \
            not all(isinstance(e, JournalEntry) for e in batch):
        raise _corrupt(key, f"batch {k} is not a run of committed journal entries")
    _remember((key, name), raw, batch)
    return batch


async def _view(ctx: restate.ObjectSharedContext | restate.ObjectContext,
                rids: frozenset[str] = frozenset()) -> _View | None:
    """The core, plus the committed entries whose result ids are in ``rids``."""
    key = ctx.key()
    core = await _get(ctx, _CORE)
    if not core:
        return None
    n, x, stamps, runs, base = _core(key, core)
    # Each group of reads is issued together, then awaited in order: were the object's state
    # read lazily, that would be one round trip per group, not one per key. The reads are a
    # function of the stored core and whether the command names entries, so a replay issues
    # the same.
    # 1. the collections the core names, and the index runs if the command names entries
    named = [name for name in _COLLECTIONS if name in stamps]
    col_reads = [(name, _read(ctx, f"c/{name}/{stamps[name][1]}")) for name in named]
    run_reads = [_read(ctx, f"i/{seq}") for _c, seq in runs] if rids else []
    cols = {name: _collection(key, name, stamps[name], await awaited(future))
            for name, future in col_reads}
    if cols:
        base = replace(base, **cols)  # type: ignore[arg-type]
    indexed = tuple([_run_of(key, c, seq, n, await awaited(future))
                     for (c, seq), future in zip(runs, run_reads, strict=True)]) if rids else None
    last = base.journal[-1] if base.journal else None
    ordered = sorted(rids)
    places: list[tuple[int, int] | None] = []
    for rid in ordered:
        place = None
        for run in reversed(indexed or ()):   # the newest first, as a later write would win
            p = run.get(rid)
            if p is not None:
                place = (p[0], p[1])
                break
        places.append(place)
    # 2. the batches those places name (the last entry is in the core)
    ks = sorted({p[1] for p in places if p is not None and not (p[0] == n - 1 and last is not None)})
    batches = await _batches(ctx, ks, n)
    found: dict[int, JournalEntry] = {}
    missing = set()
    for rid, place in zip(ordered, places, strict=True):
        e = None
        if place is not None and place[0] not in found:
            i, k = place
            if i == n - 1 and last is not None:
                e = last
            else:
                batch = batches[k]
                e = batch[i - k] if i - k < len(batch) else None
        if e is not None and e.result_id == rid:
            found[i] = e
        else:   # not indexed (a place its batch disagrees with is not believed either)
            missing.add(rid)
    scanned: list[tuple[int, tuple[JournalEntry, ...]]] = []
    if missing and x is not None:
        # entries from x on may have no index key (an owner wrote them): read those batches
        k = x
        while k < n:
            batch = await _batch(ctx, k, n)
            scanned.append((k, batch))
            for j, e in enumerate(batch):
                if e.result_id in missing:
                    found[k + j] = e
            k += len(batch)
    if n:
        if last is None:
            raise _corrupt(key, "the core holds no last entry")
        found[n - 1] = last
    return _View(n, replace(base, journal=tuple(found[i] for i in sorted(found))), stamps, x,
                 tuple(scanned), runs, indexed)


async def read_all(ctx: restate.ObjectSharedContext | restate.ObjectContext) -> _View | None:
    """The whole state, every journal entry included (``load``: restore and inspection)."""
    view = await _view(ctx)
    if view is None:
        return None
    entries: list[JournalEntry] = []
    while len(entries) < view.n:
        entries += await _batch(ctx, len(entries), view.n)
    if entries and entries[-1] != view.state.journal[-1]:
        raise _corrupt(ctx.key(), "the last batch does not end with the core's last entry")
    return replace(view, state=replace(view.state, journal=tuple(entries)))


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _encode_entry(e: JournalEntry) -> bytes:
    """A journal entry as :func:`_write` stores it (the JSON of its encoded form, written
    straight to text by the codec: the same bytes as ``_json(codec.encode(e))``)."""
    return codec.dumps(e).encode()


def _write(ctx: restate.ObjectContext, view: _View | None, new: WorkState,
           wrote: list[bytes] | None = None, *, index: bool = True) -> _View:
    """Store ``new`` (the result of ``apply`` on ``view``): what changed, then the core.

    Returns the view of what is now stored (``new`` itself as the state). ``wrote`` gets the
    written values as the JSON members of an answer (:func:`answer`): ``"j":[entries]``, then
    ``"c":{collections}``, then ``"core":core``. ``index=False`` (the owner shape) indexes
    none of the new entries; else they are indexed in a new run, with the entries ``view``
    read unindexed, merged with the newest runs no larger than it whose values ``view`` holds
    (a command that names no entry reads no run, and adds one).
    """
    key = ctx.key()
    old = view.state if view is not None else None
    n, seen = (view.n, len(view.state.journal)) if view is not None else (0, 0)
    x = view.x if view is not None else None
    # apply appends to the journal it was given and keeps its entries (identity), so checking
    # the last one is enough (and O(1): an owner's view holds the whole journal)
    if old is not None and seen and (len(new.journal) < seen
                                     or new.journal[seen - 1] is not old.journal[-1]):
        raise _corrupt(key, "a command rewrote journal history")  # apply never does
    added = new.journal[seen:]
    places: dict[str, list[int]] = {}
    if index and x is not None and view is not None and view.scanned and \
            sum(len(b) for _k, b in view.scanned) == n - x:
        for start, read in view.scanned:   # the entries read unindexed: indexed from now on
            for j, e in enumerate(read):
                places[e.result_id] = [start + j, start]
        x = None
    elif not index and added and x is None:
        x = n
    entries: list[bytes] = []
    for k, e in enumerate(added):
        entries.append(_encode_entry(e))
        if index:
            places[e.result_id] = [n + k, n]
    runs = list(view.runs) if view is not None else []
    values = list(view.indexed) if view is not None and view.indexed is not None else None
    merged: list[int] = []
    if places:
        while values is not None and runs and runs[-1][0] <= len(places):
            merged.append(runs.pop()[1])
            places = {**values.pop(), **places}
        run = _json(places)
        ctx.set(f"i/{new.seq}", run, serde=_B)
        _remember((key, f"i/{new.seq}"), run, places)
        runs.append((len(places), new.seq))
        if values is not None:
            values.append(places)
    if added:
        batch = b'{"@l":[' + b",".join(entries) + b"]}"
        ctx.set(f"b/{n}", batch, serde=_B)
        _remember((key, f"b/{n}"), batch, tuple(added))
    n += len(added)
    before = view.stamps if view is not None else {}
    stamps = dict(before)
    cols: list[bytes] = []
    for name in _COLLECTIONS:
        value = getattr(new, name)
        if value and (old is None or value is not getattr(old, name)):
            raw = codec.dumps(value).encode()
            ctx.set(f"c/{name}/{new.seq}", raw, serde=_B)
            _remember((key, name), raw, value)
            stamps[name] = (len(value), new.seq)
            cols.append(b'"%s":%s' % (name.encode(), raw))
        elif not value:
            stamps.pop(name, None)
    head = evolve(new, journal=new.journal[-1:], inputs=(), candidates=(), acceptances=(),
                  effects=(), refusals=())
    # written as _json({"v": .., "n": .., ["x": ..,] "k": .., "s": codec.encode(head)}) would
    # write it, the head by the codec's text writer
    core = b'{"v":%d,"n":%d,%s"k":%s,%s"s":%s}' % (
        _LAYOUT, n, b'"x":%d,' % x if x is not None else b"",
        _json({k: list(v) for k, v in stamps.items()}),
        b'"i":%s,' % _json(runs) if runs else b"", codec.dumps(head).encode())
    ctx.set(_CORE, core, serde=_B)
    if wrote is not None:
        wrote += [b'"j":[', b",".join(entries), b'],"c":{', b",".join(cols), b'},"core":', core]
    kept = tuple(runs)
    _remember((key, _CORE), core, (n, x, stamps, kept, head))
    for name, (_count, seq) in before.items():
        if stamps.get(name, (0, -1))[1] != seq:
            ctx.clear(f"c/{name}/{seq}")  # replaced: the core no longer names it
    for seq in merged:
        ctx.clear(f"i/{seq}")   # merged into the new run
    return _View(n, new, stamps, x, (), kept, tuple(values) if values is not None else None)


async def _apply(ctx: restate.ObjectContext, cmd: L.Command,
                 wrote: list[bytes] | None = None) -> L.Outcome:
    """``cmd`` applied and its change written; ``wrote`` gets the members of an answer."""
    once = L.checked(cmd)   # checked and copied once, for reads() and apply()
    view = await _view(ctx, L.reads(None, once))
    state = view.state if view is not None else None
    new, outcome = L.apply(state, once, work_id=ctx.key())
    if wrote is not None:
        wrote += [b'{"o":', _errors.dumps(outcome), b',"q":%d,"n":%d' % (
            state.seq if state is not None else -1, view.n if view is not None else 0)]
    if L.changed(state, new):
        if wrote is not None:
            wrote.append(b",")
        _write(ctx, view, new, wrote)
    if wrote is not None:
        wrote.append(b"}")
    return outcome


async def _apply_carried(ctx: restate.ObjectContext, steps: L.RecordSteps,
                         cmd: L.Command) -> L.Outcome:
    """Held ``steps`` and then ``cmd``, applied on one read of the state and written once.

    As if the steps had been a command of their own before ``cmd``: their refusal is dropped
    (nothing of theirs written), and ``cmd``'s refusal leaves their change written.
    """
    try:
        once = L.checked(cmd)
    except OutliveError:
        with contextlib.suppress(OutliveError):
            await _apply(ctx, steps)
        raise
    try:
        held: L.Checked | None = L.checked(steps)
    except OutliveError:
        held = None
    rids = L.reads(None, once) | (L.reads(None, held) if held is not None else frozenset())
    view = await _view(ctx, rids)
    state = view.state if view is not None else None
    after = state
    if held is not None:
        with contextlib.suppress(OutliveError):
            after, _ = L.apply(state, held, work_id=ctx.key())
    try:
        new, outcome = L.apply(after, once, work_id=ctx.key())
    except OutliveError:
        if after is not None and L.changed(state, after):
            _write(ctx, view, after)
        raise
    if L.changed(state, new):
        _write(ctx, view, new)
    return outcome


async def apply_command(ctx: restate.ObjectContext, cmd: L.Command) -> L.Outcome:
    """Apply ``cmd`` to this key's ledger: read what it needs, ``ledger.apply``, write the change."""
    return await _apply(ctx, cmd)


def answer(raw: bytes, known: WorkState | None) -> tuple[L.Outcome, WorkState | None]:
    """An ``outlive_execute`` answer asked for with :data:`ANSWER`: the outcome, and the state
    the write left, or None when it cannot be told from ``known`` (read the state instead).

    The answer holds the write's outcome, the state's ``seq`` and journal length before it,
    and the values the write stored (its journal entries, the collections it replaced, the
    core). Every change moves ``seq`` and entries are written once, so when ``known`` (a state
    of the same work read or answered before) is at that ``seq``, the stored state after the
    write is the stored values with the rest — the journal before them, the collections the
    write left alone — taken from ``known``: what reading every key would return.
    """
    try:
        got = json.loads(raw)
        outcome = codec.decode(got["o"])
        seq, n = int(got["q"]), int(got["n"])
        core = got.get("core")
    except (ValueError, KeyError, TypeError, OutliveError) as exc:
        raise InvalidRecord(f"the ledger answered with something else ({exc})") from exc
    if not isinstance(outcome, L.Outcome):
        raise InvalidRecord(f"the ledger answered with {type(outcome).__name__}")
    before = known is not None and known.seq == seq and len(known.journal) == n
    if core is None:    # nothing changed
        return outcome, known if before else None
    if seq >= 0 and not before:
        return outcome, None
    try:
        head = codec.decode(core["s"])
        stamps = dict(core.get("k", {}))
        cols = {name: codec.decode(v) for name, v in dict(got["c"]).items()}
        added = tuple(codec.decode(e) for e in got["j"])
    except (ValueError, KeyError, TypeError, AttributeError, OutliveError) as exc:
        raise InvalidRecord(f"the ledger answered with something else ({exc})") from exc
    if not isinstance(head, WorkState) or not all(isinstance(e, JournalEntry) for e in added):
        raise InvalidRecord("the ledger answered with something else")
    prior = known.journal if known is not None and seq >= 0 else ()
    for name in _COLLECTIONS:
        if name not in cols:
            cols[name] = getattr(known, name) if name in stamps and known is not None and \
                seq >= 0 else ()
    state = replace(head, journal=prior + added, **cols)
    if len(state.journal) != int(core["n"]) or state.journal[-1:] != head.journal:
        raise InvalidRecord("the ledger's answer does not extend the state known before it")
    return outcome, state


def _asks_state(ctx: restate.ObjectContext) -> bool:
    return any(k.lower() == ANSWER and v == "state" for k, v in ctx.request().headers.items())


def keep_ledger(obj: restate.VirtualObject) -> restate.VirtualObject:
    """Keep works' ledgers on ``obj`` (keyed by work id): add ``outlive_execute``,
    ``outlive_execute_lazy`` and ``outlive_load``.

    Returns ``obj``. Serve it in your app and register the app once, as any deployment.
    """
    if EXECUTE in obj.handlers or EXECUTE_LAZY in obj.handlers or LOAD in obj.handlers:
        raise InvalidRecord(f"{obj.name!r} already keeps an outlive ledger")

    async def execute(ctx: restate.ObjectContext, req: bytes) -> bytes:
        """Apply one encoded command to this key's ledger; the only writer of the state.

        Or a pair ``(RecordSteps, command)``: an attempt's held step writes carried by its next
        command. Both are applied on one read of the state and written once, the steps first:
        their refusal is dropped, as it would be had they been sent one-way before the command
        (what refuses them — a stale token — refuses the command after them too), and the
        command's refusal leaves their change written. The command's outcome is the answer.
        """
        try:
            cmd = _received(req)
            if type(cmd) is tuple and len(cmd) == 2 and isinstance(cmd[0], L.RecordSteps) \
                    and L.is_command(cmd[1]) and not _asks_state(ctx):
                return _errors.dumps(await _apply_carried(ctx, *cmd))
            if not L.is_command(cmd):
                raise InvalidRecord(f"not a ledger command: {type(cmd).__name__}")
            if not _asks_state(ctx):
                return _errors.dumps(await _apply(ctx, cmd))
            wrote: list[bytes] = []
            await _apply(ctx, cmd, wrote)
            return b"".join(wrote)
        except OutliveError as exc:
            raise _errors.to_terminal(exc) from None

    async def load(ctx: restate.ObjectSharedContext, req: bytes) -> bytes:
        """The last committed state (empty body: never opened). Runs beside the writer."""
        del req
        try:
            view = await read_all(ctx)
        except OutliveError as exc:
            raise _errors.to_terminal(exc) from None
        return _errors.dumps(view.state) if view is not None else b""

    def writer(name: str) -> Any:
        async def run(ctx: restate.ObjectContext, req: bytes) -> bytes:
            executed[name] += 1
            return await execute(ctx, req)
        run.__doc__ = execute.__doc__
        return run

    obj.handler(name=EXECUTE, kind="exclusive", input_serde=_B, output_serde=_B)(writer(EXECUTE))
    obj.handler(name=EXECUTE_LAZY, kind="exclusive", input_serde=_B, output_serde=_B,
                state_preload=False)(writer(EXECUTE_LAZY))
    obj.handler(name=LOAD, kind="shared", input_serde=_B, output_serde=_B)(load)
    return obj


#: outlive's own ledger object (the handler shape's default home of every work's ledger).
ledger_object = keep_ledger(restate.VirtualObject(
    LEDGER,
    description="outlive: one work's ledger (fenced state machine) per key",
    inactivity_timeout=STALLED, abort_timeout=STALLED,
    # A handler error that is not terminal is a bug or an outage: retry, but never forever.
    invocation_retry_policy=InvocationRetryPolicy(
        initial_interval=timedelta(milliseconds=50), max_interval=timedelta(seconds=2),
        max_attempts=200, on_max_attempts="pause"),
    # The state is the record; a finished command's journal is not needed. Completions are
    # kept for the idempotency window in which a client retries a command (minutes).
    journal_retention=timedelta(0),
    idempotency_retention=timedelta(minutes=10),
    # Every key sent with every invocation (Restate's default) to outlive_execute and
    # outlive_load; outlive_execute_lazy reads its keys lazily (see EXECUTE_LAZY). A command
    # reads only the keys it needs (the layout above), so state read lazily does not grow with
    # the journal: the last beat of a 12,288-step attempt took ~144 ms here eagerly, ~38 ms
    # lazily. But each round of lazy reads is a round trip: the 864-run sweep of small works
    # took 130 s lazily against 111 s. Restate 1.8 can preload just the core (a list of keys);
    # the server here is 1.7.
    state_preload=True,
))
