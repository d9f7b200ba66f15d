"""``python -m outlive_conformance.explore``: the explorer without the ``outlive`` command."""

from __future__ import annotations

import argparse
import sys

from outlive.errors import OutliveError

from .server import serve

__all__ = ["main", "parser"]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="outlive explore",
        description="Serve the explorer: the article's eight switches on a local page, each run "
        "through the real harness on memory:// (and beside it on a --backend you name).")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default: 127.0.0.1, loopback only)")
    p.add_argument("--port", type=int, default=8765, help="port (default: 8765; 0 picks a free one)")
    p.add_argument("--backend", action="append", default=[], metavar="URL",
                   help="a backend the page may run beside memory:// (repeatable), e.g. "
                   "temporal://127.0.0.1:7233")
    p.add_argument("--scenario", action="append", default=[], metavar="FILE",
                   help="a scenario file to offer besides the shipped ones (repeatable)")
    p.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS",
                   help="give up on one backend's run after this long (default: 120)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)

    def ready(url: str) -> None:
        print(f"outlive explore: serving {url} (Ctrl-C to stop)", flush=True)

    try:
        serve(host=args.host, port=args.port, backends=args.backend, scenario_files=args.scenario,
              timeout=args.timeout, ready=ready)
    except (OutliveError, OSError) as exc:
        print(f"outlive explore: {getattr(exc, 'message', None) or exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
