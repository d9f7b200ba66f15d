"""How the CLI shows records to a person and to a program: text, plain JSON, human times.

The ledger stores times as integers from its clock: wall-clock milliseconds in production, small
logical ticks in the conformance runs and the demo. Both are shown as a person reads them
(``2026-11-30 16:01:07.123Z`` / ``t10``), in text and in JSON alike.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from enum import Enum
from typing import Any

from .hashing import short
from .records import WorkState

__all__ = ["TIME_FIELDS", "human_time", "plain", "state_lines", "work_row"]

#: Record fields that hold a clock reading.
TIME_FIELDS = frozenset({"at", "admitted_at", "last_heartbeat", "intended_at", "confirmed_at"})

#: Readings below this are logical ticks; above, milliseconds since the epoch (after March 1973).
_WALL_CLOCK_FROM = 10**11


def human_time(value: int | None) -> str | None:
    """``t10`` for a logical tick, an ISO-8601 UTC time for wall-clock milliseconds."""
    if value is None:
        return None
    if abs(value) < _WALL_CLOCK_FROM:
        return f"t{value}"
    when = dt.datetime.fromtimestamp(value / 1000, tz=dt.UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def plain(value: Any, field: str | None = None) -> Any:
    """Records as plain JSON data: objects, lists, strings and numbers; no type tags."""
    if field in TIME_FIELDS and (value is None or isinstance(value, int)):
        return human_time(value)
    if isinstance(value, Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name), f.name) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return value


def work_row(st: WorkState) -> dict[str, Any]:
    """One line of ``outlive list``: where a work stands."""
    cur = st.current_attempt
    acc = st.latest_acceptance
    return {
        "work_id": st.work_id,
        "epoch": st.epoch,
        "current_version": st.current_version,
        "attempts": len(st.attempts),
        "current_attempt": None if cur is None else {"number": cur.number, "state": cur.state.value,
                                                     "last_heartbeat": human_time(cur.last_heartbeat)},
        "accepted": None if acc is None else {"digest": short(acc.digest), "version": acc.version,
                                              "at": human_time(acc.at)},
        "effects": {e.op_key: e.state.value for e in st.effects},
    }


def state_lines(st: WorkState, out: Callable[[str], None]) -> None:
    """The five records of one work, each under the party that checks it."""
    t = human_time
    out(f"work {st.work_id}: epoch {st.epoch}, current input {st.current_version}, "
        f"policy fencing={'on' if st.policy.fencing else 'off'} "
        f"pins={'on' if st.policy.pins else 'off'}")
    if st.failure is not None:
        out(f"  FAILED: {st.failure.type}: {st.failure.message}")
        for line in st.failure.traceback.rstrip().splitlines()[-6:]:
            out(f"    {line}")
    out("  inputs")
    for v in st.inputs:
        out(f"    {v.version}  parts {', '.join(f'{k}={short(h)}' for k, h in v.parts.items())}"
            f"  published {t(v.at)}")
    out("  attempts (checked by the controller)")
    for a in st.attempts:
        out(f"    #{a.number}  token {a.token}  pinned {a.pinned_version}  {a.state.value}  "
            f"admitted {t(a.admitted_at)}  last sign of life {t(a.last_heartbeat)}")
        if a.error is not None:
            out(f"      raised {a.error.type}: {a.error.message}"
                + ("" if a.error.retryable else "  (not retryable)"))
    out("  journal (checked by the successor: restore only on a matching input key)")
    for e in st.journal:
        stale = "  STALE" if e.stale else ""
        out(f"    {e.step:<4} key {short(e.input_key) if e.input_key else '-':<8}  "
            f"result {short(e.result_id)}  by #{e.attempt}{stale}")
    out("  candidates")
    for c in st.candidates:
        out(f"    {short(c.digest)}  for {c.version}  by #{c.attempt}  {t(c.at)}"
            + ("  STALE" if c.stale else ""))
    out("  acceptances (append-only; later ones supersede)")
    for acc in st.acceptances:
        out(f"    {short(acc.digest)}  for {acc.version}  under {acc.contract.name}@"
            f"{acc.contract.version} ({acc.contract.assessor})  {t(acc.at)}")
    out("  effects (checked by the receiver, keyed by operation)")
    for ef in st.effects:
        r = ef.receipt
        got = f"{r.effect_id}{' (already seen)' if r.duplicate else ''}" if r else "-"
        out(f"    {ef.op_key}  {ef.state.value}  receipt {got}  sends {ef.sends}")
