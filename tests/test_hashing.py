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


@pytest.mark.parametrize("bad", [float("nan"), {1: "a"}, object(), {"a": {1, 2}}])
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


_AWKWARD = ["s", "", "é", "a\"b", "back\\slash", "tab\tnew\nline", "\x00\x1f\x7f", "\u2028\u2029",
            "emoji \U0001f600", "中文", "</script>", "ü" * 70]


@pytest.mark.parametrize("name", _AWKWARD)
def test_input_keys_and_result_ids_are_the_hash_of_their_canonical_form(name: str) -> None:
    """Input keys and result ids are written as canonical text directly: the same bytes as the
    canonical encoder's, for any name (escapes, control characters, non-ASCII), in key order."""
    from outlive import hashing, ledger

    hashing._KEYS.clear()
    sources = {name: content_hash(name), "b": content_hash(1), "A": content_hash(None),
               "ä": content_hash("x"), "a" + name: content_hash([name])}
    assert input_key(name, sources) == content_hash({"step": name, "sources": sources})
    derived = input_key(name, sources)      # a key input_key derived is written unescaped
    for attempt in (0, 1, 7, 2 ** 63 - 1, -(2 ** 63)):
        assert ledger.result_id("w", name, name + "k", attempt) == \
            content_hash({"step": name, "key": name + "k", "attempt": attempt})
        assert ledger.result_id("w", name, derived, attempt) == \
            content_hash({"step": name, "key": derived, "attempt": attempt})


@pytest.mark.parametrize("bad", [("s\ud800", "k", 1), ("s", "k\udfff", 1), ("s", "k", 2 ** 63)])
def test_a_result_id_of_values_that_are_not_canonical_is_refused(bad: tuple[str, str, int]) -> None:
    from outlive import ledger

    with pytest.raises(InvalidRecord):
        ledger.result_id("w", *bad)


@pytest.mark.parametrize("odd", [("s", "k", True), ("s", 5, 1), ("s", None, 1)])
def test_a_result_id_of_other_json_values_is_still_their_hash(odd: tuple[object, ...]) -> None:
    from outlive import ledger

    step, key, attempt = odd
    assert ledger.result_id("w", step, key, attempt) == content_hash(  # type: ignore[arg-type]
        {"step": step, "key": key, "attempt": attempt})


def test_an_input_key_of_a_lone_surrogate_is_refused() -> None:
    from outlive import hashing

    hashing._KEYS.clear()
    with pytest.raises(InvalidRecord):
        input_key("s\ud800", {"a": "b"})
    with pytest.raises(InvalidRecord):
        input_key("s", {"a\udc00": "b"})
    assert not hashing._KEYS


@pytest.mark.parametrize("value", [
    {"r": "x"}, [], {}, None, True, 0, -(2 ** 63), "é\u2028\"\\", [1, ("a", None), {"z": [], "a": {"é": 1}}],
    {"b": 1, "a": 2, "A": 3, "ä": 4, "": 5}, ["\U0001f600" * 3, "\x00"], [[[[[]]]]],
])
def test_the_encoder_built_once_writes_what_the_json_encoder_writes(value: object) -> None:
    """Canonical text comes from the C encoder built once (no cycle-check dict per call): the
    same text as the standard encoder's, and the ledger's size is that text's UTF-8 length."""
    from outlive import hashing

    assert hashing._text_of(value) == hashing._CANONICAL.encode(value)
    assert hashing._canonical_size(value) == len(canonical(value))


@pytest.mark.parametrize("data", [b"", b"outlive", "é\u2028".encode(), bytes(range(256)) * 40])
def test_the_builtin_sha256_gives_hashlibs_digest(data: bytes) -> None:
    import hashlib

    from outlive.hashing import _SHA256

    assert _SHA256(data).hexdigest() == hashlib.sha256(data).hexdigest()


def test_without_a_builtin_sha256_or_with_a_wrong_one_hashlibs_is_used(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import hashlib
    import types

    from outlive import hashing

    def missing(name: str) -> types.ModuleType:
        raise ImportError(name)

    monkeypatch.setattr(hashing.importlib, "import_module", missing)
    assert hashing._builtin_sha256() is hashlib.sha256
    wrong = types.SimpleNamespace(sha256=hashlib.sha1)   # a digest, but another one
    monkeypatch.setattr(hashing.importlib, "import_module", lambda name: wrong)
    assert hashing._builtin_sha256() is hashlib.sha256


def test_a_scalar_hash_is_its_canonical_hash_whether_remembered_or_not() -> None:
    """Exact ints and floats are remembered by value, one table per type: equal values of two
    types may have two canonical texts (``2 ** 62`` is written as its digits, ``2.0 ** 62`` in
    RFC 8785's shortest form), and ``True == 1``; a refused value is never remembered."""
    from outlive import hashing

    hashing._INT_HASHES.clear()
    hashing._FLOAT_HASHES.clear()
    values = [0, 1, -1, 2 ** 62, 2 ** 63 - 1, -(2 ** 63), 1.0, 0.5, -0.0, 0.0, 2.0 ** 62, 1e300,
              True, False, None]
    for value in values * 2:                                     # derived, then remembered
        assert content_hash(value) == hashing._SHA256(canonical(value)).hexdigest()
    assert hashing._INT_HASHES and hashing._FLOAT_HASHES
    assert content_hash(2 ** 62) != content_hash(2.0 ** 62)     # equal, not one text
    assert content_hash(True) != content_hash(1) and content_hash(False) != content_hash(0)
    assert content_hash(1) == content_hash(1.0)                 # one number: "1"
    for bad in (2 ** 63, -(2 ** 63) - 1, float("nan"), float("inf")):
        with pytest.raises(InvalidRecord):
            content_hash(bad)
    assert 2 ** 63 not in hashing._INT_HASHES and float("inf") not in hashing._FLOAT_HASHES
    for i in range(hashing._SCALAR_HASHES_MAX + 10):             # full: cleared, never unbounded
        content_hash(i)
        content_hash(i + 0.5)
    assert len(hashing._INT_HASHES) <= hashing._SCALAR_HASHES_MAX
    assert len(hashing._FLOAT_HASHES) <= hashing._SCALAR_HASHES_MAX


def test_an_int_subclass_is_hashed_as_the_encoder_writes_it() -> None:
    """Only exact ints take the remembered path: an IntEnum is written by the general path."""
    import enum

    class Level(enum.IntEnum):
        HIGH = 3

    assert content_hash(Level.HIGH) == content_hash(3)
    assert content_hash([Level.HIGH, 3]) == content_hash([3, 3])
