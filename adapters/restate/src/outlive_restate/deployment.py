"""``python -m outlive_restate.deployment --bind 127.0.0.1:PORT``: serve the ledger object.

``--import MODULE`` (repeatable) imports modules first, so the owner handlers they declare with
:func:`outlive_restate.owned.owner` are served as handlers of the ledger object.

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

from .services import ledger_app

__all__ = ["main"]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m outlive_restate.deployment")
    p.add_argument("--bind", required=True, help="HOST:PORT, loopback")
    p.add_argument("--protocol", choices=["bidi", "request_response"], default=None)
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import MODULE first (it may declare owner handlers)")
    args = p.parse_args(argv)
    for mod in args.imports:
        importlib.import_module(mod)
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
        await serve(ledger_app(args.protocol), config, shutdown_trigger=stop.wait)

    asyncio.run(run())


if __name__ == "__main__":
    main()
