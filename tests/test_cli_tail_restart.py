"""``tail -f`` waits through a Redis restart and goes on where it was (issue 41).

The watch under it retries a dropped connection for a few seconds only; an operator's tail
must outlive a restart that takes longer. The test starts a redis-server of its own on a
free loopback port (append-only file in a temporary directory, so the data is there again
after the restart), stops it by its pid, leaves it down for 4 s, starts it again on the
same port, and checks that ``tail -f`` said so on stderr, kept running, and printed every
event once, in order: those appended before, the one appended while it was still waiting,
and one appended after it came back.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from _local_cluster import require_or_skip
from redis_agent_sessions import Event, RedisSessionService

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.cli]

APP, USER, SID = "restart_app", "restart_user", "restart"
DOWN_SECONDS = 4.0


class Server:
    """A redis-server this test started and alone stops (by its own pid)."""

    def __init__(self, binary: str, port: int, dir: Path) -> None:
        self.port = port
        self.argv = [
            binary,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--dir", str(dir),
            "--appendonly", "yes",
            "--save", "",
            "--daemonize", "no",
        ]  # fmt: skip
        self.log = dir / "redis.log"
        self.proc = self._spawn()

    def _spawn(self) -> subprocess.Popen[bytes]:
        with open(self.log, "ab") as log:
            proc = subprocess.Popen(
                self.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + 10
        while True:
            try:
                with redis.Redis(port=self.port, socket_timeout=1) as client:
                    client.ping()
                return proc
            except redis.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    pytest.fail(f"redis-server on {self.port} did not start:\n{self.tail()}")
                time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM: Redis flushes its append-only file and exits."""
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=10)

    def start(self) -> None:
        assert self.proc.poll() is not None, "still running"
        self.proc = self._spawn()

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-8:])

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    binary = shutil.which("redis-server")
    if binary is None:
        require_or_skip("redis-server is not on PATH")
    assert binary is not None
    started = Server(binary, _free_port(), tmp_path)
    yield started
    if started.proc.poll() is None:
        started.proc.kill()
        started.proc.wait()


class Lines:
    """The lines a stream of the tail printed so far, read as they come."""

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self.lines: list[str] = []
        self.task = asyncio.create_task(self._read(stream))

    async def _read(self, stream: asyncio.StreamReader) -> None:
        async for line in stream:
            self.lines.append(line.decode().rstrip("\n"))


async def test_tail_f_waits_through_a_restart_and_goes_on_where_it_was(server: Server) -> None:
    async with RedisSessionService.from_url(server.url) as service:
        session = await service.create_session(app_name=APP, user_id=USER, session_id=SID)
        await service.append_event(session, Event(author="before-1"))
    tail = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "redis_agent_sessions", "tail", "-f", "--json"],
        *["--url", server.url, APP, USER, SID],
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert tail.stdout is not None
    assert tail.stderr is not None
    out, err = Lines(tail.stdout), Lines(tail.stderr)

    def authors() -> list[str]:
        return [json.loads(line)["author"] for line in out.lines if line.startswith("{")]

    def report() -> str:
        code = tail.returncode
        state = "running" if code is None else f"exited {code}"
        return f"tail {state}\nstdout: {out.lines}\nstderr: {err.lines}"

    async def until(what: str, check: Callable[[], bool], seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not check():
            assert tail.returncode is None, f"{what}: the tail ended\n{report()}"
            assert time.monotonic() < deadline, f"{what}: not within {seconds} s\n{report()}"
            await asyncio.sleep(0.05)

    async def append(author: str) -> None:
        async with RedisSessionService.from_url(server.url) as service:
            found = await service.get_session(app_name=APP, user_id=USER, session_id=SID)
            assert found is not None
            await service.append_event(found, Event(author=author))

    try:
        await until("the first event", lambda: authors() == ["before-1"], 15)
        await append("before-2")
        await until("a live append", lambda: authors()[-1:] == ["before-2"], 10)

        server.stop()
        await asyncio.sleep(DOWN_SECONDS)
        # Down until the watch under the tail gave up (about 3 s of retries), so that the
        # restart is one the tail itself must wait through.
        await until("the loss told", lambda: any("lost Redis" in x for x in err.lines), 10)
        server.start()
        # Appended while the tail may still be waiting between two tries: not lost.
        await append("while-it-waited")
        await until("the tail back", lambda: "while-it-waited" in authors(), 20)
        assert any("reconnected" in line for line in err.lines), report()
        await append("after")
        await until("a live append again", lambda: authors()[-1:] == ["after"], 10)
        assert authors() == ["before-1", "before-2", "while-it-waited", "after"], report()

        async with RedisSessionService.from_url(server.url) as service:
            await service.delete_session(app_name=APP, user_id=USER, session_id=SID)
        assert await asyncio.wait_for(tail.wait(), 15) == 0, report()
        await asyncio.gather(out.task, err.task)
        # One line when Redis went away, one when it came back, and how the tail ended.
        where = f"127.0.0.1:{server.port}"
        assert [line.split(" (")[0] for line in err.lines] == [
            f"lost Redis at {where}",
            f"reconnected to Redis at {where}",
            "(the session was deleted or expired)",
        ], report()
    finally:
        if tail.returncode is None:
            tail.kill()
            await tail.wait()
