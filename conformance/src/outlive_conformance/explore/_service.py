"""What the explorer page asks for, answered with the real harness: no HTTP here, only data.

A request names a scenario (a bundled one, a file given on the command line, or TOML text edited
on the page), the eight switches and a backend. The run always happens on ``memory://`` and, when
a configured backend is chosen, on that backend too, each under a fresh work id; the answer holds
both drawings, the outcome against the scenario's main run, the invariants, and the necessity
table from the 864-run sweep (on ``memory://``, cached per scenario) with this run's place in it.
Every failure is an answer too: a :class:`ExploreError` for the request as a whole (an invalid
scenario or switch), a per-backend error for a backend that is down.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from outlive import open_backend
from outlive.errors import OutliveError, ScenarioError

from ..harness import RunSummary, run_scenario
from ..scenario import SWITCHES, Scenario, Switches, parse_scenario, shipped
from ..sweep import PROTECTIONS, SweepResult, check_claims, necessity, sweep
from .timeline import render_timeline

__all__ = ["SWITCH_INFO", "ExploreError", "Explorer", "ScenarioSource"]

#: The article's words for each switch and its values, shown on the page.
SWITCH_INFO: dict[str, tuple[str, dict[str, str]]] = {
    "silent": ("What the silent worker was really doing",
               {"paused": "paused (it wakes later)", "crashed": "crashed (never returns)"}),
    "fencing": ("Fencing: stores check the owner token", {"on": "on", "off": "off"}),
    "progress": ("How often progress is saved",
                 {"step": "after every step", "end": "at the end of the attempt"}),
    "change": ("When the input changes",
               {"never": "never", "during": "during the attempt", "after": "after acceptance"}),
    "pins": ("Version pins: journal keyed by input, acceptance names a version",
             {"on": "on", "off": "off"}),
    "rule": ("The newsletter's admission rule",
             {"strict": "accepted for the current report", "accepted": "latest accepted",
              "finished": "latest finished"}),
    "dies": ("Whether the posting worker dies", {"yes": "yes, after the feed applies it",
                                                 "no": "no"}),
    "key": ("How the post is keyed",
            {"operation": "by operation", "attempt": "by attempt", "none": "no key"}),
}

#: The protections in the article's words (the sweep names them; see sweep.PROTECTIONS).
_PROTECTION_WORDS = {"fencing": "fencing", "pins": "version pins", "key": "the operation key",
                     "strict": "the strict newsletter rule"}

#: The measures compared with the main run, in the article's order.
_MEASURES: tuple[tuple[str, str], ...] = (
    ("model_calls", "model calls"),
    ("posts", "posts"),
    ("stale_writes_applied", "stale writes applied"),
    ("first_acceptance_tick", "first acceptance tick"),
    ("final_acceptance_tick", "final acceptance tick"),
    ("newsletter_start", "newsletter starts at tick"),
    ("newsletter_figure", "figure the newsletter quotes"),
    ("required_figure", "figure the report says now"),
    ("announcement_confirmed_at", "announcement confirmed at tick"),
)


#: Sweeps on memory:// are deterministic: one per scenario text serves every explorer in a process.
_SWEEPS: dict[str, tuple[SweepResult, RunSummary]] = {}
_SWEEPS_LOCK = threading.Lock()


class ExploreError(Exception):
    """A request the explorer cannot run (an invalid scenario, switch or backend choice)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True, kw_only=True)
class ScenarioSource:
    """A scenario the page can pick: its id, its TOML text and where it came from."""

    id: str
    text: str
    origin: str


@dataclass
class Explorer:
    """What the explorer offers: the scenarios, the backends beside memory://, a time limit."""

    scenarios: Sequence[ScenarioSource]
    backends: Sequence[str] = ()
    timeout: float = 120.0

    @classmethod
    def create(cls, scenario_files: Sequence[str | Path] = (), backends: Sequence[str] = (),
               timeout: float = 120.0) -> Explorer:
        """The shipped scenarios (q3-report first) plus ``scenario_files``, each validated now,
        so a bad file fails at start-up, not on the page."""
        folder = resources.files("outlive_conformance") / "scenarios"
        names = sorted(shipped(), key=lambda n: (n != "q3-report", n))
        sources = [ScenarioSource(id=n, text=(folder / f"{n}.toml").read_text(encoding="utf-8"),
                                  origin="shipped") for n in names]
        for path in scenario_files:
            p = Path(path)
            text = p.read_text(encoding="utf-8")
            parse_scenario(text, str(p))
            sources.append(ScenarioSource(id=str(p), text=text, origin=str(p)))
        extra = [b for b in dict.fromkeys(backends) if b != "memory://"]
        return cls(scenarios=sources, backends=extra, timeout=timeout)

    # -- what the page loads first ------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        out_scenarios = []
        for src in self.scenarios:
            sc = parse_scenario(src.text, src.origin)
            out_scenarios.append({"id": src.id, "name": sc.name, "origin": src.origin,
                                  "text": src.text, "defaults": sc.defaults.as_dict(),
                                  "change_at": sc.change_at, "work_id": sc.work_id})
        return {
            "scenarios": out_scenarios,
            "switches": [{"name": name, "title": SWITCH_INFO[name][0],
                          "values": [{"value": v, "label": SWITCH_INFO[name][1].get(v, v)}
                                     for v in values]}
                         for name, values in SWITCHES.items()],
            "backends": ["memory://", *self.backends],
        }

    # -- one request ---------------------------------------------------------------------------------
    def scenario_for(self, request: Mapping[str, Any]) -> tuple[Scenario, str]:
        """The request's scenario and the text it was parsed from."""
        text = request.get("toml")
        if isinstance(text, str) and text.strip():
            source = "scenario edited on the page"
        else:
            wanted = request.get("scenario", "q3-report")
            found = [s for s in self.scenarios if s.id == wanted]
            if not found:
                raise ExploreError("ScenarioError", f"no scenario {wanted!r} is on offer; "
                                   f"choose one of {', '.join(s.id for s in self.scenarios)}")
            text, source = found[0].text, found[0].origin
        try:
            return parse_scenario(text, source), text
        except ScenarioError as exc:
            raise ExploreError("ScenarioError", exc.message) from exc

    def run(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Answer one page request (blocking; the server calls it from a worker thread)."""
        scenario, text = self.scenario_for(request)
        raw = request.get("switches") or {}
        if not isinstance(raw, Mapping):
            raise ExploreError("ScenarioError", "switches must be an object of name: value")
        unknown = sorted(set(raw) - set(SWITCHES))
        if unknown:
            raise ExploreError("ScenarioError", f"unknown switches {unknown}; "
                               f"switches: {', '.join(SWITCHES)}")
        try:
            sw = scenario.defaults.set(**{str(k): str(v) for k, v in raw.items()})
        except ScenarioError as exc:
            raise ExploreError("ScenarioError", exc.message) from exc
        backend = str(request.get("backend") or "memory://")
        if backend != "memory://" and backend not in self.backends:
            raise ExploreError("ConfigError", f"backend {backend!r} is not configured; start the "
                               "explorer with --backend URL to offer it")
        swept, main = self._sweep(text, scenario)
        this, mem = self._one(scenario, sw, "memory://")
        runs = [mem]
        agreement = None
        if backend != "memory://":
            other, answer = self._one(scenario, sw, backend)
            runs.append(answer)
            if this is not None and other is not None:
                agreement = _agreement(this.comparable(), other.comparable())
        if this is None:     # memory:// itself failed: a bug, but still an answer for the page
            raise ExploreError(mem["error"]["type"], mem["error"]["message"])
        return {
            "scenario": scenario.name,
            "switches": sw.as_dict(),
            "is_main": sw == scenario.defaults,
            "runs": runs,
            "agreement": agreement,
            "against_main": [{"measure": label, "this": getattr(this, name),
                              "main": getattr(main, name),
                              "same": getattr(this, name) == getattr(main, name)}
                             for name, label in _MEASURES],
            "invariants": this.invariants,
            "necessity": _necessity(swept, sw, this),
            "neighbours": _neighbours(swept, sw),
        }

    @staticmethod
    def _sweep(text: str, scenario: Scenario) -> tuple[SweepResult, RunSummary]:
        """The 864-run sweep of this scenario on memory:// and its main run (computed once)."""
        key = hashlib.sha256(text.encode()).hexdigest()
        with _SWEEPS_LOCK:
            if key not in _SWEEPS:
                async def both() -> tuple[SweepResult, RunSummary]:
                    res = await sweep(await open_backend("memory://"), scenario, concurrency=8,
                                      namespace="explore")
                    return res, res.by_switches(scenario.defaults)
                _SWEEPS[key] = asyncio.run(both())
            return _SWEEPS[key]

    def _one(self, scenario: Scenario, sw: Switches, url: str
             ) -> tuple[RunSummary | None, dict[str, Any]]:
        """One run on ``url`` under a fresh work id: its summary (None if it failed) and what
        the page shows of it."""
        async def go() -> RunSummary:
            backend = await open_backend(url)
            try:
                work_id = f"explore/{uuid.uuid4().hex[:12]}/{scenario.work_id}"
                return await run_scenario(backend, scenario, sw, work_id=work_id)
            finally:
                await backend.close()

        try:
            s = asyncio.run(asyncio.wait_for(go(), self.timeout))
        except OutliveError as exc:
            return None, {"backend": url, "ok": False,
                          "error": {"type": type(exc).__name__, "message": exc.message}}
        except TimeoutError:
            return None, {"backend": url, "ok": False, "error": {
                "type": "Timeout", "message": f"no answer from {url} within {self.timeout:.0f} s"}}
        except Exception as exc:   # an engine's own error: shown on the page, never a blank page
            return None, {"backend": url, "ok": False,
                          "error": {"type": type(exc).__name__, "message": str(exc) or repr(exc)}}
        return s, {
            "backend": url, "ok": True, "clean": s.clean, "broken": list(s.broken),
            "svg": render_timeline(s, scenario, backend=url),
            "trace": [{"tick": e.tick, "kind": e.kind, "lane": e.lane, "mark": e.mark,
                       "text": e.text} for e in s.trace],
            "outcome": {name: getattr(s, name) for name, _ in _MEASURES},
            "invariants": s.invariants,
        }


def _agreement(mem: Mapping[str, Any], other: Mapping[str, Any]) -> dict[str, Any]:
    diffs = [f"{k}: {mem.get(k)!r} on memory:// but {other.get(k)!r}" for k in mem
             if mem.get(k) != other.get(k)]
    return {"identical": not diffs, "differences": diffs[:8]}


def _necessity(swept: SweepResult, sw: Switches, this: RunSummary) -> dict[str, Any]:
    """The sweep's necessity table (one protection removed at a time), and this run's row."""
    claims = check_claims(swept)
    judged = {c.name.removesuffix("-needed"): c for c in claims if not c.must}
    removed = [name for name, switch, on in PROTECTIONS if getattr(sw, switch) != on]
    rows = []
    for n in necessity(swept):
        here = removed == [n.protection]
        when = n.breaks_when
        claim = judged.get(n.protection)
        rows.append({
            "protection": n.protection, "words": _PROTECTION_WORDS.get(n.protection, n.protection),
            "described": n.described, "broken": n.broken, "runs": n.runs,
            "claim": None if claim is None else {"text": claim.text, "holds": claim.holds},
            "here": here,
            # does this run's story fall where the sweep found the removal breaks runs?
            "in_breaking_story": (None if not here or when is None else
                                  all(getattr(sw, k) in v for k, v in when.items())),
        })
    prot = [r for s, r in ((Switches(**r.switches), r) for r in swept.runs.values()) if s.protected]
    verdict = "clean" if this.clean else "broken"
    if not removed:
        place = (f"all four protections are on: this run is one of the {len(prot)} protected runs, "
                 f"and it is {verdict}")
    elif len(removed) == 1:
        place = (f"only {_PROTECTION_WORDS.get(removed[0], removed[0])} is off: this run is in "
                 f"that row, and it is {verdict}")
    else:
        place = (f"{len(removed)} protections are off ({', '.join(removed)}): outside the table, "
                 f"which removes one at a time; this run is {verdict}")
    return {
        "rows": rows,
        "protected": {"runs": len(prot), "clean": sum(1 for r in prot if r.clean)},
        "claims": [{"name": c.name, "text": c.text, "holds": c.holds, "detail": c.detail,
                    "must": c.must} for c in claims],
        "place": place, "removed": removed,
        "total": len(swept.runs), "clean": sum(1 for r in swept.runs.values() if r.clean),
    }


def _neighbours(swept: SweepResult, sw: Switches) -> list[dict[str, Any]]:
    """What flipping one switch of this run would give, read from the sweep."""
    out = []
    for name, values in SWITCHES.items():
        for value in values:
            if getattr(sw, name) == value:
                continue
            r = swept.by_switches(sw.set(**{name: value}))
            out.append({"switch": name, "value": value, "clean": r.clean,
                        "model_calls": r.model_calls, "posts": r.posts,
                        "stale_writes_applied": r.stale_writes_applied,
                        "newsletter_figure": r.newsletter_figure, "broken": list(r.broken)})
    return out
