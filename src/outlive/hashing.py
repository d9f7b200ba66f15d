"""Canonical content hashing, stable across processes, machines and Python versions.

Why not ``hash()`` or pickle: both vary between interpreters and runs. The canonical form is JSON
with sorted keys, no insignificant whitespace, UTF-8, and integers/strings/bools/None/lists/dicts
only (floats are refused: their text form is a portability trap), hashed with SHA-256.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .errors import InvalidRecord

__all__ = ["MAX_DEPTH", "canonical", "check_json", "content_hash", "input_key", "short"]


#: How deep a value may nest. Deeper values are refused (typed), never a RecursionError.
MAX_DEPTH = 100
_INT_LIMIT = 2 ** 63


def check_json(value: Any, path: str = "$") -> None:
    """Raise :class:`InvalidRecord` unless ``value`` is a canonical JSON value.

    None, booleans, integers of at most 64 bits, valid Unicode strings, lists/tuples and dicts
    with string keys, nested at most :data:`MAX_DEPTH` deep: what every backend stores alike.
    """
    _check(value, path, 0)


def _text(value: str, path: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRecord(f"{path}: not valid Unicode (a lone surrogate?)", path=path) from None


def _check(value: Any, path: str, depth: int) -> None:
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, int):
        if not -_INT_LIMIT <= value < _INT_LIMIT:
            raise InvalidRecord(f"{path}: integers are limited to 64 bits", path=path)
        return
    if isinstance(value, str):
        _text(value, path)
        return
    if isinstance(value, float):
        raise InvalidRecord(f"{path}: floats are not canonical; send a string or an integer", path=path)
    if depth >= MAX_DEPTH:
        raise InvalidRecord(f"{path[:80]}: nested more than {MAX_DEPTH} deep", path=path[:80])
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check(item, f"{path}[{i}]", depth + 1)
        return
    if isinstance(value, dict):
        for k, item in value.items():
            if not isinstance(k, str):
                raise InvalidRecord(
                    f"{path}: mapping keys must be strings, got {type(k).__name__}", path=path)
            _text(k, path)
            _check(item, f"{path}.{k}", depth + 1)
        return
    raise InvalidRecord(f"{path}: {type(value).__name__} is not a canonical JSON value", path=path)


#: Built once: ``json.dumps`` with non-default options builds a new encoder on every call.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical(value: Any) -> bytes:
    """The canonical byte form of a JSON-like value (raises InvalidRecord for anything else)."""
    _check(value, "$", 0)
    return _CANONICAL.encode(value).encode("utf-8")


def content_hash(value: Any) -> str:
    """SHA-256 of the canonical form, hex. Bytes are hashed as they are."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return hashlib.sha256(bytes(value)).hexdigest()
    return hashlib.sha256(canonical(value)).hexdigest()


def input_key(step: str, sources: dict[str, str]) -> str:
    """The key a journal entry is stored under: the step name plus its declared inputs' hashes."""
    return content_hash({"step": step, "sources": dict(sorted(sources.items()))})


def short(digest: str | None) -> str:
    """The first eight hex digits, as the article prints identifiers."""
    return "-" if digest is None else digest[:8]
