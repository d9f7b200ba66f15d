"""Several processes share one langgraph+sqlite file: no command lost, no torn read."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import outlive
from outlive import Controller

HAMMER = textwrap.dedent("""
    import asyncio, sys
    import outlive
    from outlive import ledger as L
    async def main():
        b = await outlive.open_backend(sys.argv[1])
        for i in range(int(sys.argv[2])):
            st = await b.load("w")          # a read racing other processes' commits
            att = st.attempts[0]
            await b.execute("w", L.Heartbeat(attempt=att.number, token=att.token, at=i,
                                             secret=sys.argv[3] or None))
        await b.close()
    asyncio.run(main())
""")


async def test_processes_share_the_ledger(tmp_path: Path) -> None:
    url = f"langgraph+sqlite:///{tmp_path / 'lg.db'}"
    b = await outlive.open_backend(url)
    try:
        ctl = Controller(b, clock=lambda: 0)
        await ctl.open_work("w")
        await ctl.publish("w", "v1", {"s1": "x"})
        att = await ctl.admit("w")
        procs = [subprocess.Popen([sys.executable, "-c", HAMMER, url, "100", att.secret or ""],
                                  stderr=subprocess.PIPE) for _ in range(4)]
        codes = [p.wait(timeout=120) for p in procs]
        errors = [p.stderr.read().decode()[-400:] for p in procs if p.stderr and p.returncode]
        assert codes == [0, 0, 0, 0], errors
        st = await b.load("w")
        assert st is not None and st.attempts[0].heartbeats == 400
    finally:
        await b.close()
