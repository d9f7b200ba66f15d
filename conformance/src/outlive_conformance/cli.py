"""``outlive run``, ``outlive sweep`` and ``outlive explore``: the conformance scenario from the
command line.

Registered in the ``outlive.commands`` entry-point group, so the core CLI offers them only when
this distribution is installed. They follow the core's conventions (``--backend``, ``--json`` to
stdout, ``--out FILE``, exit 1 on a broken verdict, Ctrl-C keeps the runs already finished).
"""

from __future__ import annotations

import asyncio
import errno
import os
from typing import Any

import click

from outlive import open_backend
from outlive.cli import (
    BACKEND_HELP,
    EXIT_BROKEN,
    EXIT_OK,
    CommandError,
    backend_option,
    echo,
    emit_json,
    json_option,
    out_option,
    progress,
    run_async,
)

from . import harness
from . import scenario as scenarios
from . import sweep as sweep_mod
from .harness import RunSummary
from .scenario import SWITCHES, Scenario, Switches

__all__ = ["explore", "run", "sweep"]

SWITCH_HELP = "; ".join(f"{name}={'|'.join(values)}" for name, values in SWITCHES.items())


def load(name: str) -> Scenario:
    """A shipped scenario's name (``q3-report``) or the path of a scenario file."""
    return scenarios.find_scenario(name)


def switches(scenario: Scenario, sets: tuple[str, ...]) -> Switches:
    changes: dict[str, str] = {}
    for item in sets:
        if "=" not in item:
            raise click.BadParameter(f"needs SWITCH=VALUE, got {item!r}", param_hint="--set")
        name, value = (part.strip() for part in item.split("=", 1))
        if name not in SWITCHES:
            raise click.BadParameter(f"unknown switch {name!r}; switches: {SWITCH_HELP}",
                                     param_hint="--set")
        if value not in SWITCHES[name]:
            raise click.BadParameter(f"{name} takes {'|'.join(SWITCHES[name])}, not {value!r}",
                                     param_hint="--set")
        changes[name] = value
    return scenario.defaults.set(**changes)


def print_trace(s: RunSummary) -> None:
    for e in s.trace:
        click.echo(f"  t{e.tick:<3} {e.kind:<10} {e.text}")


def print_summary(s: RunSummary) -> None:
    click.echo()
    click.echo("outcome")
    click.echo(f"  model calls            {s.model_calls}")
    click.echo(f"  posts                  {s.posts}")
    click.echo(f"  stale writes applied   {s.stale_writes_applied}")
    unit = f" {s.figure_unit}" if s.figure_unit else ""
    for a in s.accepted:
        ver = a.recorded_version or "no version recorded"
        click.echo(f"  accepted               {a.digest} at t{a.tick} ({ver}, quoting "
                   f"{a.figure}{unit})")
    start = f"t{s.newsletter_start}" if s.newsletter_start is not None else "never"
    click.echo(f"  {s.consumer_name or 'consumer':<22} starts {start}, quotes "
               f"{s.newsletter_figure}{unit} (required: {s.required_figure})")
    click.echo("  invariants             " + ", ".join(
        f"{k} {'ok' if ok else 'BROKEN'}" for k, ok in s.invariants.items()))
    click.echo(f"  verdict                {'clean' if s.clean else 'broken: ' + ', '.join(s.broken)}")


@click.command()
@click.argument("scenario", default="q3-report", metavar="[SCENARIO]")
@backend_option()
@click.option("--set", "sets", multiple=True, metavar="SWITCH=VALUE",
              help=f"Change one switch from the scenario's main run (repeatable): {SWITCH_HELP}.")
@click.option("--work-id", metavar="ID", help="Work id to run under (default: a fresh one).")
@click.option("--svg", "svg", type=click.Path(dir_okay=False, writable=True), metavar="FILE",
              help="Also draw the run as an SVG timeline in FILE (the explorer's drawing).")
@json_option("the run's outcome summary")
@out_option("the run's outcome summary")
def run(scenario: str, backend: str, sets: tuple[str, ...], work_id: str | None, svg: str | None,
        as_json: bool, out: str | None) -> int:
    """Run SCENARIO (a shipped one such as q3-report, or a scenario file) once under the chosen
    switches and judge it.
    Exit status 1 if any invariant breaks (as it should with a protection switched off)."""
    sc = load(scenario)
    sw = switches(sc, sets)

    async def go() -> int:
        b = await open_backend(backend)
        try:
            wid = work_id or f"run/{os.getpid()}-{id(sw):x}/{sc.work_id}"
            s = await harness.run_scenario(b, sc, sw, work_id=wid)
        finally:
            await b.close()
        if not as_json:
            click.echo(f"{sc.name} on {backend}: {sw.label}\n")
            print_trace(s)
            print_summary(s)
        emit_json(s.comparable(), as_json=as_json, out=out)
        if svg:
            from .explore.timeline import render_timeline

            with open(svg, "w", encoding="utf-8") as fh:
                fh.write(render_timeline(s, sc, backend=backend))
            click.echo(f"timeline drawn in {svg}", err=True)
        return EXIT_OK if s.clean else EXIT_BROKEN

    return run_async(go())


@click.command()
@backend_option()
@click.option("--scenario", default="q3-report", show_default=True, metavar="SCENARIO",
              help=f"A shipped scenario ({', '.join(scenarios.shipped())}) or the path of a "
                   "scenario file.")
@click.option("--concurrency", type=click.IntRange(min=1), default=8, show_default=True,
              help="How many runs at once (each under its own work id).")
@click.option("--namespace", metavar="NS",
              help="Prefix of the runs' work ids (default: sweep-<pid>), so sweeps never share a work.")
@click.option("--no-compare", is_flag=True,
              help="Skip the run-by-run comparison with memory:// (done for every other backend).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
@json_option("every run's summary, the comparison and the claims")
@out_option("every run's summary, the comparison and the claims (partial after Ctrl-C)")
def sweep(backend: str, scenario: str, concurrency: int, namespace: str | None, no_compare: bool,
          quiet: bool, as_json: bool, out: str | None) -> int:
    """All 864 switch combinations on one backend, compared run by run with memory://, and the
    article's necessity claims checked against them. Exit status 1 if a claim fails or a run
    differs; after Ctrl-C the finished runs are still written (--json / --out)."""
    sc = load(scenario)
    ns = namespace or f"sweep-{os.getpid()}"
    say = (lambda line="": click.echo(line, err=True)) if as_json else echo
    finished: dict[str, RunSummary] = {}

    def report(extra: dict[str, Any]) -> dict[str, Any]:
        return {"backend": backend, "scenario": sc.name, "runs_finished": len(finished),
                "runs": {k: r.comparable() for k, r in finished.items()}, **extra}

    async def go() -> int:
        b = await open_backend(backend)
        try:
            with progress(864, label=f"sweep on {backend}", quiet=quiet) as advance:
                def keep(label: str, summary: RunSummary) -> None:
                    finished[label] = summary
                    advance(1)

                result = await sweep_mod.sweep(b, sc, concurrency=concurrency, namespace=ns,
                                               on_run=keep)
        except asyncio.CancelledError:
            emit_json(report({"interrupted": True}), as_json=as_json, out=out)
            click.echo(f"outlive sweep: interrupted after {len(finished)}/864 runs"
                       + (f"; the finished runs are in {out}" if out else ""), err=True)
            raise
        except Exception as exc:
            where = "; ".join(getattr(exc, "__notes__", ())) or "in one run"
            emit_json(report({"interrupted": True, "error": f"{type(exc).__name__}: {exc}",
                              "where": where}), as_json=as_json, out=out)
            click.echo(f"outlive sweep: stopped {where} after {len(finished)}/864 runs; the other "
                       "runs were cancelled" + (f"; the finished runs are in {out}" if out else ""),
                       err=True)
            raise
        finally:
            await b.close()
        say(f"{len(result.runs)} runs on {backend} in {result.seconds:.1f} s")
        ok = True
        mismatched: list[str] = []
        if backend != "memory://" and not no_compare:
            ref = await sweep_mod.sweep(await open_backend("memory://"), sc, concurrency=8,
                                        namespace=ns)
            mismatched = [k for k, r in result.runs.items()
                          if r.comparable() != ref.runs[k].comparable()]
            say(f"agreement with memory://: {len(result.runs) - len(mismatched)}/"
                f"{len(result.runs)} runs identical")
            for k in mismatched[:5]:
                say(f"  differs: {k}")
            ok = not mismatched
        clean = sum(1 for r in result.runs.values() if r.clean)
        say(f"clean runs: {clean}/{len(result.runs)}\n")
        say("necessity (the article's claims, checked run by run):")
        claims = sweep_mod.check_claims(result)
        for c in claims:
            say(f"  {'holds' if c.holds else 'FAILS'}  {c.text}  [{c.detail}]")
            ok = ok and c.holds
        emit_json(report({"interrupted": False, "seconds": round(result.seconds, 3),
                          "differs_from_memory": mismatched, "clean_runs": clean,
                          "claims": [{"name": c.name, "holds": c.holds, "detail": c.detail}
                                     for c in claims]}),
                  as_json=as_json, out=out)
        return EXIT_OK if ok else EXIT_BROKEN

    return run_async(go())


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; the default serves this machine only (loopback).")
@click.option("--port", type=click.IntRange(min=0, max=65535), default=8765, show_default=True,
              help="Port to listen on (0 picks a free one).")
@click.option("--backend", "backends", multiple=True, metavar="URL",
              help="A backend the page may run beside memory:// (repeatable). " + BACKEND_HELP)
@click.option("--scenario", "scenario_files", multiple=True, metavar="FILE",
              type=click.Path(exists=True, dir_okay=False),
              help="A scenario file to offer besides the shipped ones (repeatable).")
@click.option("--timeout", type=click.FloatRange(min=1), default=120.0, show_default=True,
              metavar="SECONDS", help="Give up on one backend's run after this long.")
def explore(host: str, port: int, backends: tuple[str, ...], scenario_files: tuple[str, ...],
            timeout: float) -> int:
    """Serve the explorer: the article's eight switches on a local page, each choice run through
    the real harness on memory:// (and beside it on a --backend), drawn as a timeline with the
    outcome, the invariants and the sweep's necessity table. Ctrl-C stops it."""
    from .explore import serve

    def ready(url: str) -> None:
        click.echo(f"outlive explore: serving {url} (Ctrl-C to stop)")

    try:
        serve(host=host, port=port, backends=backends, scenario_files=scenario_files,
              timeout=timeout, ready=ready)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise CommandError(f"port {port} on {host} is already in use: pick another with "
                               "--port N, or --port 0 for a free one") from exc
        raise CommandError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from exc
    return EXIT_OK
