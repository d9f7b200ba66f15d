from __future__ import annotations

import subprocess
import sys

import pytest

from outlive import content_hash, input_key
from outlive.errors import InvalidRecord
from outlive.hashing import canonical


def test_canonical_form_is_key_order_and_whitespace_free() -> None:
    assert canonical({"b": 1, "a": [True, None, "é"]}) == '{"a":[true,null,"é"],"b":1}'.encode()
    assert content_hash({"a": 1, "b": 2}) == content_hash({"b": 2, "a": 1})


def test_known_vector_is_stable() -> None:
    # sha256 of the canonical text '{"a":1}', fixed forever: changing it breaks every journal.
    assert content_hash({"a": 1}) == \
        "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862"


def test_hash_is_the_same_in_another_process() -> None:
    code = "from outlive import content_hash; print(content_hash({'x': ['y', 1, None]}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"PYTHONHASHSEED": "123"})
    assert out.stdout.strip() == content_hash({"x": ["y", 1, None]})


@pytest.mark.parametrize("bad", [1.5, {1: "a"}, object(), {"a": {1, 2}}])
def test_non_canonical_values_are_refused(bad: object) -> None:
    with pytest.raises(InvalidRecord):
        content_hash(bad)


def test_input_key_covers_step_and_sources() -> None:
    k = input_key("s2", {"s2": "aa"})
    assert k != input_key("s2", {"s2": "ab"})
    assert k != input_key("s3", {"s2": "aa"})
    assert k == input_key("s2", {"s2": "aa"})


def test_an_input_key_is_the_hash_of_its_inputs_whether_remembered_or_not() -> None:
    """Keys are remembered by their exact inputs (the ledger re-derives the key a worker just
    derived); a remembered key is always the true hash, and only exact strings are remembered."""
    from outlive import hashing

    src = {"b": content_hash("2"), "a": content_hash("1")}
    true = content_hash({"step": "s", "sources": dict(sorted(src.items()))})
    hashing._KEYS.clear()
    assert input_key("s", src) == true and hashing._KEYS       # derived, then remembered
    assert input_key("s", dict(src)) == true                    # found again
    assert input_key("s", dict(reversed(list(src.items())))) == true   # another order: the same
    assert input_key("t", src) != true and input_key("s", {"a": src["a"]}) != true

    class Liar(str):
        """Equal to every string: must never find another input's key."""

        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = str.__hash__

    hashing._KEYS.clear()
    assert input_key("s", src) == true
    forged = {Liar("b"): Liar(content_hash("9")), "a": src["a"]}
    assert input_key("s", forged) != true
    for _ in range(hashing._KEYS_MAX + 10):                     # full: cleared, never unbounded
        input_key("s", {"x": content_hash(_)})
    assert len(hashing._KEYS) <= hashing._KEYS_MAX
