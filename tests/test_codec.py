"""The codec's text: ``dumps`` writes records straight to text, and must write exactly what
serialising ``encode``'s tagged tree writes (stored rows, engine payloads and hashes depend on it).
"""

from __future__ import annotations

import enum
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from outlive import codec
from outlive import errors as E
from outlive import ledger as L
from outlive.hashing import MAX_DEPTH, content_hash, input_key
from outlive.records import (
    AttemptState,
    Contract,
    EffectState,
    Part,
    Policy,
    Receipt,
    WorkState,
)


def _tree(value: Any) -> str:
    return codec._JSON.encode(codec.encode(value))


def _same(value: Any) -> None:
    """``dumps`` and the tree agree: the same text, or the same typed refusal."""
    try:
        expected = _tree(value)
    except E.InvalidRecord as exc:
        with pytest.raises(E.InvalidRecord) as got:
            codec.dumps(value)
        assert got.value.message == exc.message
        return
    assert codec.dumps(value) == expected


def _story() -> list[Any]:
    """A work taken through every command, and every record, command and outcome on the way."""
    seen: list[Any] = []
    st_: WorkState | None = None
    contract = Contract(name="form", version="1", assessor="test")

    def go(cmd: Any) -> Any:
        nonlocal st_
        st_, out = L.apply(st_, cmd, work_id="w")
        seen.extend([cmd, out, out.record, st_])
        return out

    go(L.OpenWork(policy=Policy(fencing=True, pins=True), epoch_floor=3))
    go(L.PublishInput(version="v1", parts={"s1": content_hash("é \u2028 \"q\" \\")}, at=1))
    att = go(L.Admit(at=2, request_id="r", key_hash=L.key_hash("k"))).record
    go(L.Heartbeat(attempt=1, token=att.token, at=3, secret="k", claim=True))
    go(L.Wait(attempt=1, token=att.token, at=4, reason="a person", secret="k"))
    go(L.Resume(attempt=1, token=att.token, at=5, secret="k"))
    src = {"s1": content_hash("é \u2028 \"q\" \\")}
    key = input_key("s1", src)
    rid = L.result_id("w", "s1", key, 1)
    result = {"n": [1, -2 ** 62, None, True, {"k": ("t",)}], "ü": "\x00\x1f"}
    go(L.RecordSteps(attempt=1, token=att.token, at=6, secret="k", entries=(L.StepWrite(
        step="s1", sources=src, input_key=key, result=result, result_id=rid),)))
    part = Part(step="s1", input_key=key, sources=src, result_id=rid)
    content = {"s1": result}     # bound to the journal: the part's result by step
    digest = L.candidate_digest("w", "v1", (part,), content)
    go(L.SubmitCandidate(attempt=1, token=att.token, at=7, secret="k", digest=digest,
                         parts=(part,), content=content))
    go(L.RecordIntent(attempt=1, token=att.token, at=8, secret="k", op_key="op",
                      payload_digest=content_hash({"to": "x"}), sent_key="op", payload={"to": "x"}))
    go(L.ConfirmEffect(attempt=1, token=att.token, at=9, secret="k", op_key="op",
                       receipt=Receipt(effect_id="e1", duplicate=False, key="op")))
    go(L.Accept(digest=digest, contract=contract, verdict=True, at=10, reason="ok"))
    go(L.Finish(attempt=1, token=att.token, at=11, secret="k"))
    go(L.MarkStopped(attempt=1, at=12))
    go(L.Admit(at=13))
    go(L.MarkUnknown(attempt=2, at=14, signs=0))
    assert st_ is not None
    seen.extend([*st_.journal, *st_.candidates, *st_.acceptances, *st_.effects, *st_.attempts,
                 *st_.inputs, {"head": st_, "counts": {"journal": 1}}])
    return seen


def test_every_record_command_and_outcome_of_a_story_is_written_as_the_tree_writes_it() -> None:
    values = _story()
    kinds = {type(v) for v in values}
    assert {L.Outcome, WorkState, L.RecordSteps, L.SubmitCandidate, L.ConfirmEffect} <= kinds
    for v in values:
        _same(v)
        assert codec.loads(codec.dumps(v)) == v


class _Color(enum.Enum):
    RED = "red"
    ODD = 1.5   # a value the tree writes as a float


@pytest.mark.parametrize("value", [
    0, -1, 2 ** 70, True, False, None, "", "\ud800", "é\u2028\"\\\x00", 1.5, float("nan"),
    float("inf"), [], (), {}, {1: "a", False: None, None: 2}, [("a", 1)], AttemptState.RUNNING,
    EffectState.AMBIGUOUS, _Color.RED, _Color.ODD, b"bytes", object(),
    (Policy(), [Policy()], {"p": Policy()}),
])
def test_odd_values_are_written_as_the_tree_writes_them_or_refused_alike(value: Any) -> None:
    _same(value)


@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 18, MAX_DEPTH + 19,
                                   MAX_DEPTH + 20, MAX_DEPTH + 21, MAX_DEPTH + 60])
@pytest.mark.parametrize("wrap", ["list", "tuple", "dict", "record"])
def test_values_near_the_nesting_limit_agree_with_the_tree(depth: int, wrap: str) -> None:
    v: Any = "x"
    for _ in range(depth):
        v = {"list": lambda x: [x], "tuple": lambda x: (x,), "dict": lambda x: {"k": x},
             "record": lambda x: L.Outcome(kind="k", record=x)}[wrap](v)
    _same(v)


_json = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2 ** 70), max_value=2 ** 70)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=4) | st.integers(), inner, max_size=4),
    max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(_json)
def test_any_json_like_value_is_written_as_the_tree_writes_it(value: Any) -> None:
    _same(value)
    _same(L.Outcome(kind="k", record=value))


def test_a_record_with_blanked_fields_is_written_as_the_emptied_record() -> None:
    """``dumps_blank`` (a store's head: the state with its collections emptied) writes what
    ``dumps`` writes for the copy with those fields set to ``()``, for every state of a story."""
    import dataclasses

    from outlive.sqlstore import COLLECTIONS

    states = [v for v in _story() if isinstance(v, WorkState)]
    assert any(s.journal and s.attempts and s.effects for s in states)
    for s in states:
        emptied = dataclasses.replace(s, **{k: () for k in COLLECTIONS})
        assert codec.dumps_blank(s, COLLECTIONS) == codec.dumps(emptied) == _tree(emptied)
        assert codec.dumps_blank(s, ("journal",)) == codec.dumps(dataclasses.replace(s, journal=()))
    with pytest.raises(TypeError):
        codec.dumps_blank(states[0], ("no_such_field",))


def test_a_stored_head_is_the_text_of_its_document() -> None:
    """The SQL store writes its head's text by hand; it must be the codec's text of the
    document it decodes (the head, the collections' counts, the rows)."""
    import sqlite3

    from outlive.sqlstore import SCHEMA, SqliteLedgerStore

    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.executescript(SCHEMA)
    store = SqliteLedgerStore(":memory:")
    store.run(conn, "w", L.OpenWork())
    store.run(conn, "w", L.PublishInput(version="v1", parts={"s": content_hash("s")}, at=1))
    store.run(conn, "w", L.Admit(at=2))
    (text,) = conn.execute("SELECT state FROM outlive_works").fetchone()
    doc = codec.loads(text)
    assert set(doc) == {"head", "counts", "rows"} and doc["rows"] == 1
    assert codec.dumps(doc) == text


# -- reading: the scanner and the walk's shortcuts give what json.loads and the plain walk give --
def _walk(value: Any, depth: int = 0) -> Any:
    """``codec.decode`` as a plain walk (a call per value, leaves included): the reference."""
    if depth > codec._MAX_NESTING:
        raise E.InvalidRecord("nested too deep")
    if isinstance(value, list):
        return [_walk(v, depth + 1) for v in value]
    if not isinstance(value, dict):
        return value
    if "@d" in value:
        return {k: _walk(v, depth + 1) for k, v in value["@d"].items()}
    if "@l" in value:
        return tuple(_walk(v, depth + 1) for v in value["@l"])
    if "@t" in value:
        return codec._TYPES[value["@t"]](**{k: _walk(v, depth + 1) for k, v in value["v"].items()})
    return codec._TYPES[value["@e"]](value["v"])


def _read(text: str | bytes) -> Any:
    try:
        return codec.loads(text)
    except E.InvalidRecord:
        return E.InvalidRecord


def _reference(text: str | bytes) -> Any:
    import json
    try:
        return _walk(json.loads(text))
    except (E.InvalidRecord, ValueError, RecursionError, KeyError, TypeError):
        return E.InvalidRecord


@pytest.mark.parametrize("depth", [MAX_DEPTH + 17, MAX_DEPTH + 18, MAX_DEPTH + 19,
                                   MAX_DEPTH + 20, MAX_DEPTH + 21, MAX_DEPTH + 22])
@pytest.mark.parametrize("wrap", ["list", "tuple", "dict", "record"])
@pytest.mark.parametrize("leaf", ["x", 1, None, 1.5, True])
def test_a_leaf_near_the_nesting_limit_is_read_as_the_plain_walk_reads_it(
        depth: int, wrap: str, leaf: Any) -> None:
    """A leaf is taken without a call of its own, except past the limit, where the call refuses
    it: at every depth around the limit, reading agrees with the plain walk (accepted or not)."""
    import json
    tree: Any = leaf
    for _ in range(depth):
        tree = {"list": lambda x: [x], "tuple": lambda x: {"@l": [x]}, "dict": lambda x: {"@d": {"k": x}},
                "record": lambda x: {"@t": "Outcome", "v": {"kind": "k", "record": x, "seq": 0}}}[wrap](tree)
    text = json.dumps(tree)
    assert _read(text) == _reference(text)
    assert _read(text.encode()) == _reference(text.encode())


@pytest.mark.parametrize("text", [
    '{"@l":[1,2]}', ' {"@l":[1,2]}', '{"@l":[1,2]} ', '{"@l":[1,2]}\n', "\ufeff{\"@l\":[1]}", "",
    " ", "5", "5 6", '"a"', "NaN", "Infinity", "-0", '{"@d":{"a":1,"a":2}}', "[1,]", "{\"@l\":[1]}x",
    '"\\ud800"', "nul\x00", '{"@t":"Policy","v":{}}', '{"@e":"AttemptState","v":"running"}',
    "[" * 5000 + "]" * 5000,
])
@pytest.mark.parametrize("as_bytes", [False, True])
def test_odd_texts_are_read_as_json_loads_reads_them(text: str, as_bytes: bool) -> None:
    raw: str | bytes = text.encode("utf-8", "surrogatepass") if as_bytes else text
    got, expected = _read(raw), _reference(raw)
    assert got == expected or (got != got and expected != expected)   # NaN is not itself


@pytest.mark.parametrize("raw", [b"\xff\xfe{\x00}\x00", "{}".encode("utf-16"), b"\xef\xbb\xbf[1]",
                                 b"\xed\xa0\x80", b'"\xed\xa0\x80"', b"[1]\xff", b"\x80"])
def test_odd_bytes_are_read_as_json_loads_reads_them(raw: bytes) -> None:
    assert _read(raw) == _reference(raw)


@settings(max_examples=200, deadline=None)
@given(_json)
def test_any_json_like_value_reads_back_as_the_plain_walk_reads_it(value: Any) -> None:
    for v in (value, L.Outcome(kind="k", record=value)):
        text = codec.dumps(v)
        assert codec.loads(text) == _reference(text)


def test_every_record_of_a_story_reads_back_as_the_call_builds_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Records are built by a function compiled per class when their fields come in their
    order: the same record as ``cls(**fields)`` (the codec without its compiled builders), and
    the same refusals when they do not (a field missing, one more, another order, a bad value)."""
    import json
    values = [v for v in _story() if type(v) in codec._MAKERS]
    assert {L.Outcome, WorkState, L.RecordSteps, L.SubmitCandidate} <= {type(v) for v in values}

    def read(text: str) -> Any:
        try:
            return codec.loads(text)
        except E.InvalidRecord as exc:
            return exc.message

    def both(text: str) -> tuple[Any, Any]:
        got = read(text)
        with monkeypatch.context() as m:
            m.setattr(codec, "_MAKERS", {})
            return got, read(text)

    for v in values:
        text = codec.dumps(v)
        got, called = both(text)
        assert got == called == v
        tree = json.loads(text)
        fields = tree["v"]
        for changed in ({k: fields[k] for k in reversed(fields)},               # another order
                        {k: fields[k] for k in list(fields)[1:]},               # one missing
                        {**fields, "extra": 1},                                 # one more
                        {**fields, next(iter(fields)): {"@l": {}}},             # a bad value
                        {**fields, next(iter(fields)): 2 ** 64}):               # out of range
            got, called = both(json.dumps({"@t": tree["@t"], "v": changed}))
            assert got == called, changed
