"""The ledger's storage layout in Restate K/V state survives a write cut short at any point.

An owner invocation can be cancelled or killed between two of its state writes, and Restate
keeps the writes it had already journaled. The layout makes the core key the commit point, so
whatever prefix of a command's writes landed, a reader sees the state from before the command,
and the next command proceeds as if the cut write never happened. A real server cannot be made
to kill between two given writes, so this test runs the storage functions of
``outlive_restate._ledger`` over a plain dict standing in for one object's K/V state, and cuts
every write of a whole work's life (open, publish, admit, steps, candidate, acceptance, effect,
finish, a successor) at every point. The same functions run against the real server in every
other test of this adapter.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from outlive import Backend, Contract, Controller, External, Worker
from outlive import ledger as L
from outlive.errors import InvalidRecord, OutliveError, StaleOwner
from outlive.records import Receipt, WorkState
from outlive_restate._ledger import _apply, _view, _write, answer, read_all

pytestmark = pytest.mark.asyncio(loop_scope="session")

V1 = {"s1": "Intro.", "s2": "Revenue was 4.1 million.", "s3": "Outlook."}
V2 = {**V1, "s2": "Revenue was 4.7 million."}


class _KV:
    """One Virtual Object's K/V state: what ``ctx.get/set/clear`` touch, and nothing else."""

    def __init__(self, key: str, data: dict[str, bytes] | None = None) -> None:
        self._key = key
        self.data = dict(data or {})
        self.ops: list[tuple[str, str, bytes | None]] = []

    def key(self) -> str:
        return self._key

    async def get(self, name: str, serde: Any = None) -> bytes | None:
        return self.data.get(name)

    def set(self, name: str, value: bytes, serde: Any = None) -> None:
        self.ops.append(("set", name, value))

    def clear(self, name: str) -> None:
        self.ops.append(("clear", name, None))


def _run(data: dict[str, bytes], ops: list[tuple[str, str, bytes | None]]) -> dict[str, bytes]:
    out = dict(data)
    for op, name, value in ops:
        if op == "set":
            assert value is not None
            out[name] = value
        else:
            out.pop(name, None)
    return out


def _indexed(data: dict[str, bytes]) -> dict[str, list[int]]:
    """Every place the index runs the core names hold (``{rid: [i, k]}``)."""
    runs = json.loads(data["core"]).get("i", [])
    return {rid: p for _count, seq in runs for rid, p in json.loads(data[f"i/{seq}"]).items()}


async def _started(b: Backend, w: str) -> tuple[Controller, Worker]:
    """Work ``w`` opened on ``b`` with V1 published, and its first attempt's worker started."""
    ctl = Controller(b, clock=lambda: 1)
    await ctl.open_work(w)
    await ctl.publish(w, "v1", V1)
    wk = Worker(b, await ctl.admit(w), V1, clock=lambda: 2)
    await wk.start()
    return ctl, wk


async def _full(key: str, data: dict[str, bytes]) -> WorkState | None:
    view = await read_all(_KV(key, data))  # type: ignore[arg-type]
    return view.state if view is not None else None


class _CutEverywhere(Backend):
    """Applies each command as the ledger handler does; checks every cut of its writes first."""

    def __init__(self) -> None:
        super().__init__("cuts://")
        self.data: dict[str, dict[str, bytes]] = {}
        self.cuts = 0

    async def execute(self, work_id: str, command: L.Command) -> L.Outcome:
        data = self.data.setdefault(work_id, {})
        before = await _full(work_id, data)
        kv = _KV(work_id, data)
        view = await _view(kv, L.reads(None, command))  # type: ignore[arg-type]
        state = view.state if view is not None else None
        new, outcome = L.apply(state, command, work_id=work_id)
        if new is state:
            return outcome
        _write(kv, view, new)  # type: ignore[arg-type]
        core_at = max(i for i, op in enumerate(kv.ops) if op[1] == "core")
        for cut in range(len(kv.ops)):
            torn = _run(data, kv.ops[:cut])
            seen = await _full(work_id, torn)
            if cut <= core_at:
                assert seen == before, f"{type(command).__name__} cut after {cut} writes"
                # ... and the same command applied on top of the torn state lands whole
                kv2 = _KV(work_id, torn)
                view2 = await _view(kv2, L.reads(None, command))  # type: ignore[arg-type]
                new2, _ = L.apply(view2.state if view2 else None, command, work_id=work_id)
                _write(kv2, view2, new2)  # type: ignore[arg-type]
                assert await _full(work_id, _run(torn, kv2.ops)) == await _full(
                    work_id, _run(data, kv.ops))
            else:   # only the clearing of replaced keys is missing
                assert seen == await _full(work_id, _run(data, kv.ops))
            self.cuts += 1
        self.data[work_id] = _run(data, kv.ops)
        after = await _full(work_id, self.data[work_id])
        assert after is not None and after.seq == new.seq and after.journal[-1:] == \
            new.journal[-1:]
        return outcome

    async def load(self, work_id: str) -> WorkState | None:
        return await _full(work_id, self.data.get(work_id, {}))


async def test_every_write_of_a_work_can_be_cut_anywhere() -> None:
    b = _CutEverywhere()
    clock = [0]
    ctl = Controller(b, clock=lambda: clock[0])
    w = "cuts/q3"
    await ctl.open_work(w)
    await ctl.publish(w, "v1", V1)
    a1 = await ctl.admit(w)
    wk = Worker(b, a1, V1, clock=lambda: clock[0])
    await wk.start()

    def model(**kw: str) -> dict[str, str]:
        return {"summary": next(iter(kw.values()))[:10]}

    for name in V1:
        clock[0] += 1
        await wk.step(name, model, **{name: V1[name]})
    cand = await wk.candidate()
    await ctl.assess(w, cand.digest, Contract(name="form", version="1", assessor="t"),
                     lambda c, v: (True, "ok"))
    await wk.effect("post:1", {"text": "digest"},
                    lambda key, payload: Receipt(effect_id="P1", duplicate=False, key=key))
    await wk.finish()
    # the input changes and a successor restores what still matches
    await ctl.publish(w, "v2", V2)
    a2 = await ctl.admit(w)
    wk2 = Worker(b, a2, V2, clock=lambda: clock[0])
    await wk2.start()
    for name in V2:
        await wk2.step(name, model, **{name: V2[name]})
    assert sorted(k for k, s in wk2.steps.items() if s.restored) == ["s1", "s3"]
    # the replaced attempt's late write is refused, and a refusal writes nothing
    with pytest.raises(StaleOwner):
        await wk.candidate()
    st = await b.load(w)
    assert st is not None and [e.step for e in st.journal] == ["s1", "s2", "s3", "s2"]
    assert len(st.candidates) == 1 and len(st.acceptances) == 1 and len(st.effects) == 1
    assert b.cuts >= 25  # every set and clear of 17 commands


class _Answering(Backend):
    """Applies each command as the ledger handler does, and checks its answer (``ANSWER``)."""

    def __init__(self) -> None:
        super().__init__("answers://")
        self.data: dict[str, dict[str, bytes]] = {}
        self.checked = 0

    async def execute(self, work_id: str, command: L.Command) -> L.Outcome:
        data = self.data.setdefault(work_id, {})
        before = await _full(work_id, data)
        kv = _KV(work_id, data)
        wrote: list[bytes] = []
        await _apply(kv, command, wrote)  # type: ignore[arg-type]
        raw = b"".join(wrote)
        self.data[work_id] = _run(data, kv.ops)
        after = await _full(work_id, self.data[work_id])
        outcome, state = answer(raw, before)
        assert state == after, type(command).__name__   # what a read would return
        if before is not None:       # known at another seq or a shorter journal: read instead
            assert answer(raw, replace(before, seq=before.seq - 1))[1] is None
            if before.journal:
                assert answer(raw, replace(before, journal=before.journal[:-1]))[1] is None
        self.checked += 1
        return outcome

    async def load(self, work_id: str) -> WorkState | None:
        return await _full(work_id, self.data.get(work_id, {}))


async def test_a_write_answers_with_the_state_it_left() -> None:
    """The answer a write gives when asked (the conformance driver's, instead of a read) is the
    stored state, the journal's prefix taken from the state known before the write."""
    b = _Answering()
    w = "answers/q3"
    ctl, wk = await _started(b, w)
    for name in V1:
        await wk.step(name, lambda **kw: {"summary": "x"}, **{name: V1[name]})
    await wk.step("s1", lambda **kw: {"summary": "x"}, s1=V1["s1"])   # restored: no change
    cand = await wk.candidate()
    await ctl.assess(w, cand.digest, Contract(name="form", version="1", assessor="t"),
                     lambda c, v: (True, "ok"))
    await wk.finish()
    assert b.checked >= 10


class _Held(Backend):
    """Applies commands as the ledger handler does, or (``hold``) in memory only, as an owner
    holds its step writes back; ``cut()`` then writes them the way a flush does and loses
    everything from the core on (an owner killed in the middle of its flush)."""

    def __init__(self, url: str = "held://") -> None:
        super().__init__(url)
        self.data: dict[str, bytes] = {}
        self.held: tuple[Any, WorkState] | None = None   # (the stored view, the state in memory)

    async def execute(self, work_id: str, command: L.Command) -> L.Outcome:
        kv = _KV(work_id, self.data)
        if self.held is None:
            outcome = await _apply(kv, command)  # type: ignore[arg-type]
            self.data = _run(self.data, kv.ops)
            return outcome
        new, outcome = L.apply(self.held[1], command, work_id=work_id)
        self.held = (self.held[0], new)
        return outcome

    async def hold(self, work_id: str) -> None:
        view = await read_all(_KV(work_id, self.data))  # type: ignore[arg-type]
        assert view is not None
        self.held = (view, view.state)

    def cut(self, work_id: str) -> list[str]:
        """The held writes, cut just before the core; the result ids of the lost entries."""
        assert self.held is not None
        view, new = self.held
        kv = _KV(work_id, self.data)
        _write(kv, view, new)  # type: ignore[arg-type]
        core_at = max(i for i, op in enumerate(kv.ops) if op[1] == "core")
        self.data = _run(self.data, kv.ops[:core_at])
        self.held = None
        return [e.result_id for e in new.journal[view.n:]]

    async def load(self, work_id: str) -> WorkState | None:
        return await _full(work_id, self.data)


async def test_a_cut_batch_is_overwritten_and_its_index_run_is_not_reached() -> None:
    """A flush killed before its core leaves a batch of two entries and their index run, past
    the core's journal length and named by no core. A successor's different step then lands at
    the same index, its own run under the same seq: a lookup by the lost entries' result ids
    finds nothing, before and after the journal grows past them."""
    b = _Held()
    w = "cuts/held"
    ctl, wk = await _started(b, w)
    await wk.step("s1", lambda **kw: {"summary": "one"}, s1=V1["s1"])
    await b.hold(w)
    await wk.step("s2", lambda **kw: {"summary": "old two"}, s2=V1["s2"])
    await wk.step("s3", lambda **kw: {"summary": "old three"}, s3=V1["s3"])
    lost = b.cut(w)
    stray = [k for k in b.data if k.startswith("i/") and
             [k] != [f"i/{q}" for _c, q in json.loads(b.data["core"])["i"]]]
    assert len(lost) == 2 and "b/1" in b.data and len(stray) == 1
    assert sorted(json.loads(b.data[stray[0]])) == sorted(lost)
    assert not set(lost) & set(_indexed(b.data))
    st = await b.load(w)
    assert st is not None and [e.step for e in st.journal] == ["s1"]

    await ctl.publish(w, "v2", V2)
    await ctl.stop(w, 1)
    a2 = await ctl.admit(w)
    wk2 = Worker(b, a2, V2, clock=lambda: 3)
    await wk2.start()
    await wk2.step("s2", lambda **kw: {"summary": "new two"}, s2=V2["s2"])
    kv = _KV(w, b.data)
    view = await _view(kv, frozenset(lost))  # type: ignore[arg-type]
    assert view is not None and [e.step for e in view.state.journal] == ["s2"]   # the last only
    assert view.state.journal[0].result_id not in lost
    await wk2.step("s4", lambda **kw: {"summary": "four"}, s4=External("x"))   # entry 2: past both lost
    view = await _view(_KV(w, b.data), frozenset(lost))  # type: ignore[arg-type]
    assert view is not None and [e.step for e in view.state.journal] == ["s4"]
    st = await b.load(w)
    assert st is not None and [(e.step, e.attempt) for e in st.journal] == [
        ("s1", 1), ("s2", 2), ("s4", 2)]
    assert not any(e.result_id in lost for e in st.journal)
    assert not set(lost) & set(_indexed(b.data))


async def test_a_ledger_of_another_layout_is_refused_not_misread() -> None:
    """A core without the layout's version (one key per journal entry, before batches) fails
    with a message that says so, instead of reading its entries' keys as missing batches."""
    b = _Held()
    ctl = Controller(b, clock=lambda: 1)
    await ctl.open_work("cuts/old")
    core = json.loads(b.data["core"])
    assert core.pop("v") == 4
    b.data["core"] = json.dumps(core).encode()
    with pytest.raises(InvalidRecord, match="layout"):
        await _full("cuts/old", b.data)
    # layout 2 is layout 3 with every entry indexed: read as it is
    b.data["core"] = json.dumps({**core, "v": 2}).encode()
    st = await _full("cuts/old", b.data)
    assert st is not None and st.work_id == "cuts/old"


class _Owner(_Held):
    """Applies commands as the ledger handler does, or (between ``hold`` and ``flush``) in
    memory, written at ``flush`` as the owner shape writes them: without index keys."""

    def __init__(self) -> None:
        super().__init__("owner://")
        self.last: L.Command | None = None

    async def execute(self, work_id: str, command: L.Command) -> L.Outcome:
        self.last = command
        return await super().execute(work_id, command)

    def flush(self, work_id: str) -> None:
        assert self.held is not None
        kv = _KV(work_id, self.data)
        _write(kv, self.held[0], self.held[1], index=False)  # type: ignore[arg-type]
        self.data = _run(self.data, kv.ops)
        self.held = None


async def test_owner_writes_no_index_keys_and_the_next_lookup_reads_its_batches() -> None:
    """The owner shape stores its steps without an index key each (a state write per step is
    an entry the server journals). Whoever else names one of those steps by result id finds it
    by reading the batches the owner wrote, and indexes them when it writes: the candidate
    below would be refused (its parts unknown) if the lookup missed them."""
    b = _Owner()
    w = "owner/unindexed"
    _ctl, wk = await _started(b, w)
    await wk.step("s1", lambda **kw: {"summary": "one"}, s1=V1["s1"])   # the ledger handler's
    await b.hold(w)
    await wk.step("s2", lambda **kw: {"summary": "two"}, s2=V1["s2"])
    await wk.step("s3", lambda **kw: {"summary": "three"}, s3=V1["s3"])
    b.flush(w)
    st = await b.load(w)
    assert st is not None and [e.step for e in st.journal] == ["s1", "s2", "s3"]
    rids = [e.result_id for e in st.journal]
    assert list(_indexed(b.data)) == rids[:1]
    assert json.loads(b.data["core"])["x"] == 1

    view = await _view(_KV(w, b.data), frozenset(rids))  # type: ignore[arg-type]
    assert view is not None and [e.step for e in view.state.journal] == ["s1", "s2", "s3"]
    assert [k for k, _batch in view.scanned] == [1]

    cand = await wk.candidate()   # names s1-s3: through the ledger handler
    assert cand.digest
    assert sorted(_indexed(b.data)) == sorted(rids) and "x" not in json.loads(b.data["core"])
    view = await _view(_KV(w, b.data), frozenset(rids))  # type: ignore[arg-type]
    assert view is not None and len(view.state.journal) == 3 and view.scanned == ()
    # a step write the owner stored, sent again to the ledger handler (a retried write): its
    # entry is found by reading the owner's batch, and not appended twice
    await b.hold(w)
    await wk.step("s4", lambda **kw: {"n": 4}, s4=External("x"))
    assert b.held is not None
    again = b.held[1]
    b.flush(w)
    assert json.loads(b.data["core"])["x"] == 3
    cmd = b.last
    assert isinstance(cmd, L.RecordSteps)
    await b.execute(w, cmd)
    st = await b.load(w)
    assert st is not None and st.journal == again.journal   # (the write still is a sign of life)


class _Batching(Backend):
    """Applies commands as the ledger handler does, counting each command's state reads and
    writes; between ``hold`` and ``send`` it keeps step writes back and applies them as one
    ``RecordSteps``, as a held handler-shape attempt sends them."""

    def __init__(self) -> None:
        super().__init__("batching://")
        self.data: dict[str, bytes] = {}
        self.held: list[L.RecordSteps] | None = None
        self.counts: list[tuple[int, int]] = []   # (reads, writes) of each command applied
        self.steps: list[L.RecordSteps] = []      # every step write, as the worker wrote it

    async def execute(self, work_id: str, command: L.Command) -> L.Outcome:
        if self.held is not None and isinstance(command, L.RecordSteps):
            self.steps.append(command)
            self.held.append(command)
            return L.Outcome(kind="held")
        kv = _Counting(work_id, self.data)
        outcome = await _apply(kv, command)  # type: ignore[arg-type]
        self.data = _run(self.data, kv.ops)
        self.counts.append((kv.reads, sum(op == "set" for op, _n, _v in kv.ops)))
        return outcome

    def hold(self) -> None:
        self.held = []

    async def send(self, work_id: str) -> None:
        held, self.held = self.held, None
        assert held
        first = held[0]
        await self.execute(work_id, L.RecordSteps(
            attempt=first.attempt, token=first.token, at=held[-1].at,
            entries=tuple(e for c in held for e in c.entries), secret=first.secret))

    async def load(self, work_id: str) -> WorkState | None:
        return await _full(work_id, self.data)


class _Counting(_KV):
    def __init__(self, key: str, data: dict[str, bytes]) -> None:
        super().__init__(key, data)
        self.reads = 0

    async def get(self, name: str, serde: Any = None) -> bytes | None:
        self.reads += 1
        return await super().get(name, serde)


async def test_a_batch_of_steps_costs_a_few_state_reads_and_writes_not_two_per_entry() -> None:
    """Each state read and write is an entry the server journals: a batch of 256 step writes
    reads the core, its collections and the index runs, and writes its batch, one run and the
    core (an index key per entry made it 256 reads and 256 writes more). Over a work's life
    the runs stay O(log n) and every entry stays found by result id: a step sent again is not
    appended twice, and a candidate naming every step is accepted."""
    b = _Batching()
    w = "batches/long"
    _ctl, wk = await _started(b, w)
    steps = 0
    for batch in range(9):
        b.hold()
        for _ in range(256 if batch % 3 else 1):   # batches of one step between
            await wk.step(f"t{steps}", lambda **kw: {"n": 1}, **{f"t{steps}": External(steps)})
            steps += 1
        runs = len(json.loads(b.data["core"]).get("i", ()))
        await b.send(w)
        reads, writes = b.counts[-1]   # the core, the inputs, the runs; batch, run, core
        core = json.loads(b.data["core"])
        assert reads <= 2 + runs and writes <= 3, (batch, reads, writes)
        assert len(core["i"]) <= steps.bit_length()
        assert sum(c for c, _q in core["i"]) == steps
    st = await b.load(w)
    assert st is not None and len(st.journal) == steps
    assert sorted(_indexed(b.data)) == sorted(e.result_id for e in st.journal)
    assert not any(k.startswith("i/") and k not in
                   {f"i/{q}" for _c, q in json.loads(b.data["core"])["i"]} for k in b.data)
    # the first step's write again (a retried send): found through the runs, not appended
    await b.execute(w, b.steps[0])
    again = await b.load(w)
    assert again is not None and len(again.journal) == steps
    cand = await wk.candidate()   # names every step: each found
    assert cand.digest


async def test_a_ledger_of_layout_3_is_read_and_indexed_by_its_next_write() -> None:
    """Layout 3 kept an index key per entry; this layout reads such a store with no runs and
    every entry possibly unindexed: a lookup reads the batches, and the write after it indexes
    them in one run and stores a core of this layout."""
    b = _Batching()
    w = "batches/old"
    _ctl, wk = await _started(b, w)
    for name in V1:
        await wk.step(name, lambda **kw: {"n": 1}, **{name: V1[name]})
    st = await b.load(w)
    assert st is not None
    # as layout 3 stored it: an index key per entry, no runs
    core = json.loads(b.data["core"])
    for _c, q in core.pop("i"):
        del b.data[f"i/{q}"]
    for i, e in enumerate(st.journal):
        b.data[f"r/{e.result_id}"] = b"%d,%d" % (i, i)
    b.data["core"] = json.dumps({**core, "v": 3}).encode()
    assert await b.load(w) == st
    view = await _view(_KV(w, b.data), frozenset(e.result_id for e in st.journal))  # type: ignore[arg-type]
    assert view is not None and len(view.state.journal) == 3 and len(view.scanned) == 3
    cand = await wk.candidate()   # its parts found by reading the batches
    assert cand.digest
    core = json.loads(b.data["core"])
    assert core["v"] == 4 and "x" not in core
    assert sorted(_indexed(b.data)) == sorted(e.result_id for e in st.journal)


async def test_steps_carried_by_a_command_are_read_once_and_written_once() -> None:
    """Held steps carried by the attempt's next command are applied on one read of the state
    and stored in one write (their batch, one run, one core), as if sent just before it; a
    refused command leaves the steps' change written, and refused steps leave the command's."""
    from outlive_restate._ledger import _apply_carried

    b = _Batching()
    w = "batches/carried"
    _ctl, wk = await _started(b, w)
    b.hold()
    for name in ("s1", "s2"):
        await wk.step(name, lambda **kw: {"n": 1}, **{name: V1[name]})
    s1, s2 = b.steps
    b.held = None
    beat = L.Heartbeat(attempt=1, token=wk.attempt.token, at=3, secret=wk.attempt.secret)
    kv = _Counting(w, b.data)
    out = await _apply_carried(kv, s1, beat)  # type: ignore[arg-type]
    assert out.kind == "beat"
    sets = [name for op, name, _v in kv.ops if op == "set"]
    assert sets.count("core") == 1 and len(sets) == 3 and kv.reads == 2   # core, inputs (no run yet)
    b.data = _run(b.data, kv.ops)
    st = await b.load(w)
    assert st is not None and [e.step for e in st.journal] == ["s1"]
    att = st.attempt(1)
    assert att is not None and att.heartbeats == 1
    # the command refused (a forged token): the steps it carried are written all the same
    forged = replace(beat, token=beat.token + 7)
    kv = _Counting(w, b.data)
    with pytest.raises(OutliveError):
        await _apply_carried(kv, s2, forged)  # type: ignore[arg-type]
    b.data = _run(b.data, kv.ops)
    st = await b.load(w)
    assert st is not None and [e.step for e in st.journal] == ["s1", "s2"]
    # the steps refused (forged): the command lands alone
    kv = _Counting(w, b.data)
    bad = replace(s2, token=s2.token + 7, entries=s2.entries)
    out = await _apply_carried(kv, bad, replace(beat, at=4))  # type: ignore[arg-type]
    assert out.kind == "beat"
    b.data = _run(b.data, kv.ops)
    again = await b.load(w)
    assert again is not None and again.journal == st.journal
    att = again.attempt(1)
    assert att is not None and att.heartbeats == 2
