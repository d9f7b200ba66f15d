"""``outlive``: demo, run, sweep and inspect.

The conformance distribution supplies the scenario and harness; the CLI only wires them to a
backend URL and prints.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from typing import Any

from . import codec
from .backend import open_backend
from .errors import OutliveError
from .hashing import short
from .records import WorkState

__all__ = ["main"]


def _conformance() -> Any:
    try:
        import outlive_conformance.harness as harness
        import outlive_conformance.scenario as scenario
        import outlive_conformance.sweep as sweep
    except ImportError as exc:  # pragma: no cover - packaging error
        raise OutliveError("the CLI needs outlive-conformance: pip install outlive-conformance") \
            from exc
    return harness, scenario, sweep


def _load(name: str) -> Any:
    _h, sc, _s = _conformance()
    return sc.find_scenario(name)


def _switches(scenario: Any, sets: list[str]) -> Any:
    changes: dict[str, str] = {}
    for item in sets:
        if "=" not in item:
            raise OutliveError(f"--set needs SWITCH=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        changes[k.strip()] = v.strip()
    _h, sc, _s = _conformance()
    unknown = set(changes) - set(sc.SWITCHES)
    if unknown:
        raise OutliveError(f"unknown switch {sorted(unknown)}; switches: {', '.join(sc.SWITCHES)}")
    return scenario.defaults.set(**changes)


def _print_summary(s: Any) -> None:
    print()
    print("outcome")
    unit = f" {s.figure_unit}" if s.figure_unit else ""
    print(f"  model calls            {s.model_calls}")
    print(f"  posts                  {s.posts}")
    print(f"  stale writes applied   {s.stale_writes_applied}")
    for a in s.accepted:
        ver = a.recorded_version or "no version recorded"
        print(f"  accepted               {a.digest} at t{a.tick} ({ver}, quoting {a.figure}{unit})")
    start = f"t{s.newsletter_start}" if s.newsletter_start is not None else "never"
    print(f"  {s.consumer_name or 'consumer':<22} starts {start}, quotes {s.newsletter_figure}{unit} "
          f"(required: {s.required_figure})")
    print("  invariants             " + ", ".join(
        f"{k} {'ok' if ok else 'BROKEN'}" for k, ok in s.invariants.items()))
    print(f"  verdict                {'clean' if s.clean else 'broken: ' + ', '.join(s.broken)}")


def _print_trace(s: Any) -> None:
    for e in s.trace:
        print(f"  t{e.tick:<3} {e.kind:<10} {e.text}")


def _print_state(st: WorkState) -> None:
    print(f"work {st.work_id}: epoch {st.epoch}, current input {st.current_version}, "
          f"policy fencing={'on' if st.policy.fencing else 'off'} "
          f"pins={'on' if st.policy.pins else 'off'}")
    print("  inputs")
    for v in st.inputs:
        print(f"    {v.version}  parts {', '.join(f'{k}={short(h)}' for k, h in v.parts.items())}")
    print("  attempts (checked by the controller)")
    for a in st.attempts:
        print(f"    #{a.number}  token {a.token}  pinned {a.pinned_version}  {a.state.value}  "
              f"admitted t{a.admitted_at}  last sign of life t{a.last_heartbeat}")
    print("  journal (checked by the successor: restore only on a matching input key)")
    for e in st.journal:
        stale = "  STALE" if e.stale else ""
        print(f"    {e.step:<4} key {short(e.input_key)}  result {short(e.result_id)}  "
              f"by #{e.attempt}{stale}")
    print("  candidates")
    for c in st.candidates:
        print(f"    {short(c.digest)}  for {c.version}  by #{c.attempt}  t{c.at}"
              + ("  STALE" if c.stale else ""))
    print("  acceptances (append-only; later ones supersede)")
    for acc in st.acceptances:
        print(f"    {short(acc.digest)}  for {acc.version}  under {acc.contract.name}@"
              f"{acc.contract.version} ({acc.contract.assessor})  t{acc.at}")
    print("  effects (checked by the receiver, keyed by operation)")
    for ef in st.effects:
        r = ef.receipt
        got = f"{r.effect_id}{' (already seen)' if r.duplicate else ''}" if r else "-"
        print(f"    {ef.op_key}  {ef.state.value}  receipt {got}  sends {ef.sends}")


async def _demo(args: argparse.Namespace) -> int:
    harness, _sc, _s = _conformance()
    scenario = _load("q3-report")
    path = args.db or os.path.join(tempfile.mkdtemp(prefix="outlive-demo-"), "outlive.db")
    url = f"sqlite:///{os.path.abspath(path)}"
    backend = await open_backend(url)
    try:
        if await backend.load(scenario.work_id) is not None:
            raise OutliveError(f"{path} already holds {scenario.work_id}; pass another --db")
        print(f"outlive demo: the article's main run of {scenario.work_id} on {url}")
        print("(the silent worker was paused; fencing, version pins, per-step saving, the "
              "operation key and the strict newsletter rule are on)\n")
        s = await harness.run_scenario(backend, scenario, scenario.defaults)
        _print_trace(s)
        print()
        st = await backend.load(scenario.work_id)
        assert st is not None
        _print_state(st)
        _print_summary(s)
        print(f"\ninspect it again: outlive inspect {scenario.work_id} --backend {url}")
        return 0 if s.clean else 1
    finally:
        await backend.close()


async def _run(args: argparse.Namespace) -> int:
    harness, _sc, _s = _conformance()
    scenario = _load(args.scenario)
    sw = _switches(scenario, args.set or [])
    backend = await open_backend(args.backend)
    try:
        work_id = args.work_id or f"run/{os.getpid()}-{id(sw):x}/{scenario.work_id}"
        s = await harness.run_scenario(backend, scenario, sw, work_id=work_id)
    finally:
        await backend.close()
    if args.json:
        print(json.dumps(s.comparable(), indent=2, default=str))
    else:
        print(f"{scenario.name} on {args.backend}: {sw.label}\n")
        _print_trace(s)
        _print_summary(s)
    return 0


async def _sweep(args: argparse.Namespace) -> int:
    _h, _sc, sweep_mod = _conformance()
    scenario = _load(args.scenario)
    backend = await open_backend(args.backend)

    def bar(done: int, total: int) -> None:
        if args.quiet:
            return
        width = 40
        filled = width * done // total
        sys.stderr.write(f"\r  [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        if done == total:
            sys.stderr.write("\n")
        sys.stderr.flush()

    try:
        ns = args.namespace or f"sweep-{os.getpid()}"
        result = await sweep_mod.sweep(backend, scenario, concurrency=args.concurrency,
                                       namespace=ns, progress=bar)
    finally:
        await backend.close()
    print(f"{len(result.runs)} runs on {args.backend} in {result.seconds:.1f} s")
    ok = True
    if args.backend != "memory://" and not args.no_compare:
        ref_backend = await open_backend("memory://")
        ref = await sweep_mod.sweep(ref_backend, scenario, concurrency=8, namespace=ns)
        mismatched = [k for k, r in result.runs.items()
                      if r.comparable() != ref.runs[k].comparable()]
        print(f"agreement with memory://: {len(result.runs) - len(mismatched)}/"
              f"{len(result.runs)} runs identical")
        for k in mismatched[:5]:
            print(f"  differs: {k}")
        ok = ok and not mismatched
    clean = sum(1 for r in result.runs.values() if r.clean)
    print(f"clean runs: {clean}/{len(result.runs)}\n")
    print("necessity (the article's claims, checked run by run):")
    for c in sweep_mod.check_claims(result):
        print(f"  {'holds' if c.holds else 'FAILS'}  {c.text}  [{c.detail}]")
        ok = ok and c.holds
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({k: r.comparable() for k, r in result.runs.items()}, fh, default=str)
    return 0 if ok else 1


async def _inspect(args: argparse.Namespace) -> int:
    backend = await open_backend(args.backend)
    try:
        st = await backend.load(args.work_id)
    finally:
        await backend.close()
    if st is None:
        raise OutliveError(f"no work {args.work_id!r} on {args.backend}")
    if args.json:
        print(json.dumps(codec.encode(st), indent=2))
    else:
        _print_state(st)
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="outlive", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="the article's main run on SQLite, record by record")
    d.add_argument("--db", help="SQLite file to use (default: a fresh temporary file)")
    r = sub.add_parser("run", help="run a scenario once under chosen switches")
    r.add_argument("scenario", help="q3-report or a scenario file path")
    r.add_argument("--backend", default="memory://")
    r.add_argument("--set", action="append", metavar="SWITCH=VALUE")
    r.add_argument("--work-id")
    r.add_argument("--json", action="store_true")
    s = sub.add_parser("sweep", help="all 864 combinations and the necessity table")
    s.add_argument("--backend", default="memory://")
    s.add_argument("--scenario", default="q3-report")
    s.add_argument("--concurrency", type=int, default=8)
    s.add_argument("--namespace")
    s.add_argument("--no-compare", action="store_true", help="skip the memory:// comparison")
    s.add_argument("--json", metavar="FILE", help="write every run's summary to FILE")
    s.add_argument("--quiet", action="store_true")
    i = sub.add_parser("inspect", help="attempts, journal, acceptances and effects of a work")
    i.add_argument("work_id")
    i.add_argument("--backend", default="sqlite:///outlive.db")
    i.add_argument("--json", action="store_true")
    from ._process import add_worker_arguments
    from ._supervise import add_supervise_arguments

    add_supervise_arguments(sub.add_parser(
        "supervise", help="run a work definition to its end, taking over silent attempts"))
    add_worker_arguments(sub.add_parser(
        "worker", help="run one admitted attempt (the supervisor's process dispatcher starts these)"))
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.cmd in ("worker", "supervise"):   # they run their own loop and signal handling
        from ._process import run_worker_command
        from ._supervise import run_supervise_command

        return (run_worker_command if args.cmd == "worker" else run_supervise_command)(args)
    handler = {"demo": _demo, "run": _run, "sweep": _sweep, "inspect": _inspect}[args.cmd]
    try:
        return asyncio.run(handler(args))
    except OutliveError as exc:
        print(f"outlive: {type(exc).__name__}: {exc.message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
