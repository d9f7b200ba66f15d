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
import json.scanner
import typing
from enum import Enum
from typing import Any

from . import ledger, records
from ._check import check_fields
from ._clone import _fields
from .errors import InvalidRecord
from .hashing import MAX_DEPTH

__all__ = ["decode", "dumps", "dumps_blank", "encode", "loads"]

_TYPES: dict[str, type[Any]] = {}
for _mod in (records, ledger):
    for _name in _mod.__all__:
        _obj = getattr(_mod, _name)
        if isinstance(_obj, type) and (dataclasses.is_dataclass(_obj) or issubclass(_obj, Enum)):
            _TYPES[_obj.__name__] = _obj


#: Records wrap user values a few levels deep (state -> journal -> entry -> result).
_MAX_NESTING = MAX_DEPTH + 20


#: Per record class: a function encoding one of its values, compiled once (see :func:`_compile`).
_ENCODERS: dict[type, Any] = {}
_PLAIN = (str, int, bool, type(None))


def _compile(t: type) -> Any:
    """A function ``(value, depth) -> tagged dict`` for the dataclass ``t``, built once.

    It does what a loop over the fields would (a plain value as it is, anything else through
    :func:`encode` one level deeper) with the field names written into its code: no per-field
    ``getattr``, loop or dict assignment, the largest part of encoding a record.
    """
    names = tuple(f.name for f in dataclasses.fields(t))
    if hasattr(t, "__slots__") or any(not n.isidentifier() for n in names):
        def generic(value: Any, depth: int) -> dict[str, Any]:
            out = {}
            for name in names:
                v = getattr(value, name)
                out[name] = v if type(v) in _PLAIN else encode(v, depth + 1)
            return {"@t": t.__name__, "v": out}
        return generic
    lines = ["def enc(value, depth):", "    a = value.__dict__", "    d = depth + 1"]
    lines += [f"    x{i} = a[{n!r}]" for i, n in enumerate(names)]
    fields = ", ".join(f"{n!r}: x{i} if type(x{i}) in P else E(x{i}, d)"
                       for i, n in enumerate(names))
    lines.append(f"    return {{'@t': TAG, 'v': {{{fields}}}}}")
    scope: dict[str, Any] = {"P": _PLAIN, "E": encode, "TAG": t.__name__}
    exec("\n".join(lines), scope)   # the field names are identifiers of our own classes
    return scope["enc"]


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
    enc = _ENCODERS.get(t)
    if enc is not None:
        return enc(value, _depth)
    if isinstance(value, Enum):
        return {"@e": t.__name__, "v": value.value}
    if isinstance(value, (bool, int, float, str)):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        enc = _ENCODERS[t] = _compile(t)
        return enc(value, _depth)
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


#: JSON leaves: what :func:`decode` returns as it is given (below the nesting limit).
_LEAVES = frozenset({str, int, float, bool, type(None)})
#: "Not made here": a value nothing decodes to.
_NONE = object()


def decode(value: Any, _depth: int = 0) -> Any:
    """The value ``encode`` made; :class:`~outlive.errors.InvalidRecord` for anything else."""
    if _depth > _MAX_NESTING:
        raise InvalidRecord(f"a record nested more than {MAX_DEPTH} deep")
    if isinstance(value, list):
        return [decode(v, _depth + 1) for v in value]
    if not isinstance(value, dict):
        return value
    # A leaf inside is taken as it is, without a call (what the call would return), unless
    # it sits past the nesting limit, where the call refuses it: most values in a record are.
    d = _depth + 1
    leaves = _LEAVES if d <= _MAX_NESTING else ()
    if "@d" in value:
        inner = value["@d"]
        if not isinstance(inner, dict):
            raise InvalidRecord("a tagged mapping that is not a mapping")
        return {k: v if type(v) in leaves else decode(v, d) for k, v in inner.items()}
    if "@l" in value:
        items = value["@l"]
        if not isinstance(items, list):
            raise InvalidRecord("a tagged tuple that is not a list")
        return tuple([v if type(v) in leaves else decode(v, d) for v in items])
    if "@t" in value:
        name = value["@t"]
        cls = _TYPES.get(name) if isinstance(name, str) else None
        if cls is None or not isinstance(value.get("v"), dict):
            raise InvalidRecord(f"unknown or malformed record type {name!r}")
        try:
            fields = value["v"]
            make = _MAKERS.get(cls) if leaves else None
            rec = make(fields, d) if make is not None else _NONE
            if rec is _NONE:
                rec = cls(**{k: v if type(v) in leaves else decode(v, d)
                             for k, v in fields.items()})
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


def _maker(cls: type) -> Any:
    """A function building a ``cls`` from its encoded fields as ``cls(**fields)`` does (each field
    decoded, its leaves taken as they are), compiled once: when the mapping holds exactly the
    class's fields in their order (what :func:`dumps` writes), else it answers ``_NONE`` and
    :func:`decode` builds it by the call (which names what is wrong). None for a class that is
    not a plain frozen record (its ``__init__`` may do more than fill the fields)."""
    names = _fields(cls)
    if (not names or hasattr(cls, "__post_init__")
            or any(not f.init or not f.name.isidentifier() for f in dataclasses.fields(cls))):
        return None
    lines = ["def make(v, d):", f"    if len(v) != {len(names)} or tuple(v) != NAMES:",
             "        return MISS"]
    for i, n in enumerate(names):
        lines += [f"    x{i} = v[{n!r}]", f"    if type(x{i}) not in LEAVES:",
                  f"        x{i} = DECODE(x{i}, d)"]
    lines += ["    out = NEW(T)", "    a = out.__dict__"]
    lines += [f"    a[{n!r}] = x{i}" for i, n in enumerate(names)]
    lines.append("    return out")
    env: dict[str, Any] = {"NAMES": names, "MISS": _NONE, "LEAVES": _LEAVES, "DECODE": decode,
                           "NEW": object.__new__, "T": cls}
    exec("\n".join(lines), env)   # the field names of our own records, identifiers (checked)
    return env["make"]


#: Per record class the codec decodes: its compiled builder (see :func:`_maker`), if it has one.
_MAKERS: dict[type, Any] = {}
for _cls in _TYPES.values():
    if dataclasses.is_dataclass(_cls):
        _made = _maker(_cls)
        if _made is not None:
            _MAKERS[_cls] = _made


#: Built once: ``json.dumps`` with non-default options builds a new encoder on every call. No
#: circular check: :func:`encode` bounds the depth of what it builds, so a tree it made has no cycle.
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, check_circular=False)
_STR = json.encoder.encode_basestring   # what _JSON writes for a string (ensure_ascii off)
_INT = int.__repr__
#: Per record class: a function writing one of its values as text, compiled once.
_TEXT: dict[type, Any] = {}
_ENUM_TEXT: dict[Any, str] = {}
#: The same texts by the member's id: hashing a member runs Enum.__hash__, a Python call.
_ENUM_ID_TEXT: dict[int, str] = {}


def dumps(value: Any) -> str:
    """The JSON text of ``encode(value)``, written straight to text.

    Building the tagged tree and then serialising it cost a store's write twice what writing the
    text does (each record class gets a writer compiled once, as :func:`encode` does). The text
    is the same character for character (tests compare the two on every kind of record and on
    arbitrary values); anything unusual, or nested up to the limit, goes through the tree.
    """
    fn = _TEXT.get(type(value))   # a record whose writer is compiled: the usual case
    return fn(value, 0) if fn is not None else _text(value, 0)


#: Per (record class, blanked fields): a writer of the record with those fields as ``()``.
_BLANK_TEXT: dict[tuple[type, tuple[str, ...]], Any] = {}


def dumps_blank(value: Any, blank: tuple[str, ...]) -> str:
    """``dumps(replace(value, **{name: () for name in blank}))``, without building that record.

    A store writes a work's head as the state with its collections emptied (they have rows of
    their own); copying the state to empty them cost as much as writing a small record. The
    text is the same character for character (tested).
    """
    t = type(value)
    fn = _BLANK_TEXT.get((t, blank))
    if fn is None:
        names = {f.name for f in dataclasses.fields(t)} if dataclasses.is_dataclass(t) else set()
        if (not names or not set(blank) <= names or hasattr(t, "__slots__")
                or any(not n.isidentifier() for n in names)):
            raise TypeError(f"dumps_blank: {t.__name__} has no fields {blank}")
        fn = _BLANK_TEXT[(t, blank)] = _compile_text(t, blank)
    return fn(value, 0)  # type: ignore[no-any-return]


def _text(value: Any, depth: int) -> str:
    if depth >= _MAX_NESTING:
        return _JSON.encode(encode(value, depth))   # at the limit: encode's own checks
    t = type(value)
    if t is str:
        return _STR(value)
    if t is int:
        return _INT(value)
    if value is None:
        return "null"
    if t is bool:
        return "true" if value else "false"
    fn = _TEXT.get(t)
    if fn is not None:
        return fn(value, depth)  # type: ignore[no-any-return]
    if t is tuple:
        return _tuple_text(value, depth)
    if t is dict:
        return _dict_text(value, depth)
    if t is list:
        d = depth + 1
        return "[" + ",".join([_STR(v) if type(v) is str else _text(v, d) for v in value]) + "]"
    if isinstance(value, Enum) and type(value.value) in (str, int):
        text = _ENUM_TEXT.get(value)
        if text is None:
            text = _ENUM_TEXT[value] = _JSON.encode(encode(value, depth))
            _ENUM_ID_TEXT[id(value)] = text   # members live as long as their class
        return text
    if (dataclasses.is_dataclass(value) and not isinstance(value, type)
            and not hasattr(t, "__slots__")
            and all(f.name.isidentifier() for f in dataclasses.fields(t))):
        fn = _TEXT[t] = _compile_text(t)
        return fn(value, depth)  # type: ignore[no-any-return]
    return _JSON.encode(encode(value, depth))


def _tuple_text(value: tuple[Any, ...], depth: int) -> str:
    """A tuple at ``depth`` (below the nesting limit), as :func:`_text` writes it.

    Loops, not comprehensions: a comprehension is a function call of its own (Python 3.11), and
    most tuples and mappings in a record hold one or two items.
    """
    d = depth + 1
    if len(value) == 1:
        v = value[0]
        return f'{{"@l":[{_STR(v) if type(v) is str else _text(v, d)}]}}'
    out = []
    for v in value:
        out.append(_STR(v) if type(v) is str else _text(v, d))
    return '{"@l":[' + ",".join(out) + "]}"


def _dict_text(value: dict[Any, Any], depth: int) -> str:
    """A dict at ``depth`` (below the nesting limit), as :func:`_text` writes it."""
    d = depth + 1
    if len(value) == 1:
        for k, v in value.items():
            return (f'{{"@d":{{{_STR(k if type(k) is str else str(k))}:'
                    f'{_STR(v) if type(v) is str else _INT(v) if type(v) is int else _text(v, d)}}}}}')
    out = []
    for k, v in value.items():
        out.append(_STR(k if type(k) is str else str(k)) + ":"
                   + (_STR(v) if type(v) is str else _INT(v) if type(v) is int else _text(v, d)))
    return '{"@d":{' + ",".join(out) + "}}"


def _compile_text(t: type, blank: tuple[str, ...] = ()) -> Any:
    """The text of one ``t`` record: its fields written in code, as :func:`_compile` does (the
    fields named in ``blank`` written as an empty tuple, whatever they hold).

    The writer is one f-string: its literal parts and each field's text joined in one step (no
    tuple to join), an ``int`` field formatted in place (``str`` of an exact ``int`` is its
    ``repr``, what JSON writes).
    """
    names = tuple(f.name for f in dataclasses.fields(t))
    try:
        hints = typing.get_type_hints(t)
    except Exception:   # hints that do not resolve: each field written as it comes
        hints = {}
    lines = ["def text(value, depth):", "    a = value.__dict__", "    d = depth + 1"]
    parts: list[str] = []   # the f-string's pieces: literal text with braces doubled, or {expr}
    scope: dict[str, Any] = {"S": _STR, "X": _text, "EIDS": _ENUM_ID_TEXT, "DT": _dict_text,
                             "TT": _tuple_text, "M": _MAX_NESTING, "NULL": "null",
                             "TRUE": "true", "FALSE": "false", "EMPTY": '{"@l":[]}'}

    def literal(text: str) -> None:
        assert "'" not in text and "\\" not in text   # identifiers and JSON punctuation only
        parts.append(text.replace("{", "{{").replace("}", "}}"))

    for i, n in enumerate(names):
        lead = ('{"@t":' + _STR(t.__name__) + ',"v":{') if i == 0 else ","
        literal(lead + _STR(n) + ":")
        if n in blank:
            literal('{"@l":[]}')
            continue
        lines.append(f"    x{i} = a[{n!r}]")
        x = f"x{i}"
        tp = hints.get(n)
        # Each field's usual type written inline, anything else by X (the same text, checked).
        if isinstance(tp, type) and issubclass(tp, Enum):   # a member's text, once known
            scope[f"E{i}"] = tp
            expr = f"(type({x}) is E{i} and EIDS.get(id({x}))) or X({x}, d)"
        elif tp is str:
            expr = f"S({x}) if type({x}) is str else X({x}, d)"
        elif tp is int:
            expr = f"{x} if type({x}) is int else X({x}, d)"
        elif tp is bool:
            expr = f"TRUE if {x} is True else FALSE if {x} is False else X({x}, d)"
        elif tp == (str | None):
            expr = f"S({x}) if type({x}) is str else NULL if {x} is None else X({x}, d)"
        elif tp == (int | None):
            expr = f"{x} if type({x}) is int else NULL if {x} is None else X({x}, d)"
        elif typing.get_origin(tp) is dict:
            expr = f"DT({x}, d) if type({x}) is dict and d < M else X({x}, d)"
        elif typing.get_origin(tp) is tuple:
            expr = (f"EMPTY if type({x}) is tuple and not {x} else "
                    f"TT({x}, d) if type({x}) is tuple and d < M else X({x}, d)")
        else:   # any JSON value: a user's mapping most often
            expr = (f"S({x}) if type({x}) is str else {x} if type({x}) is int "
                    f"else NULL if {x} is None else DT({x}, d) if type({x}) is dict and d < M "
                    f"else X({x}, d)")
        parts.append("{" + expr + "}")
    if not names:
        literal('{"@t":' + _STR(t.__name__) + ',"v":{')
    literal("}}")
    lines.append('    return f\'\'\'' + "".join(parts) + '\'\'\'')
    exec("\n".join(lines), scope)   # the field names are identifiers of our own classes
    return scope["text"]


#: json's own scanner (its C one where there is one), called directly: ``json.loads`` reaches it
#: through three Python frames and two regular-expression matches for whitespace.
_SCAN: Any = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def loads(text: str | bytes) -> Any:
    """The value :func:`dumps` wrote as ``text`` (UTF-8 bytes or a string)."""
    raw: Any = _NONE
    try:   # the text as dumps writes it, read by the scanner; anything else by json.loads
        string = text if type(text) is str else text.decode("utf-8")   # type: ignore[union-attr]
        got, end = _SCAN(string, 0)
        if end == len(string):
            raw = got
    except (StopIteration, ValueError, AttributeError, RecursionError):
        pass
    if raw is _NONE:
        try:
            raw = json.loads(text)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise InvalidRecord(f"corrupt record: {type(exc).__name__}: {str(exc)[:200]}") from exc
    return decode(raw)

