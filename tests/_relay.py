"""A TCP relay in front of a Redis node whose client-side sockets the test can reset.

``CLIENT KILL`` closes a connection with a FIN, which a client reads as an orderly end: no
transport is torn down. A reset (RST) is what a server, a proxy or a load balancer that drops
a connection sends, and what makes asyncio tear the idle connection's transport down under
redis-py (redis-py issue 4287). A socket closed with ``SO_LINGER`` 0 sends one.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from collections.abc import AsyncIterator

__all__ = ["Relay", "relays"]


class Relay:
    """Listens on a free loopback port and relays each connection to ``host:port``."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._clients: list[asyncio.StreamWriter] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> Relay:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._clients.append(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        for source, sink in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(_pump(source, sink))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def reset(self) -> int:
        """Reset (RST) every client connection open now; how many."""
        count = 0
        for writer in self._clients:
            sock = writer.get_extra_info("socket")
            if sock is None or writer.transport.is_closing():
                continue
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            count += 1
        self._clients = []
        return count

    async def close(self) -> None:
        self.reset()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Copy ``source`` to ``sink`` until either side ends; then close ``sink``."""
    try:
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        sink.close()


@contextlib.asynccontextmanager
async def relays(targets: list[tuple[str, int]]) -> AsyncIterator[dict[tuple[str, int], Relay]]:
    """A started relay per target, closed at the end."""
    started = {target: await Relay(*target).start() for target in targets}
    try:
        yield started
    finally:
        for relay in started.values():
            await relay.close()
