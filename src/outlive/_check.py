"""Type checks for commands and records, from their own annotations.

Every backend must give the same answer to the same bad input, and nothing malformed may be
stored: a ``verdict`` of ``"no"``, an ``at`` of NaN, a ``Contract`` of None, an integer SQLite
cannot hold, a string UTF-8 cannot encode. The ledger checks each command before applying it and
the codec checks each record it decodes (a corrupt stored row), both with :func:`check_fields`.
"""

from __future__ import annotations

import dataclasses
import reprlib
import types
import typing
from collections.abc import Callable
from enum import Enum
from typing import Any, Union

from .errors import InvalidRecord
from .hashing import MAX_DEPTH, check_json

__all__ = ["INT_MAX", "INT_MIN", "check_fields", "check_id"]

#: The integers every backend stores exactly (SQLite's INTEGER is a signed 64-bit value).
INT_MIN = -(2 ** 63)
INT_MAX = 2 ** 63 - 1


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    return hints


def check_id(value: Any, what: str) -> str:
    """A non-empty identifier that every backend can store as text."""
    _check(value, str, what)
    if not value:
        raise InvalidRecord(f"{what} cannot be empty", field=what)
    result: str = value
    return result


def check_fields(value: Any, path: str = "") -> None:
    """Raise :class:`~outlive.errors.InvalidRecord` unless ``value``'s fields match their types.

    A check compiled once per class answers the common case (every field fine) without building
    a path string per field; only when it says no does the step-by-step walk below run, to find
    the first bad field and name it (that walk alone decides, so the messages never change).
    """
    cls = type(value)
    ok = _FAST.get(cls)
    if ok is None:
        ok = _FAST[cls] = _fast_record(cls)
    if ok(value):
        return
    name = path or cls.__name__
    for f in dataclasses.fields(value):
        _check(getattr(value, f.name), _hints(cls)[f.name], f"{name}.{f.name}")


# -- the compiled fast path: True only for a value the walk below would accept -------------------
_Ok = Callable[[Any], bool]
_FAST: dict[type, _Ok] = {}


def _utf8(value: str) -> bool:
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _json_ok(value: Any, depth: int = 0) -> bool:
    """What :func:`outlive.hashing.check_json` accepts (its usual types; anything unusual: no)."""
    t = type(value)
    if t is str:
        return _utf8(value)
    if value is None or t is bool:
        return True
    if t is int:
        return bool(INT_MIN <= value <= INT_MAX)
    if depth >= MAX_DEPTH:
        return False
    if t is dict:
        for k, v in value.items():
            if type(k) is not str or not _utf8(k) or not _json_ok(v, depth + 1):
                return False
        return True
    if t is list or t is tuple:
        for v in value:
            if not _json_ok(v, depth + 1):
                return False
        return True
    return False


def _fast_record(cls: type) -> _Ok:
    if not dataclasses.is_dataclass(cls):
        return lambda value: False
    checks = tuple((f.name, _fast(_hints(cls)[f.name])) for f in dataclasses.fields(cls))

    def ok(value: Any) -> bool:
        for name, check in checks:
            if not check(getattr(value, name)):
                return False
        return True
    return ok


def _fast(tp: Any) -> _Ok:
    """A predicate for ``tp``: never True where :func:`_check` would raise (it may say no more
    often; then the walk decides)."""
    if tp is Any:
        return _json_ok
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        options = typing.get_args(tp)
        none_ok = type(None) in options
        checks = tuple(_fast(o) for o in options if o is not type(None))
        if len(checks) == 1:
            (one,) = checks
            return lambda v: (v is None and none_ok) or one(v)
        return lambda v: (v is None and none_ok) or any(c(v) for c in checks)
    if origin is tuple:
        item = _fast(typing.get_args(tp)[0])
        return lambda v: type(v) is tuple and all(item(x) for x in v)
    if origin is dict:
        key_tp, val_tp = typing.get_args(tp)
        fk, fv = _fast(key_tp), _fast(val_tp)
        return lambda v: type(v) is dict and all(fk(k) and fv(x) for k, x in v.items())
    if tp is bool:
        return lambda v: type(v) is bool
    if tp is int:
        return lambda v: type(v) is int and INT_MIN <= v <= INT_MAX
    if tp is str:
        return lambda v: type(v) is str and (v.isascii() or _utf8(v))
    if isinstance(tp, type) and issubclass(tp, Enum):
        return lambda v: type(v) is tp
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        def record(v: Any) -> bool:
            if type(v) is not tp:
                return False
            ok = _FAST.get(tp)
            if ok is None:
                ok = _FAST[tp] = _fast_record(tp)
            return ok(v)
        return record
    return lambda v: False


def _fail(path: str, expected: str, value: Any) -> InvalidRecord:
    shown = reprlib.repr(value)   # bounded: a value nested 10,000 deep is shown, not recursed
    return InvalidRecord(f"{path} must be {expected}, not {type(value).__name__} {shown}",
                         field=path)


def _check(value: Any, tp: Any, path: str) -> None:
    if tp is Any:
        check_json(value, path)
        return
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                _check(value, option, path)
                return
            except InvalidRecord as exc:
                errors.append(exc)
        raise errors[0] if len(errors) == 1 else _fail(path, str(tp), value)
    if origin is tuple:
        if type(value) is not tuple:
            raise _fail(path, "a tuple", value)
        (item, *_rest) = typing.get_args(tp)
        for i, v in enumerate(value):
            _check(v, item, f"{path}[{i}]")
        return
    if origin is dict:
        if type(value) is not dict:
            raise _fail(path, "a dict", value)
        key_tp, val_tp = typing.get_args(tp)
        for k, v in value.items():
            _check(k, key_tp, f"{path} key")
            _check(v, val_tp, f"{path}[{k!r}]")
        return
    if tp is bool:
        if type(value) is not bool:
            raise _fail(path, "true or false", value)
        return
    if tp is int:
        if type(value) is not int or not INT_MIN <= value <= INT_MAX:
            raise _fail(path, "an integer of at most 64 bits", value)
        return
    if tp is str:
        if type(value) is not str:
            raise _fail(path, "a string", value)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidRecord(f"{path} is not valid Unicode (a lone surrogate?)",
                                field=path) from None
        return
    if isinstance(tp, type) and issubclass(tp, Enum):
        if type(value) is not tp:
            raise _fail(path, f"a {tp.__name__}", value)
        return
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if type(value) is not tp:
            raise _fail(path, f"a {tp.__name__}", value)
        check_fields(value, path)
        return
    raise InvalidRecord(f"{path}: no check for {tp!r}", field=path)  # pragma: no cover
