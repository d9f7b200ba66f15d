"""``python -m outlive_restate._deployment --bind 127.0.0.1:PORT [--app MODULE:ATTR]``: serve an app.

``--app`` names the user's ASGI app (built with ``restate.app([...their services...,
*outlive_restate.services()])`` or :func:`outlive_restate.app`); without it, only outlive's own
objects are served (the ledger and the lease).

A separate process on purpose: Restate owns retries of invocations whose deployment vanished, so
this process can be killed and restarted on the same address mid-run and the work goes on.
Hypercorn serves h2c, so Restate uses the bidirectional protocol (``--protocol`` overrides).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import signal

from hypercorn.asyncio import serve
from hypercorn.config import Config

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m outlive_restate._deployment")
    p.add_argument("--bind", required=True, help="HOST:PORT, loopback")
    p.add_argument("--protocol", choices=["bidi", "request_response"], default=None)
    p.add_argument("--app", default=None, metavar="MODULE:ATTR",
                   help="the ASGI app to serve (default: outlive's own objects only)")
    args = p.parse_args(argv)
    if args.app:
        module, _, attr = args.app.partition(":")
        app = getattr(importlib.import_module(module), attr or "app")
    else:
        from . import app as outlive_app

        app = outlive_app(protocol=args.protocol)
    config = Config()
    config.bind = [args.bind]
    config.accesslog = None
    config.errorlog = "-"
    config.loglevel = "WARNING"
    config.graceful_timeout = 0.5

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def shutdown() -> None:
            # The process holds no state (it is all in Restate): if open HTTP/2 connections
            # keep hypercorn's graceful shutdown waiting, leave anyway after a second.
            stop.set()
            loop.call_later(1.0, os._exit, 0)

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, shutdown)
        await serve(app, config, shutdown_trigger=stop.wait)

    asyncio.run(run())


if __name__ == "__main__":
    main()
