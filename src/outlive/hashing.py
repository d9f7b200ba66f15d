"""Canonical content hashing, stable across processes, machines and Python versions.

Why not ``hash()`` or pickle: both vary between interpreters and runs. The canonical form is JSON
with sorted keys, no insignificant whitespace, UTF-8, hashed with SHA-256. Any JSON value is a
record value: None, booleans, 64-bit integers, strings, lists and dicts, and finite floats, which
are written in the number form of RFC 8785 (JSON Canonicalization Scheme), by the ``rfc8785``
package: the shortest text that reads back as the same double, so ``1.0`` and ``1`` are one
number and one hash. NaN and Infinity are not JSON numbers: refused, typed.

Values without a float are written by CPython's C JSON encoder (the usual case, kept fast);
their bytes are those of RFC 8785 except that keys are sorted by code point, not by UTF-16 unit
(the two orders differ only between characters above U+FFFF and those in U+E000..U+FFFF).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import math
from collections.abc import Callable
from typing import Any, Protocol

import rfc8785

from .errors import InvalidRecord

__all__ = ["MAX_DEPTH", "canonical", "check_json", "content_hash", "input_key", "short"]


class _Digest(Protocol):
    def hexdigest(self) -> str: ...


def _builtin_sha256() -> Callable[[bytes], _Digest]:
    """CPython's own SHA-256 (``_sha2`` from 3.12, ``_sha256`` before), else hashlib's.

    The same digest (checked here). Why: hashlib's is OpenSSL's, reached through its provider
    machinery, a long code path; a worker hashes a few short texts per step between two round
    trips to its engine, with the caches cold, and there the builtin one measured ~2 us less
    per hash inside a Restate handler (a step's three: its input, its key, its result id).
    Warm, in a loop, OpenSSL's is the faster: the gap is the path, not the arithmetic.
    """
    for module in ("_sha2", "_sha256"):
        try:
            fn: Callable[[bytes], _Digest] = importlib.import_module(module).sha256
        except (ImportError, AttributeError):
            continue
        if fn(b"outlive").hexdigest() == hashlib.sha256(b"outlive").hexdigest():
            return fn
    return hashlib.sha256


#: SHA-256 as outlive hashes: ``_SHA256(data).hexdigest()``.
_SHA256 = _builtin_sha256()


#: How deep a value may nest. Deeper values are refused (typed), never a RecursionError.
MAX_DEPTH = 100
_INT_LIMIT = 2 ** 63


def check_json(value: Any, path: str = "$") -> None:
    """Raise :class:`InvalidRecord` unless ``value`` is a canonical JSON value.

    None, booleans, integers of at most 64 bits, finite floats, valid Unicode strings,
    lists/tuples and dicts with string keys, nested at most :data:`MAX_DEPTH` deep: what every
    backend stores alike.
    """
    if not _json_ok(value, 0):
        _check(value, path, 0)   # finds the first bad item and names it


def _json_ok(value: Any, depth: int) -> bool:
    """True only for a value :func:`_check` accepts, without building a path per item (a value
    it answers no for is walked again by ``_check``, which decides and names the bad item).

    A float answers no here: a value with a float is checked by ``_check`` and written by
    :func:`_float_text`, so a yes also says the C encoder's text is the canonical one."""
    t = type(value)
    if t is str:
        return value.isascii() or _utf8(value)
    if value is None or t is bool:
        return True
    if t is int:
        return bool(-_INT_LIMIT <= value < _INT_LIMIT)
    if depth >= MAX_DEPTH:
        return False
    if t is dict:
        for k, v in value.items():
            if type(k) is not str or not (k.isascii() or _utf8(k)) or not _json_ok(v, depth + 1):
                return False
        return True
    if t is list or t is tuple:
        for v in value:
            if not _json_ok(v, depth + 1):
                return False
        return True
    return False


#: What :func:`_json_copy` answers for a value :func:`_json_ok` does not vouch for.
NOT_JSON: Any = object()


def _json_copy(value: Any, depth: int) -> Any:
    """``_clone.clone(value)`` if :func:`_json_ok` accepts ``value``, else :data:`NOT_JSON`:
    one walk that checks and copies (a value is checked and copied on its way into the ledger).

    Every dict and list is new, a tuple too when something in it was copied; scalars are shared.
    """
    t = type(value)
    if t is str:
        return value if value.isascii() or _utf8(value) else NOT_JSON
    if value is None or t is bool:
        return value
    if t is int:
        return value if -_INT_LIMIT <= value < _INT_LIMIT else NOT_JSON
    if depth >= MAX_DEPTH:
        return NOT_JSON
    if t is dict:
        out = {}
        for k, v in value.items():
            if type(k) is not str or not (k.isascii() or _utf8(k)):
                return NOT_JSON
            tv = type(v)
            if tv is str:
                if not (v.isascii() or _utf8(v)):
                    return NOT_JSON
            elif tv is int:
                if not -_INT_LIMIT <= v < _INT_LIMIT:
                    return NOT_JSON
            elif tv is not bool and v is not None:
                v = _json_copy(v, depth + 1)
                if v is NOT_JSON:
                    return NOT_JSON
            out[k] = v
        return out
    if t is list or t is tuple:
        items = []
        for v in value:
            c = _json_copy(v, depth + 1)
            if c is NOT_JSON:
                return NOT_JSON
            items.append(c)
        if t is list:
            return items
        return value if all(c is v for c, v in zip(items, value, strict=True)) else tuple(items)
    return NOT_JSON


def _utf8(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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
        if not math.isfinite(value):
            raise InvalidRecord(f"{path}: {value!r} is not a JSON number (NaN and Infinity have "
                                "no canonical form); send null or a string", path=path)
        return
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
    raise InvalidRecord(f"{path}: {type(value).__name__} is not a canonical JSON value"
                        f"{_fix_for(value)}", path=path)


def _fix_for(value: Any) -> str:
    """The one-line fix for a value that is not JSON but has a declared conversion to it.

    A dataclass or a pydantic model is refused rather than converted silently: a step restored
    from the journal gives back what was stored (a dict), so a conversion must be the caller's,
    visible where the value is made.
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return "; convert it first: dataclasses.asdict(value)"
    if callable(getattr(value, "model_dump", None)) and hasattr(type(value), "model_fields"):
        return "; convert it first: value.model_dump(mode='json')"
    if isinstance(value, (set, frozenset)):
        return "; convert it first: sorted(value)"
    return ""


#: Built once: ``json.dumps`` with non-default options builds a new encoder on every call.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
#: The C encoder ``_CANONICAL.encode`` builds on every call (with a dict of the objects it is in,
#: to refuse cycles), built once without that dict: :func:`check_json` has already refused any
#: value nested too deep, and a cycle is one.
_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)
_ENCODER = (_make_encoder(None, _CANONICAL.default, json.encoder.encode_basestring, None, ":", ",",
                          True, False, True) if _make_encoder is not None else None)


def _text_of(value: Any) -> str:
    """The canonical text of a value :func:`check_json` accepted: ``_CANONICAL.encode(value)``."""
    if type(value) is str:
        return json.encoder.encode_basestring(value)
    if _ENCODER is None:  # pragma: no cover
        return _CANONICAL.encode(value)
    return "".join(_ENCODER(value, 0))


def _float_text(value: Any) -> str:
    """The canonical text of a checked value that may hold floats: what ``_text_of`` writes,
    each float in RFC 8785's number form (``rfc8785.dumps`` of the float alone)."""
    t = type(value)
    if t is str:
        return _STRING(value)
    if value is None:
        return "null"
    if t is bool:
        return "true" if value else "false"
    if t is float:
        return rfc8785.dumps(value).decode("ascii")
    if t is int:
        return int.__repr__(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{_STRING(k)}:{_float_text(value[k])}" for k in sorted(value)) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join([_float_text(v) for v in value]) + "]"
    # subclasses (an IntEnum, a StrEnum), written as the C encoder writes them
    if isinstance(value, str):
        return _STRING(value)
    if isinstance(value, float):
        return rfc8785.dumps(float(value)).decode("ascii")
    return int.__repr__(value)


def canonical(value: Any) -> bytes:
    """The canonical byte form of a JSON value (raises InvalidRecord for anything else)."""
    if _json_ok(value, 0):
        return _text_of(value).encode("utf-8")
    _check(value, "$", 0)
    return _float_text(value).encode("utf-8")


def _canonical_text(value: Any) -> str:
    """The canonical text of a value already checked: the C encoder's unless it holds a float."""
    return _text_of(value) if _json_ok(value, 0) else _float_text(value)


def _short(value: Any, limit: int) -> bool:
    """True when the canonical text of ``value`` (checked, no float in it) surely has at most
    ``limit`` characters, told without writing it: a string, or a dict of strings, integers,
    booleans and None (a character is written as at most six: ``\\u001f``; a 64-bit integer as
    at most twenty). False: it may not; write it to know."""
    t = type(value)
    if t is str:
        return 6 * len(value) + 2 <= limit
    if t is not dict:
        return False
    n = 2
    for k, v in value.items():
        tv = type(v)
        if tv is str:
            n += 6 * (len(k) + len(v)) + 6
        elif tv is int or tv is bool or v is None:
            n += 6 * len(k) + 24
        else:
            return False
    return n <= limit


def _canonical_size(value: Any) -> int:
    """``len(canonical(value))`` for a value already checked (:func:`check_json`, or a command's
    field checks): the ledger sizes what it has just checked, so it does not check again."""
    text = _canonical_text(value)
    return len(text) if text.isascii() else len(text.encode("utf-8"))


#: :func:`content_hash` of strings hashed lately, by the exact string: a worker hashes the same
#: inputs (its version's parts) step after step. Cleared when the strings kept pass a million
#: characters.
_TEXT_HASHES: dict[str, str] = {}
_TEXT_HASHES_MAX_CHARS = 1 << 20
_text_hashes_chars = 0


#: :func:`content_hash` of exact ``int`` and exact ``float`` values hashed lately, by value, one
#: table per type (equal values of one of these types have one canonical text; an ``int`` and
#: the ``float`` equal to it may not: ``2 ** 62`` and ``2.0 ** 62``), and of None and the two
#: booleans. A step's scalar input is hashed where the step is named and again where it is keyed.
#: Cleared when full.
_INT_HASHES: dict[int, str] = {}
_FLOAT_HASHES: dict[float, str] = {}
_SCALAR_HASHES_MAX = 4096


def content_hash(value: Any) -> str:
    """SHA-256 of the canonical form, hex. Bytes are hashed as they are."""
    t = type(value)
    if t is str:
        digest = _TEXT_HASHES.get(value)
        if digest is None:
            digest = _SHA256(canonical(value)).hexdigest()
            _remember_text(value, digest)
        return digest
    if t is int:
        digest = _INT_HASHES.get(value)
        if digest is None:
            # the C encoder writes an exact int as its repr: the canonical text, unless the
            # value is beyond 64 bits (``canonical`` refuses it)
            digest = _SHA256(int.__repr__(value).encode("ascii") if -_INT_LIMIT <= value < _INT_LIMIT
                             else canonical(value)).hexdigest()
            if len(_INT_HASHES) >= _SCALAR_HASHES_MAX:
                _INT_HASHES.clear()
            _INT_HASHES[value] = digest
        return digest
    if t is float:
        digest = _FLOAT_HASHES.get(value)
        if digest is None:
            digest = _SHA256(canonical(value)).hexdigest()   # NaN and Infinity are refused
            if len(_FLOAT_HASHES) >= _SCALAR_HASHES_MAX:
                _FLOAT_HASHES.clear()
            _FLOAT_HASHES[value] = digest
        return digest
    if value is None or t is bool:
        return _FIXED_HASHES[value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _SHA256(bytes(value)).hexdigest()
    return _SHA256(canonical(value)).hexdigest()


_FIXED_HASHES: dict[Any, str] = {v: _SHA256(canonical(v)).hexdigest() for v in (None, True, False)}


def _remember_text(value: str, digest: str) -> None:
    global _text_hashes_chars
    if _text_hashes_chars + len(value) > _TEXT_HASHES_MAX_CHARS:
        _TEXT_HASHES.clear()
        _text_hashes_chars = 0
        if len(value) > _TEXT_HASHES_MAX_CHARS:
            return
    _TEXT_HASHES[value] = digest
    _text_hashes_chars += len(value)


#: Input keys computed lately, by their exact inputs. A worker derives a step's key and the
#: ledger derives it again to check the one the write carries: the second is found here. Only
#: true hashes are kept, under inputs made of exact ``str`` (equal means the same text), so a
#: forged key still differs from what is found. Cleared when full.
_KEYS: dict[tuple[str, tuple[tuple[str, str], ...]], str] = {}
_KEYS_MAX = 4096
#: The same memo by key: what a key computed lately was computed from (for the ledger's check of
#: a checked write's key, whose inputs are exact ``str`` already: see ``ledger._record_usual``).
_KEYED: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {}


def input_key(step: str, sources: dict[str, str]) -> str:
    """The key a journal entry is stored under: the step name plus its declared inputs' hashes."""
    if type(sources) is not dict:
        sources = dict(sorted(sources.items()))
    elif type(step) is str:
        items = tuple(sources.items())
        for k, v in items:
            if type(k) is not str or type(v) is not str:
                break
        else:
            memo = (step, items)
            key = _KEYS.get(memo)
            if key is None:
                # The canonical text of {"sources": sources, "step": step}, written directly.
                if len(items) == 1:     # the usual step: one input, nothing to sort
                    ((k, v),) = items
                    inner = f"{_STRING(k)}:{_STRING(v)}"
                else:
                    inner = ",".join([f"{_STRING(k)}:{_STRING(v)}" for k, v in sorted(items)])
                key = _sha256_text(f'{{"sources":{{{inner}}},"step":{_STRING(step)}}}')
                if key is None:   # not valid Unicode: the general path says why
                    return content_hash({"step": step, "sources": sources})
                if len(_KEYS) >= _KEYS_MAX:
                    _KEYS.clear()
                    _KEYED.clear()
                _KEYS[memo] = key
                _KEYED[key] = memo
            return key
    return content_hash({"step": step, "sources": sources})   # the canonical form sorts keys


#: How the canonical encoder writes a string (``ensure_ascii=False``): the same function.
_STRING = json.encoder.encode_basestring


def _sha256_text(text: str) -> str | None:
    """SHA-256 of ``text``'s UTF-8 bytes, hex; None if it is not valid Unicode."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return _SHA256(data).hexdigest()


def _result_hash(step: str, key: str, attempt: int) -> str:
    """``content_hash({"step": step, "key": key, "attempt": attempt})``: a result's id.

    Written as its canonical text directly (every step derives one, and the general path checks
    and encodes a dict for it); a value that is not a plain string or a 64-bit integer takes the
    general path, which checks it.
    """
    if (type(step) is str and type(key) is str and type(attempt) is int
            and -_INT_LIMIT <= attempt < _INT_LIMIT):
        # a key :func:`input_key` derived lately is a hex digest: written as it is, unescaped
        quoted = f'"{key}"' if key in _KEYED else _STRING(key)
        digest = _sha256_text(f'{{"attempt":{attempt},"key":{quoted},"step":{_STRING(step)}}}')
        if digest is not None:
            return digest
    return content_hash({"step": step, "key": key, "attempt": attempt})


def short(digest: str | None) -> str:
    """The first eight hex digits, as the article prints identifiers."""
    return "-" if digest is None else digest[:8]
