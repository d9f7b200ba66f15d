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

__all__ = ["canonical", "content_hash", "short", "input_key"]


def _check(value: Any, path: str) -> None:
    if value is None or isinstance(value, (bool, int, str)):
        return
    if isinstance(value, float):
        raise InvalidRecord(f"{path}: floats are not canonical; send a string or an integer", path=path)
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check(item, f"{path}[{i}]")
        return
    if isinstance(value, dict):
        for k, item in value.items():
            if not isinstance(k, str):
                raise InvalidRecord(
                    f"{path}: mapping keys must be strings, got {type(k).__name__}", path=path)
            _check(item, f"{path}.{k}")
        return
    raise InvalidRecord(f"{path}: {type(value).__name__} is not a canonical JSON value", path=path)


def canonical(value: Any) -> bytes:
    """The canonical byte form of a JSON-like value (raises InvalidRecord for anything else)."""
    _check(value, "$")
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


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
