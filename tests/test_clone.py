"""The ledger's copier: what can change in place is copied, what cannot is shared."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from outlive._clone import clone, evolve
from outlive.records import Attempt, AttemptState, JournalEntry, Policy, WorkState


def _entry(result: Any) -> JournalEntry:
    return JournalEntry(step="s", input_key="k", sources={"a": "h"}, result=result,
                        result_id="r", attempt=1, token=1, seq=1)


def test_every_dict_and_list_is_copied_at_any_depth() -> None:
    e = _entry({"x": [1, (2, {"y": [3]})]})
    c = clone(e)
    assert c == e and c is not e
    c.result["x"][1][1]["y"].append(4)
    c.sources["b"] = "h2"
    assert e.result == {"x": [1, (2, {"y": [3]})]} and e.sources == {"a": "h"}


def test_immutable_records_and_tuples_are_shared() -> None:
    a = Attempt(work_id="w", number=1, token=1, pinned_version="v1", state=AttemptState.RUNNING,
                admitted_at=0, last_heartbeat=0)
    st = WorkState(work_id="w", attempts=(a,), journal=(_entry({"r": 1}),))
    c = clone(st)
    assert c == st
    assert c.attempts is st.attempts and c.policy is st.policy     # nothing inside can change
    assert c.journal[0].result is not st.journal[0].result


def test_anything_else_falls_back_to_deepcopy() -> None:
    class Box:
        def __init__(self) -> None:
            self.items = [1]

    b = Box()
    c = clone([b])[0]
    assert c is not b and c.items == [1] and c.items is not b.items


def test_evolve_is_replace_for_records() -> None:
    p = Policy()
    q = evolve(p, pins=False)
    assert (q.fencing, q.pins, p.pins) == (True, False, True)
    with pytest.raises(TypeError):
        evolve(p, nope=1)

    @dataclass(frozen=True)
    class Derived:
        a: int

        def __post_init__(self) -> None:
            object.__setattr__(self, "b", self.a * 2)

    assert evolve(Derived(1), a=3).b == 6   # type: ignore[attr-defined]


def test_a_quick_init_builds_the_same_record_as_the_dataclass_one() -> None:
    """Records get an ``__init__`` that fills their dict directly: the same signature, defaults,
    default factories and refusals as the one ``dataclasses`` writes, and still frozen."""
    import dataclasses
    import inspect

    from outlive._clone import quick_init

    @dataclass(frozen=True, kw_only=True)
    class Rec:
        a: int
        b: list[int] = dataclasses.field(default_factory=list)
        c: str = "x"

    before, signature = Rec(a=1), inspect.signature(Rec)
    assert quick_init(Rec) is Rec and Rec.__init__ is not None
    assert str(inspect.signature(Rec)) == str(signature)
    assert Rec(a=1) == before and Rec(a=2, b=[3], c="y") == dataclasses.replace(before, a=2, b=[3], c="y")
    assert Rec(a=1).b is not Rec(a=1).b                  # a fresh default from the factory
    for bad in ({}, {"a": 1, "d": 2}):
        with pytest.raises(TypeError):
            Rec(**bad)
    with pytest.raises(TypeError):
        Rec(1)  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        Rec(a=1).a = 2  # type: ignore[misc]
    assert [f.name for f in dataclasses.fields(Rec)] == list(vars(Rec(a=1)))   # field order

    @dataclass(frozen=True)
    class Positional:
        a: int

    init = Positional.__init__
    assert quick_init(Positional).__init__ is init       # not one it can serve: left alone


def test_a_maker_builds_what_the_class_builds() -> None:
    """``maker(cls)`` is ``cls(**fields)`` as a plain function: same keywords, defaults, default
    factories (a new one each time) and refusals, the same frozen record."""
    import dataclasses

    from outlive._clone import maker
    from outlive.ledger import RecordSteps, StepWrite

    make = maker(WorkState)
    a, b = make(work_id="w"), WorkState(work_id="w")
    assert a == b and type(a) is WorkState and a.policy == Policy()
    assert make(work_id="w", seq=3, policy=Policy(pins=False)) == WorkState(
        work_id="w", seq=3, policy=Policy(pins=False))
    w = maker(StepWrite)(step="s", sources={"a": "h"}, input_key="k", result=1, result_id="r")
    assert w == StepWrite(step="s", sources={"a": "h"}, input_key="k", result=1, result_id="r")
    assert maker(RecordSteps)(attempt=1, token=1, entries=(w,), at=2) == RecordSteps(
        attempt=1, token=1, entries=(w,), at=2)
    with pytest.raises(TypeError):
        make()                                    # a required field missing
    with pytest.raises(TypeError):
        make(work_id="w", nope=1)                 # not a field
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.seq = 4   # type: ignore[misc]

    @dataclass(frozen=True)
    class Positional:
        a: int

    assert maker(Positional) is Positional        # not served: the class itself
