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

from ._clone import _fields, clone
from .errors import InvalidArgument, InvalidRecord
from .hashing import NOT_JSON, _json_copy, _json_ok, _utf8, check_json

__all__ = ["INT_MAX", "INT_MIN", "argument", "callable_argument", "check_fields", "check_id",
           "checked_copy", "text_argument"]

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
    if type(value) is str and value and (value.isascii() or _utf8(value)):
        return value
    _check(value, str, what)
    if not value:
        raise InvalidRecord(f"{what} cannot be empty", field=what)
    result: str = value
    return result


def argument(value: Any, expected: type | tuple[type, ...], name: str, where: str,
             what: str | None = None) -> None:
    """Raise :class:`~outlive.errors.InvalidArgument` naming ``name`` of ``where`` unless
    ``value`` is an instance of ``expected`` (a public entry point's own type check, so a wrong
    type is typed before anything runs, never an AttributeError three frames down)."""
    if not isinstance(value, expected):
        raise _bad_argument(value, name, where, what or _type_names(expected))


def text_argument(value: Any, name: str, where: str) -> None:
    """:func:`argument` for a non-empty string every backend can store."""
    if type(value) is str and value and (value.isascii() or _utf8(value)):
        return
    if isinstance(value, str) and value and _utf8(value):
        return
    raise _bad_argument(value, name, where, "a non-empty string of valid Unicode")


def callable_argument(value: Any, name: str, where: str) -> None:
    """:func:`argument` for a function."""
    if not callable(value):
        raise _bad_argument(value, name, where, "callable")


def _type_names(expected: type | tuple[type, ...]) -> str:
    types_ = expected if isinstance(expected, tuple) else (expected,)
    names = [t.__name__ for t in types_ if t is not type(None)]
    shown = " or ".join(f"a {n}" for n in names)
    return shown + (" or None" if type(None) in types_ else "")


def _bad_argument(value: Any, name: str, where: str, expected: str) -> InvalidArgument:
    return InvalidArgument(f"{where}: {name} must be {expected}, not {type(value).__name__} "
                           f"{reprlib.repr(value)}", argument=name, function=where)


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


def _fast_record(cls: type) -> _Ok:
    """The compiled check of one record class: a single function whose code names each field and
    tests its type inline (no closure call, ``getattr`` or loop per field)."""
    if not dataclasses.is_dataclass(cls):
        return lambda value: False
    names = [f.name for f in dataclasses.fields(cls)]
    env: dict[str, Any] = {"J": _json_ok, "U": _utf8, "FAST": _FAST, "COMPILE": _fast_record}
    own = (cls.__module__ in ("outlive.records", "outlive.ledger")
           and not hasattr(cls, "__slots__") and all(n.isidentifier() for n in names))
    lines = ["def ok(value):", "    try:"]
    lines.append("        a = value.__dict__" if own else "        pass")
    for i, n in enumerate(names):
        lines.append(f"        x{i} = a[{n!r}]" if own else f"        x{i} = getattr(value, {n!r})")
    tests = [_expr(_hints(cls)[n], f"x{i}", env) for i, n in enumerate(names)]
    lines.append("    except (KeyError, AttributeError):")
    lines.append("        return False")
    lines.append("    return bool(" + " and ".join(tests or ["True"]) + ")")
    exec("\n".join(lines), env)   # field names and types of our own classes
    ok: _Ok = env["ok"]
    return ok


def _expr(tp: Any, x: str, env: dict[str, Any]) -> str:
    """A Python expression, true only where :func:`_check` accepts ``x`` as a ``tp`` (it may say
    no more often; then the walk decides)."""
    if tp is Any:
        return f"J({x}, 0)"
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        options = typing.get_args(tp)
        tests = [_expr(o, x, env) for o in options if o is not type(None)]
        if type(None) in options:
            tests.insert(0, f"{x} is None")
        return "(" + " or ".join(tests) + ")"
    if origin is tuple:
        y = f"y{len(env)}"
        env[y] = None   # names taken
        return f"(type({x}) is tuple and all({_expr(typing.get_args(tp)[0], y, env)} for {y} in {x}))"
    if origin is dict:
        key_tp, val_tp = typing.get_args(tp)
        k, v = f"k{len(env)}", f"v{len(env)}"
        env[k] = None   # names taken
        return (f"(type({x}) is dict and all({_expr(key_tp, k, env)} and {_expr(val_tp, v, env)} "
                f"for {k}, {v} in {x}.items()))")
    if tp is bool:
        return f"type({x}) is bool"
    if tp is int:
        return f"(type({x}) is int and {INT_MIN} <= {x} <= {INT_MAX})"
    if tp is str:
        return f"(type({x}) is str and ({x}.isascii() or U({x})))"
    if isinstance(tp, type) and (issubclass(tp, Enum) or dataclasses.is_dataclass(tp)):
        name = f"T{len(env)}"
        env[name] = tp
        if issubclass(tp, Enum):
            return f"type({x}) is {name}"
        # a nested record: its own compiled check, looked up when first needed
        return (f"(type({x}) is {name} and (FAST.get({name}) or "
                f"FAST.setdefault({name}, COMPILE({name})))({x}))")
    return "False"


# -- checked and copied in one walk --------------------------------------------------------------
_Copy = Callable[[Any], Any]
_COPY: dict[type, _Copy] = {}


def checked_copy(value: Any) -> Any:
    """``clone(value)`` if :func:`check_fields` accepts ``value``, else None.

    The ledger checks a command and copies it on its way in; this does both in one walk,
    compiled per class from the same annotations as the check (each field's test inline, a
    ``dict[str, str]`` tested and then copied by ``dict.copy``, a JSON value checked and copied
    together). None does not say the value is bad (a shape this does not compile, a subclass):
    then :func:`check_fields` decides and names the bad field, and ``clone`` copies.
    """
    cls = type(value)
    copy = _COPY.get(cls)
    if copy is None:
        copy = _COPY[cls] = _copy_record(cls)
    return copy(value)


def _none(value: Any) -> None:
    return None


def _copy_record(cls: type) -> _Copy:
    """The compiled check-and-copy of one of our record classes (see :func:`checked_copy`): a
    field holding nothing that can change is shared, the record rebuilt only if a field was
    copied, as ``clone`` does."""
    if (not dataclasses.is_dataclass(cls) or cls.__module__ not in ("outlive.records", "outlive.ledger")
            or hasattr(cls, "__slots__") or _fields(cls) is None):
        return _none
    names = [f.name for f in dataclasses.fields(cls)]
    if not all(n.isidentifier() for n in names):
        return _none
    env: dict[str, Any] = {"J": _json_copy, "NO": NOT_JSON, "U": _utf8, "NEW": object.__new__,
                           "T": cls, "COPY": _COPY, "COMPILE": _copy_record, "CLONE": clone}
    lines = ["def copy(value):", "    try:", "        a = value.__dict__"]
    lines += [f"        x{i} = a[{n!r}]" for i, n in enumerate(names)]
    lines += ["    except (KeyError, AttributeError):", "        return None"]
    for i, n in enumerate(names):
        lines += ["    " + line for line in _copy_lines(_hints(cls)[n], f"x{i}", f"y{i}", env)]
    same = " and ".join(f"y{i} is x{i}" for i in range(len(names))) or "True"
    lines += [f"    if {same}:", "        return value", "    out = NEW(T)", "    d = out.__dict__"]
    lines += [f"    d[{n!r}] = y{i}" for i, n in enumerate(names)]
    lines.append("    return out")
    exec("\n".join(lines), env)   # field names and types of our own classes
    copy: _Copy = env["copy"]
    return copy


def _copy_lines(tp: Any, x: str, y: str, env: dict[str, Any]) -> list[str]:
    """Statements that set ``y`` to the copy of ``x`` (a ``tp``), or return None from the
    function if the check says no (a shape without its own statements: the check's expression,
    then ``clone``)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    scalar = (str, int, bool)
    if tp is Any:
        return [f"{y} = J({x}, 0)", f"if {y} is NO:", "    return None"]
    if origin in (Union, types.UnionType) and len(args) == 2 and type(None) in args:
        (option,) = [o for o in args if o is not type(None)]
        return [f"if {x} is None:", f"    {y} = None", "else:",
                *["    " + line for line in _copy_lines(option, x, y, env)]]
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        item = args[0]
        t = f"t{len(env)}"
        env[t] = None   # names taken
        if item in scalar or (isinstance(item, type) and issubclass(item, Enum)):
            return [f"if type({x}) is not tuple:", "    return None", f"for {t} in {x}:",
                    f"    if not ({_expr(item, t, env)}):", "        return None", f"{y} = {x}"]
        if isinstance(item, type) and dataclasses.is_dataclass(item):
            c = f"c{len(env)}"
            env[c] = None   # names taken
            return [f"if type({x}) is not tuple:", "    return None", f"{y} = []",
                    f"for {t} in {x}:",
                    *["    " + line for line in _copy_lines(item, t, c, env)],
                    f"    {y}.append({c})", f"{y} = tuple({y})"]
    if origin is dict and args == (str, str):
        k, v = f"k{len(env)}", f"v{len(env)}"
        env[k] = None   # names taken
        return [f"if type({x}) is not dict:", "    return None", f"for {k}, {v} in {x}.items():",
                f"    if not ({_expr(str, k, env)} and {_expr(str, v, env)}):", "        return None",
                f"{y} = {x}.copy()"]
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        name = f"T{len(env)}"
        env[name] = tp
        return [f"if type({x}) is not {name}:", "    return None",
                f"{y} = (COPY.get({name}) or COPY.setdefault({name}, COMPILE({name})))({x})",
                f"if {y} is None:", "    return None"]
    if tp in scalar or (isinstance(tp, type) and issubclass(tp, Enum)):
        return [f"if not ({_expr(tp, x, env)}):", "    return None", f"{y} = {x}"]
    return [f"if not ({_expr(tp, x, env)}):", "    return None", f"{y} = CLONE({x})"]


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
