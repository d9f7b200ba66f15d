"""The scenario file format, its validation, and the eight switches.

A scenario is TOML (see ``scenarios/q3-report.toml`` and docs/conformance.md). Every problem is a
:class:`~outlive.errors.ScenarioError` that names the file, the field and what is wrong, and no
half-read scenario is ever returned.
"""

from __future__ import annotations

import difflib
import itertools
import re
import string
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any

from outlive.errors import ScenarioError
from outlive.hashing import canonical
from outlive.ledger import MAX_PAYLOAD_BYTES

__all__ = [
    "NEEDS",
    "SILENT_POINTS",
    "STEPLESS_POINTS",
    "SWITCHES",
    "Change",
    "Silence",
    "Consumer",
    "Scenario",
    "Switches",
    "all_switches",
    "find_scenario",
    "load_scenario",
    "shipped",
    "q3_report",
]

#: Switch name -> allowed values; the first value listed is not special, the file sets defaults.
SWITCHES: dict[str, tuple[str, ...]] = {
    "silent": ("paused", "crashed"),
    "fencing": ("on", "off"),
    "progress": ("step", "end"),
    "change": ("never", "during", "after"),
    "pins": ("on", "off"),
    "rule": ("strict", "accepted", "finished"),
    "dies": ("yes", "no"),
    "key": ("operation", "attempt", "none"),
}


@dataclass(frozen=True, kw_only=True)
class Switches:
    """The eight switches of the article's interactive: 2*2*2*3*2*3*2*3 = 864 combinations."""

    silent: str = "paused"
    fencing: str = "on"
    progress: str = "step"
    change: str = "during"
    pins: str = "on"
    rule: str = "strict"
    dies: str = "yes"
    key: str = "operation"

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value not in SWITCHES[f.name]:
                raise ScenarioError(
                    f"switch {f.name}={value!r}: expected one of {', '.join(SWITCHES[f.name])}",
                    field=f.name, value=value,
                )

    def set(self, **changes: str) -> Switches:
        return replace(self, **changes)

    def as_dict(self) -> dict[str, str]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def label(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.as_dict().items())

    @property
    def protected(self) -> bool:
        """Fencing, pins, the operation key and the strict rule all on."""
        return (self.fencing == "on" and self.pins == "on" and self.key == "operation"
                and self.rule == "strict")


def all_switches() -> Iterator[Switches]:
    names = list(SWITCHES)
    for combo in itertools.product(*(SWITCHES[n] for n in names)):
        yield Switches(**dict(zip(names, combo, strict=True)))


#: Where a silent attempt falls silent: within a step (before its model call, after the call and
#: before the record, after the record), after assembling its candidate, or within its first post
#: (after recording the intent and before sending; after the send and before recording it).
SILENT_POINTS = ("before-call", "after-call", "after-record", "after-candidate", "after-intent",
                 "after-send")
#: The points that are not within a step (a silence there names no step).
STEPLESS_POINTS = ("after-candidate", "after-intent", "after-send")


@dataclass(frozen=True, kw_only=True)
class Silence:
    """One attempt falling silent (paused or crashed, by the ``silent`` switch) at one point."""

    attempt: int
    step: str | None          # None for the points after a step (``STEPLESS_POINTS``)
    point: str
    wake_at: int              # when a paused attempt wakes (a crashed one never does)
#: What a consumer needs: the current input, a named version, or (relaxed) the latest result.
NEEDS = ("current", "latest-accepted", "latest-finished")


@dataclass(frozen=True, kw_only=True)
class Change:
    """A further input change, ``after`` ticks after the previous one (the switch's is the first)."""

    version: str
    after: int


@dataclass(frozen=True, kw_only=True)
class Consumer:
    """A dependant: the main one (``[consumer]``) checks with the ``rule`` switch; each of
    ``[[consumers]]`` checks with its own ``needs`` (``current``, ``version:NAME``,
    ``latest-accepted``, ``latest-finished``)."""

    name: str
    ready_at: int
    quotes: str
    pattern: str
    needs: str
    fail_open: bool
    #: How the figure reads in prose ("4.7 million"); empty for a bare figure.
    unit: str = ""

    def says(self, figure: str | None) -> str:
        return f"{figure} {self.unit}" if self.unit and figure is not None else str(figure)


@dataclass(frozen=True, kw_only=True)
class Scenario:
    name: str
    work_id: str
    description: str
    epoch_floor: int
    versions: dict[str, dict[str, str]]
    steps: tuple[str, ...]
    first_version: str
    title: str
    announce: str
    max_summary_chars: int
    contract: dict[str, str]
    heartbeat_every: int
    missed_beats: int
    max_ticks: int
    silent_attempt: int
    silent_step: str
    wake_at: int
    new_version: str
    change_at: dict[str, int]
    poster_dies: str
    consumer: Consumer
    defaults: Switches
    source: str
    #: Where the silent attempt falls silent: before the step's model call, after the call (the
    #: article's run), or after the step's journal write.
    silent_point: str = "after-call"
    #: Further input changes after the switch's change (none when the switch says ``never``).
    then: tuple[Change, ...] = ()
    #: Consumers beside the main one, each with its own need.
    consumers: tuple[Consumer, ...] = ()
    #: How long the receiver keeps an operation key, in ticks (None: for ever).
    retention: int | None = None
    #: Which posting attempts die after the receiver applied their post (1 = the first).
    poster_dies_at: tuple[int, ...] = (1,)
    #: Further silences beside the timeline's own (``[[timeline.silences]]``).
    more_silences: tuple[Silence, ...] = ()

    @property
    def silences(self) -> tuple[Silence, ...]:
        """Every silence of the story: the timeline's own first, then the further ones."""
        first = Silence(attempt=self.silent_attempt,
                        step=None if self.silent_point in STEPLESS_POINTS else self.silent_step,
                        point=self.silent_point, wake_at=self.wake_at)
        return (first, *self.more_silences)
    #: What the author derived on paper: protection -> the story settings under which removing it
    #: (all others on) breaks exactly the runs that break. None: the sweep reports, not judges.
    expect_necessity: dict[str, dict[str, Any]] | None = None

    def figure(self, version: str, consumer: Consumer | None = None) -> str | None:
        """The figure ``consumer`` (default: the main one) would quote from ``version``."""
        c = consumer or self.consumer
        m = re.search(c.pattern, self.versions[version][c.quotes])
        return m.group(1) if m else None


#: Every table of the format and the keys it may hold (``None``: free keys, e.g. version names).
#: Unknown keys are refused with a suggestion, so a misspelled optional field never passes silently.
_SCHEMA: dict[str, frozenset[str] | None] = {
    "": frozenset({"format", "name", "work_id", "description", "epoch_floor", "versions", "work",
                   "clock", "timeline", "consumer", "consumers", "receiver", "switches", "expect"}),
    "versions": None,
    "work": frozenset({"steps", "first_version", "title", "announce", "max_summary_chars", "contract"}),
    "work.contract": frozenset({"name", "version", "assessor"}),
    "clock": frozenset({"heartbeat_every", "missed_beats", "max_ticks"}),
    "timeline": frozenset({"silent_attempt", "silent_step", "silent_point", "wake_at", "new_version",
                           "change_at", "then", "poster_dies", "silences"}),
    "receiver": frozenset({"retention"}),
    "timeline.change_at": frozenset({"during", "after"}),
    "consumer": frozenset({"name", "ready_at", "quotes", "pattern", "unit", "needs", "fail_open"}),
    "switches": frozenset(SWITCHES),
    "expect": frozenset({"necessity"}),
    # arrays of tables: each entry is checked against these keys
    "consumers[]": frozenset({"name", "ready_at", "quotes", "pattern", "unit", "needs"}),
    "timeline.then[]": frozenset({"version", "after"}),
    "timeline.silences[]": frozenset({"attempt", "step", "point", "wake_at"}),
    "expect.necessity": frozenset({"fencing", "pins", "key", "strict"}),
}

#: Bounds that keep a run finite and its records under the ledger's payload limit.
_MAX_TICKS = 10_000
_MAX_SUMMARY_CHARS = 10_000
_MAX_EPOCH_FLOOR = 2**53
_ANNOUNCE_FIELDS = frozenset({"work_id", "digest"})


def _suggest(word: str, known: frozenset[str] | set[str]) -> str:
    close = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(sorted(known))}"


class _Reader:
    def __init__(self, source: str, data: Mapping[str, Any]) -> None:
        self.source = source
        self.data = data

    def fail(self, field: str, problem: str) -> ScenarioError:
        return ScenarioError(f"{self.source}: field {field!r}: {problem}", file=self.source,
                             field=field)

    def check_keys(self) -> None:
        """Refuse every key the format does not know, naming the nearest known one."""
        for path, known in _SCHEMA.items():
            if path.endswith("[]"):
                self.check_entries(path[:-2], known or frozenset())
                continue
            table = self.data if not path else self.table(path, required=False)
            if known is None or not isinstance(table, Mapping):
                continue
            for key in table:
                if key not in known:
                    where = f"{path}.{key}" if path else key
                    raise self.fail(where, f"unknown field{_suggest(key, known)}")

    def check_entries(self, path: str, known: frozenset[str]) -> None:
        table_path, _, key = path.rpartition(".")
        parent = self.data if not table_path else self.table(table_path, required=False)
        entries = parent.get(key) if isinstance(parent, Mapping) else None
        if entries is None:
            return
        if not isinstance(entries, list) or not all(isinstance(e, Mapping) for e in entries):
            raise self.fail(path, "must be an array of tables ([[...]])")
        for i, entry in enumerate(entries):
            for k in entry:
                if k not in known:
                    raise self.fail(f"{path}[{i}].{k}", f"unknown field{_suggest(k, known)}")

    def entry(self, path: str, i: int, key: str, kind: type, *, default: Any = ...) -> Any:
        table_path, _, name = path.rpartition(".")
        parent = self.data if not table_path else self.table(table_path)
        entry = parent[name][i]
        where = f"{path}[{i}].{key}"
        if key not in entry:
            if default is not ...:
                return default
            raise self.fail(where, "is missing")
        value = entry[key]
        if (kind is int and isinstance(value, bool)) or not isinstance(value, kind):
            raise self.fail(where, f"must be {kind.__name__}, not {type(value).__name__}")
        return value

    def missing(self, path: str) -> ScenarioError:
        table_path, _, key = path.rpartition(".")
        known = _SCHEMA.get(table_path)
        hint = f" (the format names it {key!r}: check its spelling)" if known and key in known else ""
        return self.fail(path, f"is missing{hint}")

    def table(self, path: str, *, required: bool = True) -> Mapping[str, Any]:
        node: Any = self.data
        for part in path.split("."):
            if not isinstance(node, Mapping) or part not in node:
                if not required:
                    return {}
                raise self.missing(path)
            node = node[part]
        if not isinstance(node, Mapping):
            raise self.fail(path, f"must be a table, not {type(node).__name__}")
        return node

    def get(self, path: str, kind: type, *, default: Any = ...) -> Any:
        table_path, _, key = path.rpartition(".")
        table = self.table(table_path) if table_path else self.data
        if key not in table:
            if default is not ...:
                return default
            raise self.missing(path)
        value = table[key]
        if kind is int and isinstance(value, bool):
            raise self.fail(path, "must be an integer, not a boolean")
        if not isinstance(value, kind):
            raise self.fail(path, f"must be {kind.__name__}, not {type(value).__name__}")
        return value


def _values(r: _Reader, path: str, sw_name: str, values: Any) -> tuple[str, ...]:
    if sw_name not in SWITCHES:
        raise r.fail(path, f"not a switch{_suggest(sw_name, set(SWITCHES))}")
    if (not isinstance(values, list) or not values
            or any(v not in SWITCHES[sw_name] for v in values)):
        raise r.fail(path, f"must be a non-empty list of {', '.join(SWITCHES[sw_name])}")
    return tuple(sorted(values))


def parse_scenario(text: str, source: str = "<string>") -> Scenario:
    """Parse and validate scenario TOML text."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{source}: not valid TOML: {exc}", file=source) from exc
    except RecursionError:
        # tomllib parses arrays and inline tables recursively: a file nested thousands deep
        # exhausts the stack while it is read (nothing else ran yet), a malformed file like any
        raise ScenarioError(f"{source}: nested too deep to be a scenario (arrays or inline "
                            "tables inside one another thousands of levels deep)",
                            file=source) from None
    r = _Reader(source, data)
    r.check_keys()
    fmt = r.get("format", int)
    if fmt != 1:
        raise r.fail("format", f"unsupported format {fmt}; this outlive reads format 1")
    versions_raw = r.table("versions")
    if len(versions_raw) < 1:
        raise r.fail("versions", "needs at least one version")
    versions: dict[str, dict[str, str]] = {}
    for vname in versions_raw:
        parts = r.table(f"versions.{vname}")
        if not parts:
            raise r.fail(f"versions.{vname}", "has no parts")
        versions[vname] = {p: r.get(f"versions.{vname}.{p}", str) for p in parts}
        size = len(canonical(versions[vname]))
        if size > MAX_PAYLOAD_BYTES:
            raise r.fail(f"versions.{vname}", f"is {size} bytes encoded; a published input version "
                         f"may be at most {MAX_PAYLOAD_BYTES} bytes")
    steps = r.get("work.steps", list)
    if not steps or not all(isinstance(s, str) and s for s in steps):
        raise r.fail("work.steps", "must be a non-empty list of part names")
    if len(set(steps)) != len(steps):
        raise r.fail("work.steps", "names a part twice")
    for vname, parts in versions.items():
        missing = [s for s in steps if s not in parts]
        if missing:
            raise r.fail(f"versions.{vname}", f"lacks parts {missing} named in work.steps")
    first = r.get("work.first_version", str)
    if first not in versions:
        raise r.fail("work.first_version", f"{first!r} is not a version")
    announce = r.get("work.announce", str)
    try:
        named = {f for _, f, _, _ in string.Formatter().parse(announce) if f is not None}
    except ValueError as exc:
        raise r.fail("work.announce", f"not a valid format string: {exc}") from exc
    if named - _ANNOUNCE_FIELDS:
        raise r.fail("work.announce", f"names {sorted(named - _ANNOUNCE_FIELDS)}; only {{work_id}} "
                     "and {digest} are known")
    try:
        announce.format(work_id="w", digest="d")
    except (ValueError, KeyError, IndexError, AttributeError) as exc:
        raise r.fail("work.announce", f"not a valid format string: {exc}") from exc
    if "digest" not in named:
        raise r.fail("work.announce", "must contain {digest}: the key names the operation")
    contract = {k: r.get(f"work.contract.{k}", str) for k in ("name", "version", "assessor")}
    new_version = r.get("timeline.new_version", str)
    if new_version not in versions:
        raise r.fail("timeline.new_version", f"{new_version!r} is not a version")
    change_raw = r.table("timeline.change_at")
    change_at: dict[str, int] = {}
    for k in ("during", "after"):
        v = r.get(f"timeline.change_at.{k}", int)
        if v < 0:
            raise r.fail(f"timeline.change_at.{k}", "must be >= 0")
        change_at[k] = v
    extra = set(change_raw) - {"during", "after"}
    if extra:
        raise r.fail("timeline.change_at", f"unknown keys {sorted(extra)}")
    silent_step = r.get("timeline.silent_step", str)
    if silent_step not in steps:
        raise r.fail("timeline.silent_step", f"{silent_step!r} is not in work.steps")
    poster_raw = r.table("timeline").get("poster_dies", "first")
    if poster_raw == "first":
        poster_dies, poster_dies_at = "first", (1,)
    elif (isinstance(poster_raw, list) and poster_raw
          and all(isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 100 for n in poster_raw)):
        poster_dies, poster_dies_at = "listed", tuple(sorted(set(poster_raw)))
    else:
        raise r.fail("timeline.poster_dies", "must be 'first' or a list of posting attempts that die "
                     "(1 = the first post, 2 = the retry, …; at most 100)")
    silent_point = r.get("timeline.silent_point", str, default="after-call")
    if silent_point not in SILENT_POINTS:
        raise r.fail("timeline.silent_point", f"must be one of {', '.join(SILENT_POINTS)}")
    quotes = r.get("consumer.quotes", str)
    if quotes not in steps:
        raise r.fail("consumer.quotes", f"{quotes!r} is not in work.steps")
    pattern = r.get("consumer.pattern", str)
    try:
        if re.compile(pattern).groups < 1:
            raise r.fail("consumer.pattern", "needs one capturing group: the quoted figure")
    except re.error as exc:
        raise r.fail("consumer.pattern", f"not a regular expression: {exc}") from exc
    for vname, parts in versions.items():
        m = re.search(pattern, parts[quotes])
        if m is None or m.group(1) is None:
            raise r.fail("consumer.pattern", f"finds no figure in {quotes!r} of version {vname!r}: "
                         "the consumer would quote nothing")
    needs = r.get("consumer.needs", str)
    if needs != "current":
        raise r.fail("consumer.needs", "only 'current' is supported")
    sw_raw = r.table("switches", required=False)
    unknown = set(sw_raw) - set(SWITCHES)
    if unknown:
        raise r.fail("switches", f"unknown switches {sorted(unknown)}; known: {list(SWITCHES)}")
    try:
        defaults = Switches(**{k: r.get(f"switches.{k}", str) for k in sw_raw})
    except ScenarioError as exc:
        raise r.fail(f"switches.{exc.details.get('field')}", exc.message) from exc
    ints = {}
    for path in ("clock.heartbeat_every", "clock.missed_beats", "clock.max_ticks",
                 "timeline.silent_attempt", "timeline.wake_at"):
        ints[path] = r.get(path, int)
        if ints[path] < 1:
            raise r.fail(path, "must be >= 1")
    max_ticks = ints["clock.max_ticks"]
    if max_ticks > _MAX_TICKS:
        raise r.fail("clock.max_ticks", f"must be <= {_MAX_TICKS}: a run is bounded")
    ready_at = r.get("consumer.ready_at", int)
    for path, value in (("consumer.ready_at", ready_at), ("timeline.wake_at", ints["timeline.wake_at"]),
                        ("clock.heartbeat_every", ints["clock.heartbeat_every"]),
                        *((f"timeline.change_at.{k}", v) for k, v in change_at.items())):
        if not 0 <= value < max_ticks:
            raise r.fail(path, f"must be between 0 and clock.max_ticks - 1 ({max_ticks - 1}), not {value}")
    max_summary_chars = r.get("work.max_summary_chars", int, default=280)
    if not 1 <= max_summary_chars <= _MAX_SUMMARY_CHARS:
        raise r.fail("work.max_summary_chars", f"must be between 1 and {_MAX_SUMMARY_CHARS}")
    epoch_floor = r.get("epoch_floor", int, default=0)
    if not 0 <= epoch_floor <= _MAX_EPOCH_FLOOR:
        raise r.fail("epoch_floor", f"must be between 0 and {_MAX_EPOCH_FLOOR}")
    for path in ("name", "work_id"):
        if not r.get(path, str).strip():
            raise r.fail(path, "must not be empty")
    consumer = Consumer(
        name=r.get("consumer.name", str), ready_at=ready_at, quotes=quotes,
        pattern=pattern, needs=needs, fail_open=r.get("consumer.fail_open", bool, default=False),
        unit=r.get("consumer.unit", str, default=""),
    )
    then: list[Change] = []
    for i in range(len(r.table("timeline").get("then", []))):
        version = r.entry("timeline.then", i, "version", str)
        if version not in versions:
            raise r.fail(f"timeline.then[{i}].version", f"{version!r} is not a version")
        after = r.entry("timeline.then", i, "after", int)
        if not 1 <= after < max_ticks:
            raise r.fail(f"timeline.then[{i}].after", f"must be between 1 and {max_ticks - 1}")
        then.append(Change(version=version, after=after))
    silences: list[Silence] = []
    seen = {(ints["timeline.silent_attempt"],
             silent_point if silent_point in STEPLESS_POINTS else silent_step)}
    for i in range(len(r.table("timeline").get("silences", []))):
        where = f"timeline.silences[{i}]"
        point = r.entry("timeline.silences", i, "point", str)
        if point not in SILENT_POINTS:
            raise r.fail(f"{where}.point", f"must be one of {', '.join(SILENT_POINTS)}")
        attempt = r.entry("timeline.silences", i, "attempt", int)
        if not 1 <= attempt <= 100:
            raise r.fail(f"{where}.attempt", "must be between 1 and 100")
        step: str | None = None
        if point not in STEPLESS_POINTS:
            step = r.entry("timeline.silences", i, "step", str)
            if step not in steps:
                raise r.fail(f"{where}.step", f"{step!r} is not in work.steps")
        elif "step" in r.table("timeline").get("silences", [])[i]:
            raise r.fail(f"{where}.step", f"a silence {point} names no step")
        place = point if step is None else step
        if (attempt, place) in seen:
            raise r.fail(where, f"attempt {attempt} already falls silent there")
        seen.add((attempt, place))
        wake = r.entry("timeline.silences", i, "wake_at", int)
        if not 0 <= wake < max_ticks:
            raise r.fail(f"{where}.wake_at", f"must be between 0 and {max_ticks - 1}")
        silences.append(Silence(attempt=attempt, step=step, point=point, wake_at=wake))
    more: list[Consumer] = []
    for i in range(len(r.data.get("consumers", []))):
        name = r.entry("consumers", i, "name", str)
        if name == consumer.name or any(c.name == name for c in more):
            raise r.fail(f"consumers[{i}].name", f"{name!r} names another consumer")
        c_quotes = r.entry("consumers", i, "quotes", str, default=consumer.quotes)
        if c_quotes not in steps:
            raise r.fail(f"consumers[{i}].quotes", f"{c_quotes!r} is not in work.steps")
        c_pattern = r.entry("consumers", i, "pattern", str, default=consumer.pattern)
        try:
            ok = re.compile(c_pattern).groups >= 1 and all(
                (m := re.search(c_pattern, v[c_quotes])) is not None and m.group(1) is not None
                for v in versions.values())
        except re.error as exc:
            raise r.fail(f"consumers[{i}].pattern", f"not a regular expression: {exc}") from exc
        if not ok:
            raise r.fail(f"consumers[{i}].pattern", "needs one capturing group that finds a figure "
                         f"in {c_quotes!r} of every version")
        c_needs = r.entry("consumers", i, "needs", str)
        pinned = c_needs.removeprefix("version:")
        if c_needs not in NEEDS and not (c_needs.startswith("version:") and pinned in versions):
            raise r.fail(f"consumers[{i}].needs", f"must be one of {', '.join(NEEDS)} or "
                         f"version:NAME with NAME one of {', '.join(versions)}")
        c_ready = r.entry("consumers", i, "ready_at", int)
        if not 0 <= c_ready < max_ticks:
            raise r.fail(f"consumers[{i}].ready_at", f"must be between 0 and {max_ticks - 1}")
        more.append(Consumer(name=name, ready_at=c_ready, quotes=c_quotes, pattern=c_pattern,
                              needs=c_needs, fail_open=False,
                              unit=r.entry("consumers", i, "unit", str, default=consumer.unit)))
    retention: int | None = None
    if "retention" in r.table("receiver", required=False):
        retention = r.get("receiver.retention", int)
        if not 0 <= retention < max_ticks:
            raise r.fail("receiver.retention", f"must be between 0 and {max_ticks - 1} ticks")
    expect_necessity: dict[str, dict[str, Any]] | None = None
    if "necessity" in r.table("expect", required=False):
        expect_necessity = {}
        for prot, when in r.table("expect.necessity").items():
            path = f"expect.necessity.{prot}"
            if not isinstance(when, Mapping):
                raise r.fail(path, "must be a table of story switch -> list of values ({} = every run)")
            cond: dict[str, Any] = {}
            for sw_name, values in when.items():
                if "=" in sw_name:        # one value of the removed switch: its own description
                    own, _, val = sw_name.partition("=")
                    if own not in SWITCHES or val not in SWITCHES[own] or not isinstance(values, Mapping):
                        raise r.fail(f"{path}.{sw_name}", "must be SWITCH=VALUE = { story switch = "
                                     "[values] } with a known switch and value")
                    cond[sw_name] = {k: _values(r, f"{path}.{sw_name}.{k}", k, v)
                                     for k, v in values.items()}
                    continue
                cond[sw_name] = _values(r, f"{path}.{sw_name}", sw_name, values)
            expect_necessity[prot] = cond
    return Scenario(
        name=r.get("name", str), work_id=r.get("work_id", str),
        description=r.get("description", str, default=""),
        epoch_floor=epoch_floor, versions=versions, steps=tuple(steps),
        first_version=first, title=r.get("work.title", str, default=""), announce=announce,
        max_summary_chars=max_summary_chars, contract=contract,
        heartbeat_every=ints["clock.heartbeat_every"], missed_beats=ints["clock.missed_beats"],
        max_ticks=ints["clock.max_ticks"], silent_attempt=ints["timeline.silent_attempt"],
        silent_step=silent_step, wake_at=ints["timeline.wake_at"], new_version=new_version,
        change_at=change_at, poster_dies=poster_dies, consumer=consumer, defaults=defaults,
        source=source, expect_necessity=expect_necessity, silent_point=silent_point,
        then=tuple(then), consumers=tuple(more), more_silences=tuple(silences), retention=retention,
        poster_dies_at=poster_dies_at,
    )


def load_scenario(path: str | Path) -> Scenario:
    """Load a scenario file; errors name the file, the field and the problem."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{p}: cannot read scenario: {exc}", file=str(p)) from exc
    return parse_scenario(text, str(p))


def shipped() -> tuple[str, ...]:
    """Names of the scenarios that ship with the package."""
    folder = resources.files("outlive_conformance") / "scenarios"
    return tuple(sorted(f.name.removesuffix(".toml") for f in folder.iterdir()
                        if f.name.endswith(".toml")))


def find_scenario(name_or_path: str) -> Scenario:
    """A shipped scenario by name (``q3-report``, ``late-newsletter``), else a file path."""
    name = "q3-report" if name_or_path == "q3" else name_or_path
    if name in shipped():
        ref = resources.files("outlive_conformance") / "scenarios" / f"{name}.toml"
        return parse_scenario(ref.read_text(encoding="utf-8"), f"{name}.toml")
    return load_scenario(name_or_path)


def q3_report() -> Scenario:
    """The seed's ``digest/q3-report`` scenario, shipped with the package."""
    ref = resources.files("outlive_conformance") / "scenarios" / "q3-report.toml"
    return parse_scenario(ref.read_text(encoding="utf-8"), "q3-report.toml")
