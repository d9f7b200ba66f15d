"""``python -m outlive_restate._balancer --listen HOST:PORT --backend HOST:PORT ...``: replicas of
one deployment behind one address, balanced per HTTP/2 stream, as an L7 load balancer does.

Restate registers one address per deployment and keeps its HTTP/2 connections to it for a long
time (an L4 balancer would send every invocation to the replica that got the connection), so
replicas of a deployment sit behind a load balancer that spreads *streams*: each invocation is
one stream. This one picks a replica per stream, round robin over the replicas that answer, and
health-checks them with HTTP/2 PINGs on its own connection to each: a replica whose ack is late
by ``--unhealthy-after`` seconds (paused, wedged, gone) gets no new stream until it acks again,
as a readiness probe takes a pod out of a Service. A stream it had sent there that the replica
has not answered yet is sent again to a live one (an L7 balancer's retry of an unanswered
request; Restate only ever hears the replica that answers); a stream already answered stays
there, and Restate ends it when its own timeouts say so.

For tests and benchmarks of a replicated deployment on one machine (``RestateServer(replicas=2)``),
not for production: use your platform's L7 balancer there (Knative, Istio, Envoy, an ALB with
HTTP/2 to the targets).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import signal
import time
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions

__all__ = ["main", "serve"]

_Item = tuple[str, Any, bool]   # ("data", bytes, end) | ("headers", headers, end) | ("reset", code, _)


class _Side:
    """One HTTP/2 connection of the balancer (to Restate, or to one replica)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                 client: bool) -> None:
        self.reader, self.writer = reader, writer
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=client, header_encoding=None, validate_inbound_headers=False,
            validate_outbound_headers=False, normalize_outbound_headers=False))
        self.peer: dict[int, tuple[_Side, int]] = {}   # stream -> the other side's stream
        #: A request's frames so far, kept (on the side facing Restate) until its replica
        #: answers: a stream no replica answered yet can be sent again to another one.
        self.unanswered: dict[int, list[_Item]] = {}
        self.queued: dict[int, list[_Item]] = {}       # what waits for flow-control window
        self.closed = False

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data and not self.closed:
            self.writer.write(data)

    def put(self, sid: int, item: _Item) -> None:
        """Send ``item`` on ``sid`` after what already waits there, as the window allows."""
        self.queued.setdefault(sid, []).append(item)
        self.drain(sid)

    def drain(self, sid: int) -> None:
        items = self.queued.get(sid)
        while items:
            kind, value, end = items[0]
            try:
                if kind == "headers":
                    self.conn.send_headers(sid, value, end_stream=end)
                elif kind == "reset":
                    self.conn.reset_stream(sid, value)
                else:
                    window = min(self.conn.local_flow_control_window(sid),
                                 self.conn.max_outbound_frame_size)
                    if value and window <= 0:
                        break
                    chunk, rest = value[:window], value[window:]
                    self.conn.send_data(sid, chunk, end_stream=end and not rest)
                    if rest:
                        items[0] = (kind, rest, end)
                        continue
            except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError, KeyError):
                items.clear()     # the stream ended on this side: drop what was meant for it
                break
            items.pop(0)
        if not items:
            self.queued.pop(sid, None)
        self.flush()

    def close(self) -> None:
        self.closed = True
        with contextlib.suppress(Exception):
            self.writer.close()


class _Replica:
    """The balancer's own connection to one replica, its streams and its health."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.side: _Side | None = None
        self.ping_sent: float | None = None
        self.healthy = False

    async def connect(self, timeout: float) -> None:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port),
                                                timeout)
        side = _Side(reader, writer, client=True)
        side.conn.initiate_connection()
        side.conn.increment_flow_control_window(1 << 24)
        side.flush()
        self.side = side
        asyncio.get_running_loop().create_task(_pump(side, self))

    def ping(self) -> None:
        if self.side is not None and self.ping_sent is None:
            self.ping_sent = time.monotonic()
            self.side.conn.ping(b"outlive!")
            self.side.flush()

    def lost(self) -> None:
        self.side, self.ping_sent, self.healthy = None, None, False


class _Balancer:
    def __init__(self, replicas: list[_Replica], unhealthy_after: float) -> None:
        self.replicas = replicas
        self.unhealthy_after = unhealthy_after
        self._turn = itertools.cycle(range(len(replicas)))

    def pick(self) -> _Replica | None:
        """The next replica that answers its pings (round robin); any connected one if none does."""
        for wanted in (True, False):
            for _ in range(len(self.replicas)):
                rep = self.replicas[next(self._turn)]
                if rep.side is not None and (rep.healthy or not wanted):
                    return rep
        return None

    async def check(self, every: float) -> None:
        while True:
            now = time.monotonic()
            for rep in self.replicas:
                if rep.side is None:
                    with contextlib.suppress(OSError, asyncio.TimeoutError):
                        await rep.connect(self.unhealthy_after)
                elif rep.ping_sent is not None and now - rep.ping_sent > self.unhealthy_after:
                    if rep.healthy:
                        rep.healthy = False
                        self.resend(rep)
                rep.ping()
            await asyncio.sleep(every)

    def resend(self, rep: _Replica) -> None:
        """Send every stream ``rep`` has not answered to a replica that answers its pings.

        What an L7 balancer retries safely: a request whose replica sent nothing back (a paused
        process read nothing, or read it and will never be heard: Restate only ever sees the
        answer of the replica that answers). The stream on ``rep`` is reset.
        """
        if rep.side is None:
            return
        for usid, (down, dsid) in list(rep.side.peer.items()):
            frames = down.unanswered.get(dsid)
            if frames is None:
                continue
            other = self.pick()
            if other is None or other is rep or other.side is None or not other.healthy:
                return
            rep.side.peer.pop(usid, None)
            rep.side.put(usid, ("reset", 8, True))          # CANCEL
            up = other.side
            nsid = up.conn.get_next_available_stream_id()
            down.peer[dsid] = (up, nsid)
            up.peer[nsid] = (down, dsid)
            for item in frames:
                up.put(nsid, item)

    async def downstream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        side = _Side(reader, writer, client=False)
        side.conn.initiate_connection()
        side.conn.increment_flow_control_window(1 << 24)
        side.flush()
        await _pump(side, None, self)


async def _pump(side: _Side, replica: _Replica | None, balancer: _Balancer | None = None) -> None:
    """Read ``side`` until it closes, relaying each stream's frames to its peer stream."""
    try:
        while not side.closed:
            data = await side.reader.read(65536)
            if not data:
                break
            for event in side.conn.receive_data(data):
                _on(side, event, replica, balancer)
            side.flush()
    except (OSError, h2.exceptions.ProtocolError):
        pass
    finally:
        side.close()
        if replica is not None and replica.side is side:
            replica.lost()
        for other, osid in list(side.peer.values()):
            other.peer.pop(osid, None)
            other.put(osid, ("reset", 2, True))    # INTERNAL_ERROR: the other end went away


def _on(side: _Side, event: h2.events.Event, replica: _Replica | None,
        balancer: _Balancer | None) -> None:
    if isinstance(event, h2.events.RequestReceived) and balancer is not None:
        rep = balancer.pick()
        if rep is None or rep.side is None:
            side.put(event.stream_id, ("headers", [(b":status", b"503")], True))
            return
        up = rep.side
        usid = up.conn.get_next_available_stream_id()
        side.peer[event.stream_id] = (up, usid)
        up.peer[usid] = (side, event.stream_id)
        first: _Item = ("headers", event.headers, bool(event.stream_ended))
        side.unanswered[event.stream_id] = [first]
        up.put(usid, first)
    # every frame carries its own END_STREAM flag over (``stream_ended``): no StreamEnded case
    elif isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
        if event.stream_id in side.peer:
            other, osid = side.peer[event.stream_id]
            other.unanswered.pop(osid, None)      # answered: it stays on this replica
            other.put(osid, ("headers", event.headers, bool(event.stream_ended)))
    elif isinstance(event, h2.events.DataReceived):
        side.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        if event.stream_id in side.peer:
            other, osid = side.peer[event.stream_id]
            item: _Item = ("data", event.data, bool(event.stream_ended))
            kept = side.unanswered.get(event.stream_id)
            if kept is not None:
                kept.append(item)
            other.put(osid, item)
    elif isinstance(event, h2.events.StreamReset):
        got = side.peer.pop(event.stream_id, None)
        side.unanswered.pop(event.stream_id, None)
        if got is not None:
            other, osid = got
            other.peer.pop(osid, None)
            other.put(osid, ("reset", event.error_code or 0, True))
    elif isinstance(event, h2.events.WindowUpdated):
        for sid in list(side.queued) if event.stream_id == 0 else [event.stream_id]:
            side.drain(sid)
    elif isinstance(event, h2.events.PingAckReceived) and replica is not None:
        replica.ping_sent, replica.healthy = None, True
    elif isinstance(event, h2.events.ConnectionTerminated):
        side.closed = True


async def serve(listen: tuple[str, int], backends: list[tuple[str, int]], *,
                every: float = 0.02, unhealthy_after: float = 0.1,
                ready: asyncio.Event | None = None) -> None:
    """Balance ``listen`` over ``backends`` until cancelled."""
    balancer = _Balancer([_Replica(h, p) for h, p in backends], unhealthy_after)
    for rep in balancer.replicas:    # connected (and trusted) before the first stream comes
        with contextlib.suppress(OSError, asyncio.TimeoutError):
            await rep.connect(5.0)
            rep.healthy = True
    checks = asyncio.get_running_loop().create_task(balancer.check(every))
    server = await asyncio.start_server(balancer.downstream, *listen)
    if ready is not None:
        ready.set()
    try:
        async with server:
            await server.serve_forever()
    finally:
        checks.cancel()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m outlive_restate._balancer")
    p.add_argument("--listen", required=True, help="HOST:PORT, loopback")
    p.add_argument("--backend", action="append", required=True, help="HOST:PORT of a replica")
    p.add_argument("--every", type=float, default=0.02, help="seconds between health pings")
    p.add_argument("--unhealthy-after", type=float, default=0.1,
                   help="seconds without a ping's ack before a replica gets no new stream")
    args = p.parse_args(argv)

    async def run() -> None:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await serve(_address(args.listen), [_address(b) for b in args.backend],
                        every=args.every, unhealthy_after=args.unhealthy_after)

    asyncio.run(run())
    os._exit(0)


if __name__ == "__main__":
    main()
