"""A tagged JSON form for records, commands, outcomes and errors.

Engines move data as JSON (Temporal payloads, Restate state, SQLite text). The tags make decoding
exact without type hints: dataclasses, tuples, enums and user dicts each round-trip to themselves.
"""

from __future__ import annotations

import dataclasses
import json
from enum import Enum
from typing import Any

from . import ledger, records
from .errors import InvalidRecord

__all__ = ["decode", "dumps", "encode", "loads"]

_TYPES: dict[str, type[Any]] = {}
for _mod in (records, ledger):
    for _name in _mod.__all__:
        _obj = getattr(_mod, _name)
        if isinstance(_obj, type) and (dataclasses.is_dataclass(_obj) or issubclass(_obj, Enum)):
            _TYPES[_obj.__name__] = _obj


def encode(value: Any) -> Any:
    if isinstance(value, Enum):
        return {"@e": type(value).__name__, "v": value.value}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            "@t": type(value).__name__,
            "v": {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)},
        }
    if isinstance(value, tuple):
        return {"@l": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {"@d": {str(k): encode(v) for k, v in value.items()}}
    raise InvalidRecord(f"cannot encode {type(value).__name__}")


def decode(value: Any) -> Any:
    if isinstance(value, list):
        return [decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "@d" in value:
        return {k: decode(v) for k, v in value["@d"].items()}
    if "@l" in value:
        return tuple(decode(v) for v in value["@l"])
    if "@t" in value:
        cls = _TYPES.get(value["@t"])
        if cls is None:
            raise InvalidRecord(f"unknown record type {value['@t']!r}")
        try:
            return cls(**{k: decode(v) for k, v in value["v"].items()})
        except TypeError as exc:
            raise InvalidRecord(f"malformed {value['@t']}: {exc}") from exc
    if "@e" in value:
        cls = _TYPES.get(value["@e"])
        if cls is None:
            raise InvalidRecord(f"unknown enum {value['@e']!r}")
        return cls(value["v"])
    raise InvalidRecord("untagged mapping in encoded record")


def dumps(value: Any) -> str:
    return json.dumps(encode(value), separators=(",", ":"), ensure_ascii=False)


def loads(text: str | bytes) -> Any:
    try:
        raw = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRecord(f"corrupt record: {exc}") from exc
    return decode(raw)
