"""``outlive supervise``: run a work definition on a backend, with a live status.

Everything shown is read from the ledger, so Ctrl-C loses nothing: the next run reads the same
ledger and carries on (an attempt left behind goes silent and is taken over after its lease).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from typing import Any

from .backend import open_backend
from .controller import wall_clock_ms
from .errors import ConfigError, GaveUp
from .hashing import short
from .records import WorkState
from .supervisor import Dispatcher, Status, Supervisor, TaskDispatcher, WorkDefinition

__all__ = ["load_definition", "run_supervise_command", "status_lines"]


def load_definition(ref: str) -> WorkDefinition:
    """Import ``module:NAME``: a :class:`WorkDefinition`, or a function returning one."""
    import importlib

    module, sep, attr = ref.partition(":")
    if not sep:
        raise ConfigError(f"expected MODULE:NAME for the work definition, got {ref!r}", ref=ref)
    try:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load the work definition {ref!r}: {exc}", ref=ref) from exc
    if callable(obj) and not isinstance(obj, WorkDefinition):
        obj = obj()
    if not isinstance(obj, WorkDefinition):
        raise ConfigError(f"{ref!r} is not a WorkDefinition", ref=ref)
    return obj


def status_lines(st: WorkState, now: int) -> list[str]:
    """The live status: attempts and their states, last sign of life, restores, acceptance,
    effects."""
    lines = [f"{st.work_id}: input {st.current_version}, epoch {st.epoch}"]
    for a in st.attempts:
        age = max(0, now - a.last_heartbeat)
        cands = [c for c in st.candidates if c.attempt == a.number]
        restored = {p.step for c in cands for p in c.parts
                    if (entry := next((j for j in st.journal if j.result_id == p.result_id), None))
                    is not None and entry.attempt != a.number}
        extra = f", waiting for {a.waiting_for}" if a.waiting_for else ""
        lines.append(
            f"  #{a.number} token {a.token} pinned {a.pinned_version}: {a.state.value}{extra}; "
            f"last sign of life {age / 1000:.1f} s ago; steps journaled "
            f"{sum(1 for j in st.journal if j.attempt == a.number)}"
            + (f", restored {', '.join(sorted(restored))}" if restored else ""))
    acc = st.latest_acceptance
    lines.append(f"  accepted: {short(acc.digest)} for {acc.version}" if acc else "  accepted: none")
    for e in st.effects:
        lines.append(f"  effect {e.op_key}: {e.state.value} (sent {e.sends}x)")
    return lines


async def _supervise(args: argparse.Namespace) -> int:
    definition = load_definition(args.definition)
    backend = await open_backend(args.backend)
    dispatcher: Dispatcher
    if args.dispatcher == "process":
        from ._process import SubprocessDispatcher

        dispatcher = SubprocessDispatcher(log_dir=args.log_dir, warm=args.warm)
    else:
        dispatcher = TaskDispatcher(backend)
    sup = Supervisor(backend, definition, dispatcher)
    shown: list[str] = []

    def show(status: Status) -> None:
        if args.quiet:
            return
        for action in status.actions:
            print(f"  > {action}")
        lines = status_lines(status.state, wall_clock_ms())
        # Redraw only when something other than the ages changed.
        key = [ln.split("; last sign of life")[0] for ln in lines]
        if key != shown:
            shown[:] = key
            print("\n".join(lines), flush=True)

    try:
        if args.publish:
            from .supervisor import resolve

            if definition.inputs is None:
                raise ConfigError("--publish needs a definition with an inputs loader")
            content = resolve(definition.inputs)(args.publish)
            if asyncio.iscoroutine(content):
                content = await content
            await sup.controller.open_work(definition.work_id, definition.policy)
            await sup.controller.publish(definition.work_id, args.publish, content)
        else:
            st = await backend.load(definition.work_id)
            if st is None or st.current_version is None:
                # Nothing to run yet: say what the supervisor waits for, instead of silence.
                how = ("--publish VERSION (the definition's inputs function loads it)"
                       if definition.inputs is not None else
                       "an inputs function on the definition and --publish VERSION")
                print(f"outlive supervise: {definition.work_id} has no input version on "
                      f"{args.backend} yet; waiting for one to be published (Ctrl-C to stop). "
                      f"To publish from here, give {how}; from a program, "
                      "Controller.publish(work_id, version, parts).", file=sys.stderr, flush=True)
        done = await sup.run(on_status=show)
        print(f"done: {short(done.acceptance.digest)} accepted for {done.acceptance.version} after "
              f"{len(done.attempts)} attempt(s); every effect confirmed")
        return 0
    except asyncio.CancelledError:
        # Ctrl-C: show where the work stands now, read from the ledger (the last redraw may be
        # a pass behind), then stop
        if not args.quiet:
            with contextlib.suppress(Exception):
                st = await backend.load(definition.work_id)
                if st is not None:
                    print("\n".join(status_lines(st, wall_clock_ms())), flush=True)
        raise
    except GaveUp as exc:
        print(f"outlive: GaveUp: {exc.message}", file=sys.stderr)
        for a in exc.details.get("attempts", []):
            print(f"  #{a['number']} token {a['token']} {a['state']}", file=sys.stderr)
        return 3
    finally:
        await dispatcher.close()
        await backend.close()


def run_supervise_command(args: argparse.Namespace) -> int:
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return asyncio.run(_supervise(args))
    except KeyboardInterrupt:
        print("\nstopped; run the same command again to carry on (the ledger has everything)",
              file=sys.stderr)
        return 130
