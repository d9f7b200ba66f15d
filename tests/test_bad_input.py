"""Bad input is typed, changes nothing, and gets the same answer on every embedded backend; no
object the API returns or accepts can reach stored state."""

from __future__ import annotations

import dataclasses
import itertools
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import outlive
from outlive import Contract, Controller, StrictCurrent, Worker, codec
from outlive import errors as E
from outlive import ledger as L
from outlive.hashing import content_hash, input_key
from outlive.records import Part, Receipt

V1 = {"s1": "Intro.", "s2": "Revenue was 4.1 million."}
C = Contract(name="form", version="1", assessor="test")


def _deep(n: int) -> Any:
    v: Any = "x"
    for _ in range(n):
        v = [v]
    return v


#: Values no field of any command accepts as they are (a str field refuses all but the strings).
BAD = [None, "no", float("nan"), 1.5, 2 ** 63, -(2 ** 63) - 1, "\ud800", _deep(10_000),
       {1: "a"}, [], (), object(), b"bytes", True, {"k": float("inf")}, "", 0, -1]
_ids = itertools.count()


class Pair:
    """The same work on memory:// and sqlite://, driven in lockstep."""

    def __init__(self, mem: outlive.Backend, sql: outlive.Backend) -> None:
        self.backends = (mem, sql)

    async def setup(self) -> tuple[str, Worker, Worker]:
        work = f"w{next(_ids)}"
        workers = []
        for b in self.backends:
            ctl = Controller(b, clock=lambda: 0)
            await ctl.open_work(work)
            await ctl.publish(work, "v1", V1)
            w = Worker(b, await ctl.admit(work), V1, clock=lambda: 1)
            await w.start()
            await w.step("s1", lambda s1: {"s": s1}, s1=V1["s1"])
            await w.effect("op", {"m": 1}, lambda k, p: Receipt(effect_id="P", duplicate=False,
                                                                 key=k))
            workers.append(w)
        return work, workers[0], workers[1]

    async def snapshot(self, work: str) -> list[str]:
        """Each backend's state, byte for byte."""
        return [codec.dumps(await b.load(work)) for b in self.backends]

    async def each(self, work: str, cmd: Any) -> list[str]:
        """Run ``cmd`` on both; the error type each raised ('' if none)."""
        answers = []
        for b in self.backends:
            try:
                await b.execute(work, cmd)
                answers.append("")
            except E.OutliveError as exc:
                answers.append(type(exc).__name__)
        return answers


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[Pair]:
    mem = await outlive.open_backend("memory://")
    sql = await outlive.open_backend(f"sqlite:///{tmp_path / 'o.db'}")
    try:
        yield Pair(mem, sql)
    finally:
        await mem.close()
        await sql.close()


def _commands(w: Worker) -> list[Any]:
    """One valid command of every kind (valid against the state ``Pair.setup`` builds)."""
    a = w.attempt
    src = {"s2": content_hash(V1["s2"])}
    key = input_key("s2", src)
    write = L.StepWrite(step="s2", sources=src, input_key=key, result={"s": "x"},
                        result_id=L.result_id(w.work_id, "s2", key, a.number))
    s1 = w.steps["s1"]
    part = Part(step="s1", input_key=s1.input_key, sources={"s1": content_hash(V1["s1"])},
                result_id=s1.result_id)
    auth = {"attempt": a.number, "token": a.token, "secret": a.secret}
    return [
        L.OpenWork(),
        L.PublishInput(version="v9", parts={"s1": content_hash("z")}, at=3),
        L.Admit(at=3, pin="v1", request_id="r"),
        L.Heartbeat(at=3, **auth),
        L.MarkUnknown(attempt=a.number, at=3, signs=5),
        L.MarkStopped(attempt=a.number, at=3),
        L.RecordSteps(entries=(write,), at=3, **auth),
        L.SubmitCandidate(parts=(part,), content={"c": 1}, at=3,
                          digest=L.candidate_digest(w.work_id, "v1", (part,), {"c": 1}), **auth),
        L.Accept(digest="0" * 64, contract=C, verdict=True, at=3),
        L.RecordIntent(op_key="op2", payload_digest=content_hash({"m": 2}), payload={"m": 2},
                       sent_key="op2", at=3, **auth),
        L.ConfirmEffect(op_key="op", receipt=Receipt(effect_id="P", duplicate=False, key="op"),
                        at=3, **auth),
        L.Finish(at=3, **auth),
    ]


def _nested_targets(cmd: Any) -> list[tuple[str, Any]]:
    """(field path, replacer) pairs: every field of the command and of the records inside it."""
    out: list[tuple[str, Any]] = []
    for f in dataclasses.fields(cmd):
        out.append((f.name, lambda c, v, n=f.name: dataclasses.replace(c, **{n: v})))
        inner = getattr(cmd, f.name)
        if isinstance(inner, tuple) and inner and dataclasses.is_dataclass(inner[0]):
            for g in dataclasses.fields(inner[0]):
                out.append((f"{f.name}[0].{g.name}", lambda c, v, n=f.name, m=g.name:
                            dataclasses.replace(c, **{n: (dataclasses.replace(
                                getattr(c, n)[0], **{m: v}), *getattr(c, n)[1:])})))
        elif dataclasses.is_dataclass(inner):
            for g in dataclasses.fields(inner):
                out.append((f"{f.name}.{g.name}", lambda c, v, n=f.name, m=g.name:
                            dataclasses.replace(c, **{n: dataclasses.replace(
                                getattr(c, n), **{m: v})})))
    return out


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
async def test_malformed_commands_are_typed_change_nothing_and_agree(pair: Pair,
                                                                     data: st.DataObject) -> None:
    work, wm, ws = await pair.setup()
    index = data.draw(st.integers(0, len(_commands(wm)) - 1), label="command")
    targets = _nested_targets(_commands(wm)[index])
    path, replace = targets[data.draw(st.integers(0, len(targets) - 1), label="field")]
    bad = BAD[data.draw(st.integers(0, len(BAD) - 1), label=f"index in BAD of the value for {path}")]
    try:
        cmd_m, cmd_s = replace(_commands(wm)[index], bad), replace(_commands(ws)[index], bad)
    except (TypeError, ValueError):
        return  # the dataclass itself refused to be built
    before = await pair.snapshot(work)
    answers = []
    for b, cmd in zip(pair.backends, (cmd_m, cmd_s), strict=True):
        try:
            await b.execute(work, cmd)
            answers.append("")
        except E.OutliveError as exc:
            answers.append(type(exc).__name__)
    assert answers[0] == answers[1], (path, bad, answers)
    if answers[0]:
        after = await pair.snapshot(work)
        assert after == before, (path, bad, answers)


@pytest.mark.parametrize("bad", BAD)
async def test_a_malformed_work_id_is_typed(pair: Pair, bad: Any) -> None:
    if isinstance(bad, str) and bad and bad != "\ud800":
        return
    answers = await pair.each(bad, L.OpenWork())
    assert answers == ["InvalidRecord", "InvalidRecord"]


@pytest.mark.parametrize("bad", [_deep(10_000), "\ud800", 2 ** 63, {"a": [float("nan")]}, {3: "x"}])
async def test_bad_values_through_the_public_api_are_typed(pair: Pair, bad: Any) -> None:
    work, wm, ws = await pair.setup()
    before = await pair.snapshot(work)
    for b, w in zip(pair.backends, (wm, ws), strict=True):
        ctl = Controller(b, clock=lambda: 0)
        with pytest.raises(E.InvalidRecord):
            await ctl.publish(work, "v2", {"s1": bad})
        with pytest.raises(E.InvalidRecord):
            await w.step("s2", lambda s2: "r", s2=bad)
        with pytest.raises(E.InvalidRecord):
            await w.step("s2", lambda s2: bad, s2=V1["s2"])
        with pytest.raises(E.InvalidRecord):
            await w.candidate(bad, ["s1"])
        with pytest.raises(E.InvalidRecord):
            await w.effect("op3", bad, lambda k, p: pytest.fail("sent"))
    assert await pair.snapshot(work) == before


async def test_corrupt_stored_rows_are_typed_and_name_the_work(tmp_path: Path) -> None:
    db = tmp_path / "o.db"
    b = await outlive.open_backend(f"sqlite:///{db}")
    ctl = Controller(b, clock=lambda: 0)
    await ctl.open_work("w")
    await ctl.publish("w", "v1", V1)
    await ctl.admit("w")
    await b.close()
    conn = sqlite3.connect(db)
    (head,) = conn.execute("SELECT state FROM outlive_works WHERE work_id='w'").fetchone()
    (row,) = conn.execute("SELECT body FROM outlive_log WHERE kind='inputs'").fetchone()
    for table, column, where, text, corrupt in (
            ("outlive_log", "body", "kind='inputs'", row,
             row.replace('"seq":1,', '"seq":"1",')),                     # a seq as a string
            ("outlive_works", "state", "work_id='w'", head,
             head.replace('"v":"admitted"', '"v":"exploded"')),          # a bad enum
            ("outlive_works", "state", "work_id='w'", head,
             head.replace('"epoch":1,', '"epoch":"1",'))):               # an epoch as a string
        assert corrupt != text
        conn.execute(f"UPDATE {table} SET {column}=? WHERE {where}", (corrupt,))
        conn.commit()
        b2 = await outlive.open_backend(f"sqlite:///{db}")
        try:
            with pytest.raises(E.CorruptRecord) as info:
                await b2.load("w")
            assert "'w'" in info.value.message
        finally:
            await b2.close()
        conn.execute(f"UPDATE {table} SET {column}=? WHERE {where}", (text,))
        conn.commit()
    conn.close()


async def test_no_returned_or_accepted_object_reaches_stored_state(pair: Pair) -> None:
    for b in pair.backends:
        ctl = Controller(b, clock=lambda: 0)
        await ctl.open_work("m")
        parts = {"s1": V1["s1"]}
        await ctl.publish("m", "v1", parts)
        parts["s1"] = "changed"                                  # the caller's dict
        w = Worker(b, await ctl.admit("m"), {"s1": V1["s1"]}, clock=lambda: 1)
        await w.start()
        result = await w.step("s1", lambda s1: {"summary": s1}, s1=V1["s1"])
        result["summary"] = "edited"                              # the step's result
        content = {"s1": {"summary": "Intro."}}     # bound: the part's result
        cand = await w.candidate(content)
        content["s1"]["summary"] = "edited"                      # the dict given to candidate()
        cand.content["s1"]["summary"] = "edited"                 # the record returned
        await ctl.assess("m", cand.digest, C, lambda c, v: (True, "ok"))
        dep = await ctl.dependable("m", StrictCurrent())
        assert dep is not None
        dep.content["s1"]["summary"] = "edited"                  # the dependable answer
        st = await b.load("m")
        assert st is not None
        st.journal[0].result["summary"] = "edited"                # a loaded state
        st.candidates[0].content["s1"]["summary"] = "edited"
        await w.heartbeat()                                       # the next command persists
        fresh = await b.load("m")
        assert fresh is not None
        c = fresh.candidates[0]
        assert c.content == {"s1": {"summary": "Intro."}}
        assert L.candidate_digest("m", c.version, c.parts, c.content) == c.digest
        assert fresh.journal[0].result == {"summary": "Intro."}
        assert fresh.inputs[0].parts == {"s1": content_hash(V1["s1"])}


#: (call, the argument it names): a wrong type at each public entry point.
WRONG_TYPES: list[tuple[str, str]] = [
    ("ctl.assess('w', None, C, lambda c, v: (True, 'ok'))", "digest"),
    ("ctl.assess('w', 'abc', None, lambda c, v: (True, 'ok'))", "contract"),
    ("ctl.assess('w', 'abc', C, None)", "assessor"),
    ("ctl.publish('w', 'v2', None)", "parts"),
    ("ctl.publish('w', ['v2'], V1)", "version"),
    ("ctl.dependable('w', 'strict')", "rule"),
    ("w.step(['s2'], lambda s2: 'r', s2=V1['s2'])", "name"),
    ("w.step('s2', 'not a function', s2=V1['s2'])", "fn"),
    ("w.candidate({'c': 1}, 's1')", "steps"),
    ("w.effect(None, {'m': 1}, lambda k, p: None)", "op_key"),
    ("w.effect('op', {'m': 1}, None)", "send"),
    ("w.resend(['op'], lambda k, p: None)", "op_key"),
    ("outlive.open_backend(None)", "url"),
]


@pytest.mark.parametrize(("call", "name"), WRONG_TYPES)
async def test_public_entry_points_refuse_a_wrong_type_naming_the_argument(
        backend: outlive.Backend, call: str, name: str) -> None:
    ctl = Controller(backend, clock=lambda: 0)
    await ctl.open_work("w")
    await ctl.publish("w", "v1", V1)
    w = Worker(backend, await ctl.admit("w"), V1, clock=lambda: 1)
    await w.start()
    await w.step("s1", lambda s1: {"s": s1}, s1=V1["s1"])
    before = codec.dumps(await backend.load("w"))
    env = {"ctl": ctl, "w": w, "C": C, "V1": V1, "outlive": outlive}
    with pytest.raises(E.InvalidArgument) as info:
        await eval(call, env)
    assert info.value.details["argument"] == name and f"{name} must be" in info.value.message
    assert isinstance(info.value, TypeError)          # as Python's own wrong-type errors are
    assert codec.dumps(await backend.load("w")) == before


@pytest.mark.parametrize(("make", "name"), [
    ("Worker(backend, None, V1)", "attempt"),
    ("Worker(None, None)", "backend"),
    ("Controller(None)", "backend"),
    ("Controller(backend, clock=5)", "clock"),
    ("outlive.Supervisor(backend, None)", "definition"),
])
def test_constructors_refuse_a_wrong_type_naming_the_argument(
        backend: outlive.Backend, make: str, name: str) -> None:
    with pytest.raises(E.InvalidArgument) as info:
        eval(make, {"Worker": Worker, "Controller": Controller, "backend": backend, "V1": V1,
                    "outlive": outlive})
    assert info.value.details["argument"] == name
