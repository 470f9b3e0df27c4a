"""A small fault-injecting TCP proxy on 127.0.0.1, for cutting a link between two real processes.

``FaultyProxy(ports)`` forwards every connection to the first of its targets that accepts (the
others are fallbacks, as a load balancer in front of several scheduler nodes would), byte for byte
(gRPC's HTTP/2 streams pass unchanged). ``cut("reset")`` resets every open connection and resets each new
one as soon as it is accepted (a link that is down: peers notice at once and reconnect with their
backoff); ``cut("blackhole")`` keeps connections open but drops what they carry (a partition:
peers notice only through their keep-alives and deadlines). ``heal()`` forwards again."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct

log = logging.getLogger("meridian.tests.chaos.proxy")
_CHUNK = 64 * 1024


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0), as a failed link looks to the peer."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultyProxy:
    def __init__(self, target_ports: list[int], name: str = "proxy"):
        self.targets = list(target_ports)  # tried in order for each new connection
        self.name = name
        self.mode = "pass"
        self.port = 0
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._tasks: set[asyncio.Task] = set()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self, port: int = 0) -> FaultyProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self._drop_all()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def cut(self, mode: str = "reset") -> None:
        if mode not in ("reset", "blackhole"):
            raise ValueError(f"cut mode must be 'reset' or 'blackhole', got {mode!r}")
        self.mode = mode
        if mode == "reset":
            self._drop_all()
        log.info("event=link_cut proxy=%s mode=%s", self.name, mode)

    def heal(self) -> None:
        was, self.mode = self.mode, "pass"
        if was == "blackhole":
            self._drop_all()  # what a partition held is gone: the peers start over
        log.info("event=link_healed proxy=%s", self.name)

    def _drop_all(self) -> None:
        for client, upstream in list(self._pairs):
            _reset(client)
            _reset(upstream)
        self._pairs.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)  # type: ignore[arg-type]
        try:
            if self.mode == "reset":
                _reset(writer)
                return
            opened = None
            for port in list(self.targets):
                try:
                    opened = await asyncio.open_connection("127.0.0.1", port)
                    break
                except OSError:
                    continue
            if opened is None:
                _reset(writer)
                return
            up_reader, up_writer = opened
            self.connections += 1
            pair = (writer, up_writer)
            self._pairs.add(pair)
            try:
                await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
            finally:
                self._pairs.discard(pair)
                for w in pair:
                    w.close()
        finally:
            self._tasks.discard(task)  # type: ignore[arg-type]

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError, asyncio.IncompleteReadError):
            while True:
                data = await reader.read(_CHUNK)
                if not data:
                    break
                if self.mode == "blackhole":
                    continue
                writer.write(data)
                await writer.drain()
            with contextlib.suppress(OSError, RuntimeError):
                writer.write_eof()
