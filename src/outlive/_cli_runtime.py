"""``outlive serve``, ``outlive start`` and ``outlive works``: the runtime on the command line.

``serve`` runs a :class:`~outlive.runtime.Runtime` for the kinds it is given (``module:NAME``,
each an :class:`outlive.Kind`), with a live status line on stderr; Ctrl-C drains it (attempts
running here end, the ledger keeps the rest for the next runtime). ``start`` starts a work from
a JSON file of parts; ``works`` lists works with their state and last error. Every command takes
``--backend URL``, defaulting to ``$OUTLIVE_BACKEND`` and then ``sqlite:///outlive.db``.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from typing import Any

import click

from .errors import ConfigError
from .runtime import Kind, Runtime, WorkStatus
from .supervisor import import_ref

__all__ = ["register"]

_BACKEND = click.option("--backend", "backend", envvar="OUTLIVE_BACKEND",
                        default="sqlite:///outlive.db", show_default=True, metavar="URL",
                        help="Backend URL (default from $OUTLIVE_BACKEND).")


def _kind(ref: str) -> Kind:
    obj = import_ref(ref, "KIND")
    if not isinstance(obj, Kind):
        raise ConfigError(f"{ref!r} is not an outlive.Kind", ref=ref)
    return obj


def _row(w: WorkStatus) -> dict[str, Any]:
    err = w.last_error
    cur = w.state.current_attempt
    return {"work_id": w.work_id, "kind": w.kind, "state": w.status,
            "version": w.state.current_version, "attempts": len(w.state.attempts),
            "attempt_state": cur.state.value if cur is not None else None,
            "last_error": None if err is None else {"type": err.type, "message": err.message,
                                                    "traceback": err.traceback}}


def _table(rows: list[dict[str, Any]]) -> None:
    if not rows:
        click.echo("no works")
        return
    for r in rows:
        err = r["last_error"]
        click.echo(f"{r['work_id']}  {r['kind'] or '-'}  {r['state']}  version {r['version']}  "
                   f"attempts {r['attempts']}"
                   + (f"  last error {err['type']}: {err['message']}" if err else ""))


def register(cli: click.Group) -> None:
    """Add the runtime's commands to the ``outlive`` group."""

    @cli.command()
    @click.argument("kinds", nargs=-1, required=True, metavar="MODULE:KIND...")
    @_BACKEND
    @click.option("--discover", type=float, default=1.0, show_default=True, metavar="SECONDS",
                  help="How often to look for works started by other processes.")
    @click.option("--quiet", is_flag=True, help="No live status line.")
    def serve(kinds: tuple[str, ...], backend: str, discover: float, quiet: bool) -> int:
        """Run a runtime for KINDS: carry on every open work of them, run new ones as they are
        started (by `outlive start` or any client), until Ctrl-C drains it."""
        resolved = [_kind(k) for k in kinds]

        async def go() -> int:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            async with Runtime(backend, resolved, discover=discover) as rt:
                click.echo(f"outlive: serving {', '.join(k.name for k in resolved)} on {backend}",
                           err=True)
                while not stop.is_set():
                    if not quiet:
                        counts: dict[str, int] = {}
                        for w in await rt.works():
                            if w.kind in rt.kinds:
                                counts[w.status] = counts.get(w.status, 0) + 1
                        line = "  ".join(f"{k} {v}" for k, v in sorted(counts.items()))
                        if sys.stderr.isatty():
                            click.echo(f"\r\x1b[2K{line or 'no works'}", err=True, nl=False)
                    try:
                        await asyncio.wait_for(stop.wait(), 1.0)
                    except TimeoutError:
                        pass
                click.echo("\noutlive: draining", err=True)
                await rt.drain()
            return 0

        return asyncio.run(go())

    @cli.command()
    @click.argument("kind", metavar="KIND")
    @click.argument("work_id")
    @click.option("--publish", "publish", nargs=2, required=True, metavar="VERSION FILE",
                  help="The first input version: its name and a JSON file of {part: content}.")
    @_BACKEND
    @click.option("--wait", is_flag=True, help="Wait for the work's end and print it.")
    def start(kind: str, work_id: str, publish: tuple[str, str], backend: str, wait: bool) -> int:
        """Start WORK_ID as a work of KIND (a kind's name, or MODULE:KIND). A runtime serving the
        kind runs it; starting an existing id returns the same work."""
        version, path = publish
        try:
            with open(path, encoding="utf-8") as fh:
                parts = json.load(fh)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read parts from {path}: {exc}", file=path) from exc
        if not isinstance(parts, dict):
            raise ConfigError(f"{path} must hold a JSON object of part name -> content", file=path)
        target: Kind | str = _kind(kind) if ":" in kind else kind

        async def go() -> int:
            async with Runtime(backend, [], supervise=False, report_errors=False) as rt:
                handle = await rt.start(target, work_id, version, parts)
                click.echo(f"started {handle.work_id} ({target if isinstance(target, str) else target.name}) "
                           f"with version {version}")
                if wait:
                    done = await handle.result()
                    click.echo(f"completed: accepted {done.acceptance.digest[:12]} for "
                               f"{done.acceptance.version}")
            return 0

        return asyncio.run(go())

    @cli.command()
    @_BACKEND
    @click.option("--state", "state", default=None,
                  type=click.Choice(["open", "running", "waiting", "queued", "completed", "failed"]),
                  help="Only works in this state.")
    @click.option("--kind", "kind", default=None, help="Only works of this kind.")
    @click.option("--json", "as_json", is_flag=True, help="JSON to stdout.")
    def works(backend: str, state: str | None, kind: str | None, as_json: bool) -> int:
        """List works with their kind, state and last error."""

        async def go() -> int:
            async with Runtime(backend, [], supervise=False, report_errors=False) as rt:
                rows = [_row(w) for w in await rt.works(state=state, kind=kind)]
            if as_json:
                click.echo(json.dumps(rows, indent=2, default=str))
            else:
                _table(rows)
            return 0

        return asyncio.run(go())




