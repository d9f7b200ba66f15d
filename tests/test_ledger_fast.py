"""The ledger's quick paths give exactly what its general path gives.

``apply`` answers a fenced step write from the current owner (the command every step sends) by
``ledger._record_usual``, a heartbeat from the current owner by ``ledger._beat_usual``, and
checks and copies a command in one walk (``_check.checked_copy``).
Both stand for the general path (``_apply`` of a command checked by ``check_command`` and
copied by ``clone``): here every command is run through both, accepted ones and refused ones,
and the states, outcomes and errors compared.
"""

from __future__ import annotations

import copy
import dataclasses
import random
from typing import Any

import pytest

import outlive
from outlive import errors as E
from outlive import ledger as L
from outlive._check import checked_copy
from outlive._clone import clone, evolve
from outlive.hashing import content_hash, input_key
from outlive.records import Contract, JournalEntry, Part, Policy, Receipt, WorkState

TEXTS = {"v1": {"a": "A1", "b": "B1"}, "v2": {"a": "A1", "b": "B2"}}


def _general(state: WorkState | None, cmd: Any, now: int | None) -> Any:
    """What the general path answers: the state and outcome, or the error's type and text."""
    try:
        L.check_command(cmd)
        new, out = L._apply(state, clone(cmd), "w", now)
        return new, clone(out)
    except E.OutliveError as exc:
        return type(exc), str(exc)


def _applied(state: WorkState | None, cmd: Any, now: int | None) -> Any:
    try:
        return L.apply(state, cmd, work_id="w", now=now)
    except E.OutliveError as exc:
        return type(exc), str(exc)


def _mutables(value: Any, out: list[Any]) -> list[Any]:
    """Every dict and list inside ``value`` (records included)."""
    if isinstance(value, (dict, list)):
        out.append(value)
        for v in (value.values() if isinstance(value, dict) else value):
            _mutables(v, out)
    elif isinstance(value, tuple):
        for v in value:
            _mutables(v, out)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            _mutables(getattr(value, f.name), out)
    return out


def _shares(a: Any, b: Any) -> bool:
    ids = {id(x) for x in _mutables(a, [])}
    return any(id(x) in ids for x in _mutables(b, []))


def _write(state: WorkState, att: int, tok: int, step: str, ver: str, *, secret: str | None,
           result: Any = "r", key: str | None = None, external: tuple[str, ...] = (),
           extra: dict[str, str] | None = None, rid_attempt: int | None = None,
           name: str | None = None) -> L.RecordSteps:
    src = {step: content_hash(TEXTS[ver][step]), **(extra or {})}
    name = name if name is not None else step
    k = key if key is not None else input_key(name, src)
    w = L.StepWrite(step=name, sources=src, input_key=k, result=result, external=external,
                    result_id=L.result_id("w", name, k, rid_attempt or att))
    return L.RecordSteps(attempt=att, token=tok, at=5, entries=(w,), secret=secret)


def _opened(policy: Policy) -> tuple[WorkState, str]:
    state, _ = L.apply(None, L.OpenWork(policy=policy), work_id="w")
    state, _ = L.apply(state, L.PublishInput(version="v1", parts={
        k: content_hash(v) for k, v in TEXTS["v1"].items()}, at=0))
    state, _ = L.apply(state, L.Admit(at=0, key_hash=L.key_hash("s1")))
    return state, "s1"


def _commands(state: WorkState, secret: str, rng: random.Random) -> list[L.RecordSteps]:
    """Accepted and refused step writes for ``state``'s attempts."""
    cur = state.attempts[-1]
    n, tok = cur.number, cur.token
    ver = "v1" if cur.pinned_version == "v1" else "v2"
    big = "x" * (L.MAX_PAYLOAD_BYTES + 1)
    wide = "é" * (L.MAX_PAYLOAD_BYTES // 2 + 1)       # within the characters, over in bytes
    out = [
        _write(state, n, tok, "a", ver, secret=secret),
        _write(state, n, tok, "b", ver, secret=secret, result={"k": [1, {"z": None}]}),
        _write(state, n, tok, "a", ver, secret=secret, result=[1, 2, (3, {"q": "é"})]),
        _write(state, n, tok, "a", ver, secret=None),                     # no secret
        _write(state, n, tok, "a", ver, secret="forged"),                 # wrong secret
        _write(state, n, tok + 1, "a", ver, secret=secret),               # a token never issued
        _write(state, n, 0, "a", ver, secret=secret),
        _write(state, n + 1, tok, "a", ver, secret=secret),               # no such attempt
        _write(state, n, tok, "a", ver, secret=secret, key="0" * 64),     # wrong input key
        _write(state, n, tok, "a", ver, secret=secret,                     # another step's key
               key=input_key("b", {"b": content_hash(TEXTS[ver]["b"])})),
        _write(state, n, tok, "a", ver, secret=secret,                     # other inputs' key
               key=input_key("a", {"a": content_hash("A2")})),
        _write(state, n, tok, "a", ver, secret=secret, name="a2",          # same inputs, other
               key=input_key("a", {"a": content_hash(TEXTS[ver]["a"])})),  # step's key
        _write(state, n, tok, "a", ver, secret=secret, result=big),       # too large
        _write(state, n, tok, "a", ver, secret=secret, result=wide),
        _write(state, n, tok, "a", ver, secret=secret, result="y" * 1000),
        # dicts the quick path sizes without writing them, and those it must write to know
        _write(state, n, tok, "a", ver, secret=secret,
               result={"k": "x" * 100, "n": -(2 ** 63), "b": True, "z": None}),
        _write(state, n, tok, "a", ver, secret=secret, result={"k": big}),
        _write(state, n, tok, "a", ver, secret=secret, result={"k": wide}),
        _write(state, n, tok, "a", ver, secret=secret,                     # escaped: 6 a char
               result={"k": "\x00" * (L.MAX_PAYLOAD_BYTES // 6 + 1)}),
        _write(state, n, tok, "a", ver, secret=secret,
               result={"k": "\x00" * (L.MAX_PAYLOAD_BYTES // 6 - 2)}),
        _write(state, n, tok, "a", ver, secret=secret, result="\x00" * (L.MAX_PAYLOAD_BYTES // 6)),
        _write(state, n, tok, "a", ver, secret=secret, external=("nope",)),
        _write(state, n, tok, "a", ver, secret=secret, external=("a",)),  # a part, external
        _write(state, n, tok, "a", ver, secret=secret, extra={"style": "h"}),   # undeclared
        _write(state, n, tok, "a", ver, secret=secret, extra={"style": "h"}, external=("style",)),
        _write(state, n, tok, "a", ver, secret=secret, extra={"copy": content_hash("B1")}),
        _write(state, n, tok, "a", ver, secret=secret, extra={"b": content_hash("B2")}),
        _write(state, n, tok, "a", ver, secret=secret, name=""),
        _write(state, n, tok, "a", ver, secret=secret, rid_attempt=n + 7),
        L.RecordSteps(attempt=n, token=tok, at=5, entries=(), secret=secret),
    ]
    two = _write(state, n, tok, "a", ver, secret=secret)
    other = _write(state, n, tok, "b", ver, secret=secret)
    out.append(dataclasses.replace(two, entries=two.entries + other.entries))
    out.append(dataclasses.replace(two, entries=two.entries + two.entries))   # twice in one
    # a flush of many steps (past the size where the quick path keeps a set of its ids), and
    # the same with one of them again at the end
    many = tuple(e for i in range(12) for e in _write(state, n, tok, "a", ver, secret=secret,
                                                       name=f"a{i}").entries)
    out.append(dataclasses.replace(two, entries=many))
    out.append(dataclasses.replace(two, entries=many + many[3:4]))
    for e in state.journal[-3:]:                                              # retried writes
        out.append(L.RecordSteps(attempt=n, token=tok, at=5, secret=secret, entries=(L.StepWrite(
            step=e.step, sources=dict(e.sources), input_key=e.input_key or "k", result=e.result,
            result_id=e.result_id, external=e.external),)))
    for older in state.attempts[:-1]:                                         # stale owners
        out.append(_write(state, older.number, older.token, "a", ver, secret=f"s{older.number}"))
        out.append(_write(state, older.number, older.token, "a", ver, secret=f"s{older.number}",
                          rid_attempt=older.number + 10))                # not journaled yet
        out.append(_write(state, older.number, older.token, "b", ver, secret=secret))
    rng.shuffle(out)
    return out


STATES = ["fresh", "journaled", "successor", "waiting", "unknown", "finished", "stopped"]


def _state(kind: str, policy: Policy) -> tuple[WorkState, str]:
    state, secret = _opened(policy)
    if kind == "fresh":
        return state, secret
    state, _ = L.apply(state, _write(state, 1, 1, "a", "v1", secret=secret))
    state, _ = L.apply(state, _write(state, 1, 1, "b", "v1", secret=secret, result={"n": 1}))
    if kind == "successor":
        state, _ = L.apply(state, L.MarkUnknown(attempt=1, at=9))
        state, _ = L.apply(state, L.PublishInput(version="v2", parts={
            k: content_hash(v) for k, v in TEXTS["v2"].items()}, at=9))
        state, _ = L.apply(state, L.Admit(at=9, key_hash=L.key_hash("s2")))
        return state, "s2"
    if kind == "waiting":
        state, _ = L.apply(state, L.Wait(attempt=1, token=1, at=6, reason="ok", secret=secret))
    if kind == "unknown":
        state, _ = L.apply(state, L.MarkUnknown(attempt=1, at=9))
    if kind == "finished":
        state, _ = L.apply(state, L.Finish(attempt=1, token=1, at=9, secret=secret))
    if kind == "stopped":
        state, _ = L.apply(state, L.MarkStopped(attempt=1, at=9))
    return state, secret


@pytest.mark.parametrize("policy", [Policy(), Policy(fencing=False), Policy(pins=False),
                                    Policy(fencing=False, pins=False)], ids=repr)
@pytest.mark.parametrize("kind", STATES)
def test_a_step_write_gets_the_general_answer_accepted_or_refused(kind: str, policy: Policy) -> None:
    state, secret = _state(kind, policy)
    rng = random.Random(f"{kind}{policy}")
    quick = 0
    for cmd in _commands(state, secret, rng):
        for now in (None, 3, 50):
            expected = _general(state, cmd, now)
            got = _applied(state, cmd, now)
            assert got == expected, (cmd, now)
            usual = L._record_usual(state, L.checked(cmd).command, now) \
                if not isinstance(expected[0], type) else None
            if usual is not None:
                quick += 1
                assert usual == expected
                new, out = got
                assert not _shares(out, new) and not _shares(cmd, new) and not _shares(cmd, out)
    if kind in ("fresh", "journaled", "successor", "waiting", "unknown"):
        assert quick >= 3, "the usual case was not taken"


def _beats(state: WorkState, secret: str) -> list[L.Heartbeat]:
    out = []
    for a in state.attempts:
        for token in (a.token, a.token + 1, 0, state.epoch):
            for sec in (f"s{a.number}", secret, None, "forged"):
                for claim in (False, True):
                    out.append(L.Heartbeat(attempt=a.number, token=token, at=5, secret=sec,
                                           claim=claim))
    out.append(L.Heartbeat(attempt=len(state.attempts) + 1, token=state.epoch, at=5, secret=secret))
    return out


@pytest.mark.parametrize("policy", [Policy(), Policy(fencing=False)], ids=repr)
@pytest.mark.parametrize("kind", STATES)
def test_a_heartbeat_gets_the_general_answer(kind: str, policy: Policy) -> None:
    state, secret = _state(kind, policy)
    quick = 0
    for cmd in _beats(state, secret):
        for now in (None, 3, 50):
            expected = _general(state, cmd, now)
            assert _applied(state, cmd, now) == expected, (cmd, now)
            try:
                usual = L._beat_usual(state, cmd, now)
            except E.OutliveError as exc:
                assert (type(exc), str(exc)) == expected
                continue
            if usual is not None:
                quick += 1
                assert usual == expected
                assert usual[1].kind in ("beat", "revived")
    if kind not in ("finished", "stopped"):
        assert quick >= 3, "the usual case was not taken"


def test_a_refused_write_never_takes_the_quick_path() -> None:
    """Each refusal is decided by the general path (the quick one says None or raises what the
    general one raises at the same check)."""
    for kind in STATES:
        state, secret = _state(kind, Policy())
        for cmd in _commands(state, secret, random.Random(kind)):
            expected = _general(state, cmd, None)
            if not isinstance(expected[0], type):
                continue
            try:
                L.check_command(cmd)
            except E.InvalidRecord:
                continue
            try:
                assert L._record_usual(state, L.checked(cmd).command, None) is None
            except E.OutliveError as exc:
                assert (type(exc), str(exc)) == expected


def _bad_values() -> list[Any]:
    return [1.5, float("nan"), 2 ** 63, -(2 ** 63) - 1, "\ud800", {1: "x"}, {"a": {2: 3}},
            [set()], b"x", object(), True, None, "", "ok", 7, [], {}, ("t", ["u"]),
            {"deep": [[[[{"e": "é"}]]]]}]


def test_checked_copy_is_check_then_clone() -> None:
    """The one-walk check-and-copy vouches only for what check_command accepts, and gives
    clone's copy: equal, sharing no dict or list with the command."""
    w = L.StepWrite(step="s", sources={"a": "h"}, input_key="k", result={"r": [1]}, result_id="r")
    base: list[Any] = [
        L.RecordSteps(attempt=1, token=2, at=3, entries=(w, w), secret="s"),
        L.Heartbeat(attempt=1, token=2, at=3), L.OpenWork(), L.OpenWork(policy=Policy(pins=False)),
        L.PublishInput(version="v", parts={"a": "h"}, at=1),
        L.SubmitCandidate(attempt=1, token=1, digest="d", at=1, content={"c": [1]}, flush=(w,),
                          parts=(Part(step="s", input_key=None, sources={"a": "b"}, result_id="r"),)),
        L.Accept(digest="d", contract=Contract(name="c", version="1", assessor="a"), verdict=True,
                 at=1),
        L.RecordIntent(attempt=1, token=1, op_key="o", payload_digest="p", sent_key=None, at=1,
                       payload=[{"x": 1}]),
        L.ConfirmEffect(attempt=1, token=1, op_key="o", at=1,
                        receipt=Receipt(effect_id="e", duplicate=False, key="o")),
        L.Wait(attempt=1, token=1, reason="r", at=1), L.Finish(attempt=1, token=1, at=1),
        L.Admit(at=1), L.MarkUnknown(attempt=1, at=2, signs=3), L.MarkStopped(attempt=1, at=1),
        L.Resume(attempt=1, token=1, at=1),
    ]
    cases: list[Any] = list(base)
    for cmd in base:
        for f in dataclasses.fields(cmd):
            for bad in _bad_values():
                c = copy.copy(cmd)
                object.__setattr__(c, f.name, bad)
                cases.append(c)
    for bad in _bad_values():       # inside a nested record
        for name in ("step", "sources", "input_key", "result", "result_id", "external"):
            bw = copy.copy(w)
            object.__setattr__(bw, name, bad)
            cases.append(L.RecordSteps(attempt=1, token=2, at=3, entries=(bw,)))
    cases.append(L.RecordSteps(attempt=1, token=2, at=3, entries=[w]))      # type: ignore[arg-type]
    vouched = 0
    for cmd in cases:
        try:
            L.check_command(cmd)
            ok = True
        except E.InvalidRecord:
            ok = False
        got = checked_copy(cmd)
        if got is None:
            continue
        vouched += 1
        assert ok, cmd
        assert got == clone(cmd) and type(got) is type(cmd)
        assert not _shares(got, cmd)
    assert vouched > len(base)


@pytest.mark.parametrize("backend_url", ["memory://"])
async def test_the_sweep_takes_the_same_path_both_ways(backend_url: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A sweep's worth of real sequences (all 864 runs of the shipped scenario): every step
    write the quick path answers is answered again by the general path, and must agree."""
    from outlive_conformance.scenario import q3_report
    from outlive_conformance.sweep import sweep

    seen = {"quick": 0, "general": 0}

    def both(usual: Any) -> Any:
        def check(state: WorkState, cmd: Any, now: int | None) -> Any:
            try:
                got = usual(state, cmd, now)
            except E.OutliveError as exc:
                assert _general(state, cmd, now) == (type(exc), str(exc))
                raise
            if got is None:
                seen["general"] += 1
                return None
            seen["quick"] += 1
            assert got == _general(state, cmd, now)
            return got

        return check

    monkeypatch.setattr(L, "_record_usual", both(L._record_usual))
    monkeypatch.setattr(L, "_beat_usual", both(L._beat_usual))
    result = await sweep(await outlive.open_backend(backend_url), q3_report(), concurrency=8)
    assert len(result.runs) == 864
    assert seen["quick"] > 864 and seen["general"] > 0, seen


# -- long journals: the quick path looks result ids up in an index, never in the journal ---------
#: Past the journal length under which the quick path scans the journal (``ledger._SCAN``).
LONG = 69


def _long(n: int = LONG, policy: Policy | None = None) -> tuple[WorkState, str]:
    """Attempt #1 with ``n`` entries journaled, each applied to the state the one before gave."""
    state, secret = _opened(policy or Policy())
    for i in range(n):
        state, _ = L.apply(state, _write(state, 1, 1, "a", "v1", secret=secret, name=f"n{i}"))
    return state, secret


def _retried(state: WorkState, secret: str, e: Any, result: Any = None) -> L.RecordSteps:
    return L.RecordSteps(attempt=1, token=1, at=5, secret=secret, entries=(L.StepWrite(
        step=e.step, sources=dict(e.sources), input_key=e.input_key or "k",
        result=e.result if result is None else result, result_id=e.result_id,
        external=e.external),))


def _long_commands(state: WorkState, secret: str, extra: tuple[str, ...] = ()) -> list[Any]:
    """New writes, and writes of entries journaled anywhere in the journal (the first, one in
    the middle, the last: retried as they were, or with another value)."""
    out: list[Any] = [_write(state, 1, 1, "a", "v1", secret=secret, name=name)
                      for name in ("fresh", *extra)]
    for e in (state.journal[0], state.journal[len(state.journal) // 2], state.journal[-1]):
        out += [_retried(state, secret, e), _retried(state, secret, e, result="other")]
    many = tuple(e for i in range(3) for e in _write(state, 1, 1, "a", "v1", secret=secret,
                                                       name=f"m{i}").entries)
    out.append(L.RecordSteps(attempt=1, token=1, at=5, secret=secret,
                             entries=many + _retried(state, secret, state.journal[1]).entries))
    out.append(L.RecordSteps(attempt=1, token=1, at=5, secret=secret, entries=many))
    return out


def _same_both_ways(state: WorkState, cmds: list[Any]) -> int:
    """Each of ``cmds`` applied to ``state`` by ``apply`` and by the general path: equal. How
    many the quick path answered."""
    quick = 0
    for cmd in cmds:
        expected = _general(state, cmd, None)
        assert _applied(state, cmd, None) == expected, cmd
        if not isinstance(expected[0], type) and \
                L._record_usual(state, L.checked(cmd).command, None) is not None:
            quick += 1
    return quick


@pytest.mark.parametrize("policy", [Policy(), Policy(pins=False)], ids=repr)
def test_a_long_journal_gets_the_general_answer(policy: Policy) -> None:
    """Past the journal length the quick path scans, along a chain of writes (each state the one
    before returned, its index carried), on a state decoded from storage (no index), and on
    states rebuilt from an indexed one with another journal (the index is not theirs)."""
    from outlive import codec

    assert LONG > L._SCAN * 2
    state, secret = _long(policy=policy)
    assert L._IDS in state.__dict__ and state.__dict__[L._IDS][0] is state.journal
    stored = codec.loads(codec.dumps(state))
    assert stored == state and L._IDS not in stored.__dict__
    cut = state.journal[:L._SCAN + 3]
    shorter = evolve(state, journal=cut)        # carries the longer journal's index along
    assert shorter.__dict__[L._IDS][0] is not shorter.journal
    names = tuple(e.step for e in state.journal[L._SCAN + 3:][:3])  # journaled only in state
    for s in (state, stored, shorter, dataclasses.replace(state)):
        assert _same_both_ways(s, _long_commands(s, secret, names)) >= 2


def test_states_rolled_back_keep_their_own_index() -> None:
    """Two writes applied to one state (a store's batch that failed, then another write on the
    state kept): each branch knows its own entries only, and goes on getting the general path's
    answer; the first branch's entry is written anew on the second."""
    state, secret = _long()
    a = _write(state, 1, 1, "a", "v1", secret=secret, name="branch-a")
    b = _write(state, 1, 1, "a", "v1", secret=secret, name="branch-b")
    one, _ = L.apply(state, a)
    two, _ = L.apply(state, b)
    for s, mine, theirs in ((one, a, b), (two, b, a)):
        again = L.apply(s, mine)        # a retried write: no entry added
        assert len(again[0].journal) == len(s.journal) and again == _general(s, mine, None)
        assert _same_both_ways(s, [theirs, mine]) == 1
        s2, _ = L.apply(s, theirs)
        assert [e.step for e in s2.journal[-2:]] == [mine.entries[0].step, theirs.entries[0].step]
        assert _same_both_ways(s2, _long_commands(s2, secret)) >= 2
    grown, _ = L.apply(state, a)
    assert grown == one


def test_the_index_is_no_part_of_the_state() -> None:
    """An indexed state equals, prints and encodes as the same state without its index."""
    from outlive import codec
    from outlive.sqlstore import COLLECTIONS

    state, _ = _long()
    plain = dataclasses.replace(state)
    assert L._IDS in state.__dict__ and L._IDS not in plain.__dict__
    assert state == plain and repr(state) == repr(plain)
    assert codec.dumps(state) == codec.dumps(plain)
    assert codec.dumps_blank(state, COLLECTIONS) == codec.dumps_blank(plain, COLLECTIONS)
    assert clone(state) == plain and dataclasses.asdict(state) == dataclasses.asdict(plain)
    assert copy.deepcopy(state) == plain


class _Counted(JournalEntry):
    """A journal entry whose result id counts its reads (the ledger reads it as an attribute)."""

    reads = 0

    @property   # type: ignore[override]
    def result_id(self) -> str:
        _Counted.reads += 1
        rid: str = self.__dict__["result_id"]
        return rid


def test_a_step_write_reads_no_journal_entry_along_a_chain() -> None:
    """The cost of a step write does not grow with the journal: along a chain of writes (what
    a backend that holds the whole state does: the Temporal workflow's ledger) the quick path
    reads no entry of the journal after the first write has indexed it (before the index,
    every write compared its result id with every entry's). Counted, not timed: each entry of
    a long journal counts the reads of its result id."""
    state, secret = _long(200)
    counted = []
    for e in state.journal:
        c = object.__new__(_Counted)
        c.__dict__.update(e.__dict__)
        counted.append(c)
    state = dataclasses.replace(state, journal=tuple(counted))   # as loaded: no index
    _Counted.reads = 0
    state, _ = L.apply(state, _write(state, 1, 1, "a", "v1", secret=secret, name="first"))
    assert _Counted.reads == 200                # the index is built once, from every entry
    for i in range(100):
        _Counted.reads = 0
        state, out = L.apply(state, _write(state, 1, 1, "a", "v1", secret=secret, name=f"c{i}"))
        assert out.kind == "journaled" and _Counted.reads == 0, i
    assert len(state.journal) == 301
