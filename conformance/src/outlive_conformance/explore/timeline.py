"""One run drawn as an SVG timeline: ticks down the side, a lane per party across the top.

The same drawing serves the explorer page and ``outlive run --svg FILE``, so what a person sees
in the browser is what the docs and CI artifacts show. It is built only from the run's structured
trace (:class:`~outlive_conformance.harness.TraceEvent`) and the scenario, never from the prose.
Every item carries its full sentence as a tooltip and its mark, lane and tick as attributes, so a
test (or a person with a browser's inspector) can find "the late write at t8" without pixels.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from outlive.hashing import content_hash, short

from ..harness import RunSummary, TraceEvent
from ..scenario import Scenario

__all__ = ["render_timeline"]

_TICK_W = 46        # the tick column
_ROW_H = 34         # one item: a label and a sub-label
_IDLE_H = 18        # a tick where nothing happens
_HEAD_H = 46        # lane names
_WIDTH = {"input": 132, "controller": 176, "attempt": 160, "receiver": 146, "consumer": 180}
_NARROW = frozenset(" .,:;·!|()[]ijlrtf1I'")

_STYLE = """
svg.outlive-timeline { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial,
  sans-serif; background: #ffffff; }
.title { font-size: 15px; font-weight: 600; fill: #1f2328; }
.subtitle { font-size: 11px; fill: #57606a; }
.lane-name { font-size: 12.5px; font-weight: 600; fill: #1f2328; }
.lane-sub { font-size: 10.5px; fill: #57606a; }
.tick { font-size: 11px; fill: #57606a; font-variant-numeric: tabular-nums; }
.grid { stroke: #eaeef2; stroke-width: 1; }
.sep { stroke: #d0d7de; stroke-width: 1; }
.label { font-size: 12px; fill: #1f2328; }
.sub { font-size: 10.5px; fill: #57606a; }
.life { fill: #ddf4ff; }
.life.silent { fill: #fff8c5; }
.life-end { font-size: 10px; fill: #57606a; font-style: italic; }
.bad .label { fill: #a40e26; font-weight: 600; }
.bad .sub { fill: #a40e26; }
.good .label { fill: #116329; }
.arrow { stroke: #8c959f; stroke-width: 1; stroke-dasharray: 3 3; fill: none; }
.arrow.bad { stroke: #cf222e; }
.foot { font-size: 12px; fill: #1f2328; }
.foot.bad { fill: #a40e26; font-weight: 600; }
.legend { font-size: 10.5px; fill: #57606a; }
"""

# glyph shapes, drawn around (0, 0); each is a few primitives with a fill/stroke per state
_GLYPHS: dict[str, str] = {
    "square": '<rect x="-5" y="-5" width="10" height="10" rx="1.5" {paint}/>',
    "diamond": '<path d="M0 -6.5 L6.5 0 L0 6.5 L-6.5 0 Z" {paint}/>',
    "circle": '<circle r="5.5" {paint}/>',
    "triangle": '<path d="M-4.5 -6 L6 0 L-4.5 6 Z" {paint}/>',
    "cross": '<path d="M-5 -5 L5 5 M5 -5 L-5 5" stroke-width="2.4" {paint}/>',
    "ring": '<circle r="5" fill="#ffffff" stroke-width="2" {paint}/>',
    "check": '<circle r="6" {paint}/><path d="M-3 0 L-0.8 2.6 L3.4 -2.6" stroke="#ffffff" '
             'stroke-width="1.8" fill="none"/>',
    "hourglass": '<path d="M-4.5 -6 L4.5 -6 L-4.5 6 L4.5 6 Z" fill="#ffffff" stroke-width="1.6" '
                 '{paint}/>',
}
_COLOURS = {"ok": "#1a7f37", "bad": "#cf222e", "warn": "#bf8700", "info": "#0969da",
            "plain": "#57606a"}


@dataclass
class _Item:
    tick: int
    lane: str
    glyph: str
    label: str
    sub: str
    tone: str                      # ok bad warn info plain
    tooltip: str
    mark: str
    hollow: bool = False
    classes: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    slot: int = 0


@dataclass
class _Arrow:
    tick: int
    source: _Item
    target_lane: str
    bad: bool = False
    target: _Item | None = None


def _px(text: str, size: float) -> float:
    """A rough rendered width of ``text`` in a sans-serif face (no font metrics at hand here)."""
    return sum(0.3 if ch in _NARROW else 0.6 if ch.isdigit() or ch.islower() else 0.68
               for ch in text) * size


def _cut(text: str, room: float, size: float) -> str:
    """``text``, cut with an ellipsis to fit ``room`` pixels (the tooltip keeps the sentence)."""
    if _px(text, size) <= room:
        return text
    while text and _px(text + "…", size) > room:
        text = text[:-1]
    return text + "…"


def _lane_kind(lane: str) -> str:
    return lane.split(":", 1)[0]


def _items(summary: RunSummary, scenario: Scenario) -> tuple[list[_Item], list[_Arrow], dict[str, str]]:
    """Turn trace events into drawable items, arrows between lanes, and lane sub-titles."""
    items: list[_Item] = []
    arrows: list[_Arrow] = []
    lane_sub: dict[str, str] = {}
    first = scenario.first_version
    items.append(_Item(
        tick=0, lane="input", glyph="square", label=f"{first} is current",
        sub=f"{short(content_hash(scenario.versions[first]))} · {scenario.figure(first)}",
        tone="plain", tooltip=f"report {first} is the current input", mark="input"))
    applied: dict[str, int] = {}

    def add(e: TraceEvent, glyph: str, label: str, sub: str, tone: str, *, lane: str | None = None,
            hollow: bool = False, classes: Iterable[str] = ()) -> _Item:
        it = _Item(tick=e.tick, lane=lane or e.lane, glyph=glyph, label=label, sub=sub, tone=tone,
                   tooltip=f"t{e.tick}: {e.text}", mark=e.mark, hollow=hollow,
                   classes=list(classes), data=e.data)
        items.append(it)
        return it

    for e in summary.trace:
        d = e.data
        n = e.lane.split(":", 1)[1] if e.lane.startswith("attempt:") else ""
        if e.mark == "admit":
            it = add(e, "triangle", f"admit #{d['attempt']}",
                     f"token {d['token']} · {d['version'] or 'no pin'}", "info")
            lane_sub[f"attempt:{d['attempt']}"] = f"token {d['token']} · {d['version'] or 'no pin'}"
            arrows.append(_Arrow(tick=e.tick, source=it, target_lane=f"attempt:{d['attempt']}"))
        elif e.mark == "unknown":
            add(e, "ring", f"#{d['attempt']} is unknown", "silent: not failed", "warn")
        elif e.mark == "accept":
            ver = d["version"] or "no version"
            add(e, "check", f"accept {d['digest']}", f"{ver} · {d['contract']}", "ok",
                classes=["acceptance"])
        elif e.mark == "refuse":
            add(e, "cross", f"refuse {d['digest']}", f"#{d['attempt']}: {d['reason']}", "warn",
                classes=["refusal"])
        elif e.mark == "input":
            add(e, "square", f"{d['version']} arrives", f"{d['vhash']} · {d['figure']}", "info")
        elif e.mark == "step":
            if d["stale"]:
                add(e, "square", f"{d['step']} stale write", "applied: fencing off", "bad",
                    classes=["stale", "journal"])
            else:
                verb = "redone" if int(n) > 1 else "run"
                where = d["result"] if d["saved"] else f"{d['result']} in memory"
                add(e, "square", f"{d['step']} {verb} ({d['version'] or '-'})", where, "ok",
                    hollow=not d["saved"], classes=["journal", "redone"])
        elif e.mark == "restore":
            redo = " ".join(d["redo"]) or "none"
            add(e, "square", f"restores {' '.join(d['steps'])}", f"redo: {redo}", "info",
                hollow=True, classes=["journal", "restored"])
        elif e.mark == "late-write":
            what = d.get("step") or "write"
            if d["refused"]:
                why = (f"refused: {d['token']} < {d['epoch']}" if "epoch" in d
                       else f"refused: {d.get('reason', 'stale')}")
                add(e, "cross", f"{what} late write", why, "warn", classes=["late", "refused"])
            else:
                add(e, "square", f"{what} late write", "applied: fencing off", "bad",
                    classes=["late", "stale"])
        elif e.mark == "wake":
            add(e, "square", f"wakes: {d.get('step') or 'carries on'}",
                f"{d['result']} in memory" if d.get("result") else "", "warn", hollow=True)
        elif e.mark == "silent" and "op_key" in d:
            add(e, "ring", "post: goes silent", f"{d['point']}; held", "warn")
        elif e.mark == "silent":
            add(e, "ring", f"{d['step']}: goes silent" if d.get("step") else "after candidate: silent",
                "call made; held" if d.get("step") else "held", "warn")
        elif e.mark == "crash":
            add(e, "cross", f"{d.get('step') or 'attempt'}: crashes", "nothing recorded", "warn")
        elif e.mark == "candidate":
            ver = d["version"] or "no version"
            if d["stale"]:
                add(e, "diamond", f"cand {d['digest']}", f"{ver} · stale, applied", "bad",
                    classes=["candidate", "stale"])
            else:
                add(e, "diamond", f"cand {d['digest']}", f"{ver} · quotes {d['figure']}", "info",
                    classes=["candidate"])
        elif e.mark == "effect" and (d.get("already") or d.get("effect_id") is None):
            # settled by another attempt (nothing sent), or died before sending: no receiver mark
            add(e, "circle", "settle: already confirmed" if d.get("already") else "intent",
                d["effect_id"] if d.get("already") else "dies before sending", "warn",
                hollow=not d.get("already"), classes=["effect"])
        elif e.mark == "effect":
            key = d["sent_key"]
            keyed = "no key" if key is None else ("key: operation" if key == d["op_key"]
                                                  else "key: per attempt")
            if d["duplicate"]:
                it = add(e, "circle", "resend, same key", f"confirmed {d['effect_id']}", "ok",
                         classes=["effect", "confirmed"])
                tgt = add(e, "check", f"seen: {d['effect_id']}", "nothing new posted", "ok",
                          lane="receiver", classes=["receiver", "duplicate"])
            else:
                again = applied.get(d["op_key"], 0) > 0
                applied[d["op_key"]] = applied.get(d["op_key"], 0) + 1
                if d["died"]:
                    it = add(e, "circle", "intent, send", "dies before confirm", "warn",
                             hollow=True, classes=["effect", "died"])
                else:
                    it = add(e, "circle", "intent, send", f"confirmed {d['effect_id']}", "ok",
                             classes=["effect", "confirmed"])
                tone = "bad" if again else "ok"
                tgt = add(e, "square", f"applies {d['effect_id']}" + (" again" if again else ""),
                          keyed, tone, lane="receiver",
                          classes=["receiver", "posted"] + (["duplicate-post"] if again else []))
            arrows.append(_Arrow(tick=e.tick, source=it, target_lane="receiver", target=tgt,
                                 bad=tgt.tone == "bad"))
        elif e.mark == "finish":
            add(e, "check", "finishes", "accepted, announced", "ok", classes=["finish"])
        elif e.mark == "consumer-wait":
            add(e, "hourglass", "ready: waits", f"{d['rule']}: none for {d['version']}", "warn")
        elif e.mark == "consumer-start":
            right = d["figure"] == d["required"]
            add(e, "circle", f"starts: {d['digest']}",
                f"quotes {d['figure']} (needs {d['required']})", "ok" if right else "bad",
                classes=["consumer-start"] + ([] if right else ["wrong-figure"]))
        else:       # a mark this drawing does not know yet: still shown, never dropped
            add(e, "circle", e.mark or e.kind, "", "plain")
    return items, arrows, lane_sub


def _lanes(items: list[_Item], scenario: Scenario) -> list[str]:
    attempts = sorted({i.lane for i in items if i.lane.startswith("attempt:")},
                      key=lambda lane: int(lane.split(":", 1)[1]))
    consumers = sorted({i.lane for i in items if i.lane.startswith("consumer:")}
                       | {f"consumer:{scenario.consumer.name}"})
    return ["input", "controller", *attempts, "receiver", *consumers]


def _lane_title(lane: str) -> str:
    kind, _, name = lane.partition(":")
    return {"input": "input", "controller": "controller", "receiver": "feed (receiver)",
            "attempt": f"attempt #{name}", "consumer": name}[kind]


def _lifelines(summary: RunSummary) -> dict[str, list[tuple[int, int, str]]]:
    """Per attempt lane: (from tick, to tick, state) segments, from admission to its end."""
    out: dict[str, list[tuple[int, int, str]]] = {}
    start: dict[str, int] = {}
    silent_from: dict[str, int] = {}
    ended: dict[str, int] = {}
    end_why: dict[str, str] = {}
    for e in summary.trace:
        if e.mark == "admit":
            start[f"attempt:{e.data['attempt']}"] = e.tick
        lane = e.lane
        if not lane.startswith("attempt:") or lane in ended:
            continue
        if e.mark == "silent":
            silent_from[lane] = e.tick
        elif lane in silent_from and e.mark in ("late-write", "wake"):
            out.setdefault(lane, []).append((silent_from.pop(lane), e.tick, "silent"))
        if e.mark == "crash":
            ended[lane], end_why[lane] = e.tick, "crashed"
        elif e.mark == "late-write" and e.data.get("refused"):
            ended[lane], end_why[lane] = e.tick, "stops"
        elif e.mark == "effect" and e.data.get("died"):
            ended[lane], end_why[lane] = e.tick, "dies"
        elif e.mark == "finish":
            ended[lane], end_why[lane] = e.tick, "done"
    for e in summary.trace:
        if e.mark == "refuse":
            lane = f"attempt:{e.data['attempt']}"
            if lane not in ended:
                ended[lane], end_why[lane] = e.tick, "stops"
    for lane, t0 in start.items():
        t1 = ended.get(lane, summary.ended_at)
        segs = [(t0, t1, "live")]
        held = list(out.get(lane, []))
        if lane in silent_from:        # silent until the end (never woke within the run)
            held.append((silent_from[lane], t1, "silent"))
        out[lane] = segs + held + [(t1, t1, end_why.get(lane, "end"))]
    return out


def render_timeline(summary: RunSummary, scenario: Scenario, *, backend: str = "memory://",
                    title: str | None = None) -> str:
    """The run as a standalone SVG document (its own styles; no scripts, no external files)."""
    items, arrows, lane_sub = _items(summary, scenario)
    lanes = _lanes(items, scenario)
    xs: dict[str, float] = {}
    x = float(_TICK_W)
    for lane in lanes:
        xs[lane] = x
        x += _WIDTH[_lane_kind(lane)]
    width = x + 8
    ticks = list(range(0, max([summary.ended_at, *(i.tick for i in items)]) + 1))
    per: dict[tuple[int, str], list[_Item]] = {}
    for it in items:
        cell = per.setdefault((it.tick, it.lane), [])
        it.slot = len(cell)
        cell.append(it)
    top = 58.0
    # rows: one per busy tick; a stretch of three or more quiet ticks shares one row
    rows: list[list[int]] = []
    for t in ticks:
        busy = any((t, lane) in per for lane in lanes)
        if not busy and rows and len(rows[-1]) and not any(
                (rows[-1][0], lane) in per for lane in lanes):
            rows[-1].append(t)
        else:
            rows.append([t])
    split: list[list[int]] = []
    for row in rows:                     # short quiet stretches keep a row per tick
        split.extend([[t] for t in row] if len(row) < 3 else [row])
    ys: dict[int, float] = {}
    heights: dict[int, float] = {}
    y = top + _HEAD_H
    for row in split:
        n = max((len(per.get((row[0], lane), [])) for lane in lanes), default=0)
        h = n * _ROW_H + 6 if n else _IDLE_H + (6 if len(row) > 1 else 0)
        for t in row:
            ys[t], heights[t] = y, h
        y += h
    body_end = y
    out: list[str] = []
    label = title or f"{scenario.work_id} on {backend}"
    flips = [f"{k}={v}" for k, v in summary.switches.items()
             if scenario.defaults.as_dict().get(k) != v]
    subtitle = ("the main run (every switch as in the scenario file)" if not flips
                else "switches changed from the main run: " + ", ".join(flips))
    out.append(f'<text class="title" x="12" y="24">{escape(label)}</text>')
    out.append(f'<text class="subtitle" x="12" y="42">{escape(subtitle)}</text>')
    # lifelines first, under everything
    for lane, segs in _lifelines(summary).items():
        if lane not in xs:
            continue
        lx, lw = xs[lane] + 4, _WIDTH["attempt"] - 8
        for a, b, state in segs:
            if state in ("live", "silent"):
                y0 = ys[a] + (_ROW_H / 2 if state == "silent" else 0)
                y1 = ys[b] + (heights[b] if state == "live" else _ROW_H / 2)
                cls = "life" if state == "live" else "life silent"
                out.append(f'<rect class="{cls}" data-lane="{lane}" x="{lx:.0f}" y="{y0:.0f}" '
                           f'width="{lw:.0f}" height="{max(y1 - y0, 4):.0f}" rx="4"/>')
            elif state != "end":
                # a terminator bar; the word only where no item of this lane would be covered
                yb = ys[b] + heights[b] - 1
                out.append(f'<path class="arrow" d="M{lx + 8:.0f} {yb:.0f} L{lx + lw - 8:.0f} {yb:.0f}" '
                           'style="stroke-dasharray:none;stroke-width:2"/>')
                if (b, lane) not in per:
                    out.append(f'<text class="life-end" x="{lx + lw - 6:.0f}" y="{yb - 5:.0f}" '
                               f'text-anchor="end">{escape(state)}</text>')
    # grid and ticks
    for row in split:
        t = row[0]
        out.append(f'<line class="grid" x1="0" x2="{width:.0f}" y1="{ys[t]:.0f}" y2="{ys[t]:.0f}"/>')
        ty = ys[t] + min(heights[t], _ROW_H) / 2 + 4
        name = f"t{t}" if len(row) == 1 else f"t{t}\u2013{row[-1]}"
        out.append(f'<text class="tick" x="{_TICK_W - 8}" y="{ty:.0f}" text-anchor="end">{name}</text>')
        if len(row) > 1:
            out.append(f'<text class="life-end" x="{_TICK_W + 8}" y="{ty:.0f}">'
                       f"{len(row)} quiet ticks</text>")
    out.append(f'<line class="grid" x1="0" x2="{width:.0f}" y1="{body_end:.0f}" y2="{body_end:.0f}"/>')
    for lane in lanes:
        lx = xs[lane]
        out.append(f'<line class="sep" x1="{lx:.0f}" x2="{lx:.0f}" y1="{top:.0f}" y2="{body_end:.0f}"/>')
        out.append(f'<text class="lane-name" x="{lx + 8:.0f}" y="{top + 18:.0f}">'
                   f'{escape(_lane_title(lane))}</text>')
        sub = lane_sub.get(lane, {"input": f"{scenario.consumer.quotes}'s figure",
                                  "controller": "admits, judges",
                                  "receiver": "keeps operation keys"}.get(lane, ""))
        if lane.startswith("consumer:"):
            sub = f"ready at t{scenario.consumer.ready_at}, rule {summary.switches.get('rule')}"
        out.append(f'<text class="lane-sub" x="{lx + 8:.0f}" y="{top + 34:.0f}">{escape(sub)}</text>')

    def centre(it: _Item) -> tuple[float, float]:
        return xs[it.lane] + 16, ys[it.tick] + it.slot * _ROW_H + _ROW_H / 2 + 3

    for ar in arrows:
        # from the right edge of the source's column (clear of its text) to the target's glyph
        _, sy = centre(ar.source)
        x_from = xs[ar.source.lane] + _WIDTH[_lane_kind(ar.source.lane)] - 4
        if ar.target is not None:
            tx, ty = centre(ar.target)
            x_to = tx - 9
        else:
            x_to, ty = xs[ar.target_lane] + 4, sy
        cls = "arrow bad" if ar.bad else "arrow"
        out.append(f'<path class="{cls}" d="M{x_from:.0f} {sy - 4:.0f} L{x_to:.0f} {ty - 4:.0f}"/>')
    for it in items:
        cx, cy = centre(it)
        room = _WIDTH[_lane_kind(it.lane)] - 34
        colour = _COLOURS[it.tone]
        paint = (f'fill="#ffffff" stroke="{colour}" stroke-width="1.8"' if it.hollow
                 else f'fill="{colour}" stroke="{colour}"')
        if it.glyph in ("cross", "ring", "hourglass"):
            paint = f'stroke="{colour}" fill="none"' if it.glyph == "cross" else f'stroke="{colour}"'
        tone_cls = {"bad": "bad", "ok": "good"}.get(it.tone, "")
        classes = " ".join(["item", it.mark, tone_cls, *it.classes]).split()
        out.append(f'<g class="{" ".join(dict.fromkeys(classes))}" data-tick="{it.tick}" '
                   f'data-lane={quoteattr(it.lane)} data-mark={quoteattr(it.mark)} '
                   f'data-glyph="{it.glyph}">'
                   f'<title>{escape(it.tooltip)}</title>'
                   f'<g transform="translate({cx:.0f} {cy - 4:.0f})">'
                   f'{_GLYPHS[it.glyph].format(paint=paint)}</g>'
                   f'<text class="label" x="{cx + 12:.0f}" y="{cy - 1:.0f}">'
                   f'{escape(_cut(it.label, room, 12))}</text>'
                   f'<text class="sub" x="{cx + 12:.0f}" y="{cy + 12:.0f}">'
                   f'{escape(_cut(it.sub, room, 10.5))}</text></g>')
    # outcome line and legend
    fy = body_end + 24
    acc = summary.accepted[-1] if summary.accepted else None
    news = (f"newsletter starts t{summary.newsletter_start}, quotes {summary.newsletter_figure} "
            f"(needs {summary.required_figure})" if summary.newsletter_start is not None
            else "newsletter never starts")
    parts = [f"{summary.model_calls} model calls", f"{summary.posts} post"
             + ("" if summary.posts == 1 else "s"), f"{summary.stale_writes_applied} stale writes",
             f"accepted at t{acc.tick}" if acc else "nothing accepted", news]
    verdict = "clean" if summary.clean else "broken: " + ", ".join(summary.broken)
    out.append(f'<text class="foot" x="12" y="{fy:.0f}">{escape(" · ".join(parts))}</text>')
    out.append(f'<text class="foot{"" if summary.clean else " bad"}" x="12" y="{fy + 18:.0f}">'
               f'verdict: {escape(verdict)}</text>')
    ly = fy + 42
    # every mark and band the drawing can hold, wrapped to the drawing's width (never wider)
    legend: list[tuple[str, str, bool, str]] = [
        ("band", "life", False, "live attempt (admitted, renewing its lease)"),
        ("band", "life silent", False, "silent: no sign of life (not failed)"),
        ("triangle", "info", False, "attempt admitted (written before dispatch)"),
        ("square", "ok", False, "step run/redone (a model call)"),
        ("square", "info", True, "restored from the journal"),
        ("square", "bad", False, "stale write applied"),
        ("cross", "warn", False, "refused / crashed"),
        ("ring", "warn", False, "goes silent / marked unknown"),
        ("diamond", "info", False, "candidate"), ("check", "ok", False, "accepted / confirmed"),
        ("circle", "ok", False, "effect sent / newsletter starts"),
        ("hourglass", "warn", False, "waits (the rule finds nothing yet)"),
        ("arrow", "plain", False, "dispatched to / sent to"),
    ]
    lx = 12.0
    for glyph, tone, hollow, text in legend:
        step = 22 + _px(text, 10.5) + 12
        if lx > 12 and lx + step > width - 8:
            lx, ly = 12.0, ly + 20
        out.append(f'<g class="legend-entry" data-legend={quoteattr(glyph if glyph != "band" else tone)}>')
        if glyph == "band":
            out.append(f'<rect class="{tone}" x="{lx:.0f}" y="{ly - 11:.0f}" width="14" height="14" '
                       'rx="3"/>')
        elif glyph == "arrow":
            out.append(f'<path class="arrow" d="M{lx:.0f} {ly - 4:.0f} L{lx + 14:.0f} {ly - 4:.0f}"/>')
        else:
            colour = _COLOURS[tone]
            paint = (f'fill="#ffffff" stroke="{colour}" stroke-width="1.8"' if hollow
                     else f'fill="{colour}" stroke="{colour}"')
            if glyph in ("cross", "ring", "hourglass"):
                paint = f'stroke="{colour}" fill="none"' if glyph == "cross" else f'stroke="{colour}"'
            out.append(f'<g transform="translate({lx + 6:.0f} {ly - 4:.0f})">'
                       f'{_GLYPHS[glyph].format(paint=paint)}</g>')
        out.append(f'<text class="legend" x="{lx + 20:.0f}" y="{ly:.0f}">{escape(text)}</text></g>')
        lx += step
    height = ly + 16
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="outlive-timeline" '
            f'width="{width:.0f}" height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" '
            f'role="img" aria-label={quoteattr(label)}>'
            f'<style>{_STYLE}</style>'
            f'<rect x="0" y="0" width="{width:.0f}" height="{height:.0f}" fill="#ffffff"/>'
            + "".join(out) + "</svg>\n")
