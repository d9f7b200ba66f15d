"""A tagged JSON form for records, commands, outcomes and errors.

Engines move data as JSON (Temporal payloads, Restate state, SQLite text). The tags make decoding
exact without type hints: dataclasses, tuples, enums and user dicts each round-trip to themselves.
Decoding checks every record's fields against their types, so malformed text (a bad enum, an
epoch as a string) is a typed :class:`~outlive.errors.InvalidRecord`, never a record that looks
valid; a store that decodes its own rows reports it as :class:`~outlive.errors.CorruptRecord`
naming the work. Values nested deeper than the ledger accepts are refused, never a
``RecursionError``.
"""

from __future__ import annotations

import dataclasses
import json
from enum import Enum
from typing import Any

from . import ledger, records
from ._check import check_fields
from .errors import InvalidRecord
from .hashing import MAX_DEPTH

__all__ = ["decode", "dumps", "encode", "loads"]

_TYPES: dict[str, type[Any]] = {}
for _mod in (records, ledger):
    for _name in _mod.__all__:
        _obj = getattr(_mod, _name)
        if isinstance(_obj, type) and (dataclasses.is_dataclass(_obj) or issubclass(_obj, Enum)):
            _TYPES[_obj.__name__] = _obj


#: Records wrap user values a few levels deep (state -> journal -> entry -> result).
_MAX_NESTING = MAX_DEPTH + 20


#: Per record class: its tag and field names (``dataclasses.fields`` is not free).
_NAMES: dict[type, tuple[str, tuple[str, ...]]] = {}
_PLAIN = (str, int, bool, type(None))


def _record(value: Any, t: type, depth: int) -> dict[str, Any]:
    spec = _NAMES.get(t)
    if spec is None:
        spec = _NAMES[t] = (t.__name__, tuple(f.name for f in dataclasses.fields(value)))
    out: dict[str, Any] = {}
    for name in spec[1]:
        v = getattr(value, name)
        out[name] = v if type(v) in _PLAIN else encode(v, depth + 1)
    return {"@t": spec[0], "v": out}


def encode(value: Any, _depth: int = 0) -> Any:
    if _depth >= _MAX_NESTING:
        return _deepest(value, _depth)
    t = type(value)
    if t in _PLAIN:
        return value
    if t is dict:
        return {"@d": {str(k): v if type(v) in _PLAIN else encode(v, _depth + 1)
                       for k, v in value.items()}}
    if t is tuple:
        return {"@l": [v if type(v) in _PLAIN else encode(v, _depth + 1) for v in value]}
    if isinstance(value, Enum):
        return {"@e": t.__name__, "v": value.value}
    if isinstance(value, (bool, int, float, str)):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _record(value, t, _depth)
    if isinstance(value, tuple):
        return {"@l": [encode(v, _depth + 1) for v in value]}
    if isinstance(value, list):
        return [encode(v, _depth + 1) for v in value]
    if isinstance(value, dict):
        return {"@d": {str(k): encode(v, _depth + 1) for k, v in value.items()}}
    raise InvalidRecord(f"cannot encode {type(value).__name__}")


def _deepest(value: Any, depth: int) -> Any:
    """At the nesting limit: every item, scalars included, goes through the depth check."""
    if depth > _MAX_NESTING:
        raise InvalidRecord(f"cannot encode a value nested more than {MAX_DEPTH} deep")
    if isinstance(value, Enum):
        return {"@e": type(value).__name__, "v": value.value}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"@t": type(value).__name__,
                "v": {f.name: encode(getattr(value, f.name), depth + 1)
                      for f in dataclasses.fields(value)}}
    if isinstance(value, tuple):
        return {"@l": [encode(v, depth + 1) for v in value]}
    if isinstance(value, list):
        return [encode(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {"@d": {str(k): encode(v, depth + 1) for k, v in value.items()}}
    raise InvalidRecord(f"cannot encode {type(value).__name__}")


def decode(value: Any, _depth: int = 0) -> Any:
    """The value ``encode`` made; :class:`~outlive.errors.InvalidRecord` for anything else."""
    if _depth > _MAX_NESTING:
        raise InvalidRecord(f"a record nested more than {MAX_DEPTH} deep")
    if isinstance(value, list):
        return [decode(v, _depth + 1) for v in value]
    if not isinstance(value, dict):
        return value
    if "@d" in value:
        inner = value["@d"]
        if not isinstance(inner, dict):
            raise InvalidRecord("a tagged mapping that is not a mapping")
        return {k: decode(v, _depth + 1) for k, v in inner.items()}
    if "@l" in value:
        items = value["@l"]
        if not isinstance(items, list):
            raise InvalidRecord("a tagged tuple that is not a list")
        return tuple(decode(v, _depth + 1) for v in items)
    if "@t" in value:
        name = value["@t"]
        cls = _TYPES.get(name) if isinstance(name, str) else None
        if cls is None or not isinstance(value.get("v"), dict):
            raise InvalidRecord(f"unknown or malformed record type {name!r}")
        try:
            rec = cls(**{k: decode(v, _depth + 1) for k, v in value["v"].items()})
            if cls is not ledger.Outcome:   # an answer carrying any record, not a stored record
                check_fields(rec)
        except TypeError as exc:
            raise InvalidRecord(f"malformed {name}: {exc}") from exc
        except InvalidRecord as exc:
            raise InvalidRecord(f"malformed {name}: {exc.message}") from exc
        return rec
    if "@e" in value:
        name = value["@e"]
        cls = _TYPES.get(name) if isinstance(name, str) else None
        if cls is None:
            raise InvalidRecord(f"unknown enum {name!r}")
        try:
            return cls(value.get("v"))
        except ValueError as exc:
            raise InvalidRecord(f"{name} has no value {value.get('v')!r}") from exc
    raise InvalidRecord("untagged mapping in encoded record")


#: Built once: ``json.dumps`` with non-default options builds a new encoder on every call.
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def dumps(value: Any) -> str:
    return _JSON.encode(encode(value))


def loads(text: str | bytes) -> Any:
    try:
        raw = json.loads(text)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise InvalidRecord(f"corrupt record: {type(exc).__name__}: {str(exc)[:200]}") from exc
    return decode(raw)
