"""Copies that keep the ledger's state out of callers' reach, at the cost of what can change.

The ledger copies each command on the way in and each outcome on the way out, and stores copy a
state they hand out: nothing a caller holds may reach stored state, and nothing returned may
change it. ``copy.deepcopy`` does that for any object but pays for generality on every call
(a memo, ``__reduce_ex__``, a new object for every frozen record). Ledger values are narrower:
frozen records, tuples, enums, scalars, and JSON values (dicts, lists) inside them. So only
what can be changed in place is copied (every dict and list, at any depth); a frozen record
is rebuilt only when something inside it was, and shared otherwise. Anything else falls back to
``copy.deepcopy``.

Shared references inside a value (one dict reachable twice) become separate copies, as they do
once a value is stored as JSON; values are checked before they are copied, so a cycle never
gets here (it is refused as nested too deep).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from enum import Enum
from typing import Any, TypeVar, cast

__all__ = ["clone", "evolve", "maker", "quick_init"]

_SCALARS = frozenset({str, int, bool, float, bytes, type(None)})
#: Per record class: the names of its fields, or None if it is not a plain frozen dataclass.
_FIELDS: dict[type, tuple[str, ...] | None] = {}
#: Per class: whether :func:`evolve` may build it without ``__init__``.
_PLAIN: dict[type, bool] = {}
T = TypeVar("T")


def _fields(cls: type) -> tuple[str, ...] | None:
    names = _FIELDS.get(cls, ())
    if names == ():
        params = getattr(cls, "__dataclass_params__", None)
        ok = (dataclasses.is_dataclass(cls) and params is not None and params.frozen
              and not hasattr(cls, "__slots__") and "__deepcopy__" not in vars(cls))
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls)) if ok else None
    return names


def clone(value: Any) -> Any:
    """A copy of ``value`` sharing nothing that can change in place with the original."""
    t = type(value)
    if t in _SCALARS:
        return value
    if t is dict:
        for v in value.values():
            if type(v) not in _SCALARS:
                return {k: v if type(v) in _SCALARS else clone(v) for k, v in value.items()}
        return value.copy()   # every value a scalar: a shallow copy shares nothing that changes
    if t is list:
        return [v if type(v) in _SCALARS else clone(v) for v in value]
    if t is tuple:
        changed = False
        items = []
        for v in value:
            if type(v) in _SCALARS:
                items.append(v)
                continue
            c = clone(v)
            changed = changed or c is not v
            items.append(c)
        return tuple(items) if changed else value
    copier = _COPIERS.get(t)
    if copier is None:
        copier = _COPIERS[t] = _copier(t)
    return copier(value)


#: Per type met in a value: how to copy it (a record's compiled copier, or ``copy.deepcopy``).
_COPIERS: dict[type, Callable[[Any], Any]] = {}


def _same(value: Any) -> Any:
    return value


def _copier(t: type) -> Callable[[Any], Any]:
    """How :func:`clone` copies a ``t``: an enum member is shared, a plain frozen record by a
    function compiled for its class (each field named in its code: no loop over the field
    names, no look-up of them per call), anything else by ``copy.deepcopy``.

    A record's field holding a scalar is shared, anything else cloned; the record is rebuilt
    only if something inside it was copied, and shared otherwise (it is immutable)."""
    if issubclass(t, Enum):
        return _same
    names = _fields(t)
    if names is None or not all(n.isidentifier() for n in names):
        return copy.deepcopy
    lines = ["def copier(value):", "    a = value.__dict__"]
    for i, name in enumerate(names):
        lines.append(f"    x{i} = a[{name!r}]")
        lines.append(f"    y{i} = x{i} if type(x{i}) in S else CLONE(x{i})")
    same = " and ".join(f"y{i} is x{i}" for i in range(len(names))) or "True"
    lines.append(f"    if {same}:")
    lines.append("        return value")
    lines.append("    out = NEW(T)")
    lines.append("    d = out.__dict__")
    lines += [f"    d[{name!r}] = y{i}" for i, name in enumerate(names)]
    lines.append("    return out")
    env: dict[str, Any] = {"S": _SCALARS, "CLONE": clone, "NEW": object.__new__, "T": t}
    exec("\n".join(lines), env)   # the field names of a dataclass, identifiers (checked above)
    copier: Callable[[Any], Any] = env["copier"]
    return copier


def evolve(record: T, **changes: Any) -> T:
    """``dataclasses.replace`` for a frozen record whose new field values are known good.

    ``replace`` runs ``__init__`` (a frozen class sets each field through ``object.__setattr__``);
    the ledger and the stores, which only put values of the right type into records they built,
    skip that. Field names are checked, so a misspelt one is still an error; a class with a
    ``__post_init__`` goes through ``replace``.
    """
    t = type(record)
    plain = _PLAIN.get(t)
    if plain is None:
        plain = _PLAIN[t] = bool(_fields(t)) and not hasattr(t, "__post_init__")
    if not plain:
        return dataclasses.replace(record, **changes)  # type: ignore[type-var]
    fields = record.__dict__.copy()   # a copy, then set as the new record's dict: cheaper
    n = len(fields)                    # than filling the dict a new record makes itself
    fields.update(changes)
    if len(fields) != n:   # a name that is not a field: replace says which
        return dataclasses.replace(record, **changes)  # type: ignore[type-var]
    out = _NEW(t)
    _SET_ATTR(out, "__dict__", fields)
    return out


_NEW = object.__new__
_SET_ATTR = object.__setattr__


class _Factory:
    """The default of a field with a ``default_factory``, in a quick ``__init__``'s signature."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def quick_init(cls: type[T]) -> type[T]:
    """Give a frozen ``kw_only`` dataclass an ``__init__`` that fills its ``__dict__`` directly.

    The one ``dataclasses`` writes sets each field through ``object.__setattr__`` (the class
    refuses ``setattr``), about twice the cost; records are built several times per command.
    Same signature, defaults and default factories, same instance; a class this cannot serve as
    is (positional fields, ``__post_init__``, ``__slots__``, ``init=False`` fields) is left alone.
    """
    made = _body(cls)
    if made is None:
        return cls
    signature, factories, fills, env = made
    head = "def __init__(self, *, " + ", ".join(signature) + "):" if signature else "def __init__(self):"
    exec("\n".join([head, *factories, "    fields_ = self.__dict__", *fills, "    return None"]),
         env)   # identifiers of our own fields
    init = env["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__doc__ = vars(cls)["__init__"].__doc__
    init.__annotations__ = dict(vars(cls)["__init__"].__annotations__)
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


def maker(cls: type[T]) -> Callable[..., T]:
    """A function that builds a ``cls`` as ``cls(**fields)`` does (same keywords, defaults and
    factories, same instance): a plain call costs less than calling the class, which hands its
    keywords to ``__init__`` as a dict. For records built on every step; ``cls`` itself if
    :func:`quick_init` could not serve it."""
    made = _body(cls)
    if made is None:
        return cls
    signature, factories, fills, env = made
    env.update(NEW_=object.__new__, T_=cls)
    head = "def make(*, " + ", ".join(signature) + "):" if signature else "def make():"
    exec("\n".join([head, *factories, "    self = NEW_(T_)", "    fields_ = self.__dict__", *fills,
                     "    return self"]), env)   # identifiers of our own fields
    make: Callable[..., T] = env["make"]
    make.__qualname__ = make.__name__ = f"make_{cls.__name__}"
    return make


def _body(cls: type) -> tuple[list[str], list[str], list[str], dict[str, Any]] | None:
    """A quick ``__init__``'s signature, default-factory lines, field-filling lines and
    namespace for ``cls``; None for a class it cannot serve."""
    params = getattr(cls, "__dataclass_params__", None)
    fields = dataclasses.fields(cast(Any, cls)) if params is not None else ()
    if (params is None or not params.frozen or hasattr(cls, "__post_init__")
            or hasattr(cls, "__slots__") or "__init__" not in vars(cls)
            or any(not f.init or not f.kw_only or not f.name.isidentifier()
                   or f.name in ("self", "FACTORY", "fields_", "NEW_", "T_")
                   or f.name.startswith(("default_", "factory_")) for f in fields)):
        return None
    env: dict[str, Any] = {"FACTORY": _FACTORY}
    signature: list[str] = []
    factories: list[str] = []
    for f in fields:
        if f.default is not dataclasses.MISSING:
            env[f"default_{f.name}"] = f.default
            signature.append(f"{f.name}=default_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            env[f"factory_{f.name}"] = f.default_factory
            signature.append(f"{f.name}=FACTORY")
            factories.append(f"    if {f.name} is FACTORY:\n        {f.name} = factory_{f.name}()")
        else:
            signature.append(f.name)
    fills = [f"    fields_[{f.name!r}] = {f.name}" for f in fields]
    return signature, factories, fills, env
