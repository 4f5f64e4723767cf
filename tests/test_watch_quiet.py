"""A watch outlives any quiet, whatever the client's socket timeout, and still ends promptly
when the session is deleted: through the API and through ``tail -f``.

redis-py 8.1 waits ``socket_timeout`` (5 s by default) for any reply, and a blocked
``XREAD`` sends none until it wakes up. A client whose timeout is shorter than the block
timed out on every quiet read and, after a few in a row, gave up. The clients here time out
after 0.3 s, and the quiet lasts longer than every retry a watch allows would take.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from _servers import skip_without
from redis_agent_sessions import Event, RedisSessionService

APP, USER, SID = "quiet_app", "quiet_user", "quiet"
SOCKET_TIMEOUT = 0.3
# Longer than six client timeouts plus the backoff between them (about 5 s), which is when
# a watch that counted each timeout as a failure raised.
QUIET_SECONDS = 6.0
# Deletion is noticed at the next wake-up: at most half the socket timeout with these
# clients (a few seconds allowed for a loaded machine).
PROMPT_SECONDS = 3.0


@pytest.fixture(params=["REDIS_URL", "REDIS_CLUSTER_URL"])
async def quiet_service(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Any, str]]:
    url = skip_without(request.param)
    cluster = request.param == "REDIS_CLUSTER_URL"
    async with RedisSessionService.from_url(
        url, cluster=cluster, socket_timeout=SOCKET_TIMEOUT
    ) as service:
        await service.delete_session(app_name=APP, user_id=USER, session_id=SID)
        joiner = "&" if "?" in url else "?"
        yield service, f"{url}{joiner}socket_timeout={SOCKET_TIMEOUT}&cluster={cluster}".lower()


async def follow(service: RedisSessionService, seen: list[str]) -> None:
    async for event in service.watch(app_name=APP, user_id=USER, session_id=SID):
        seen.append(event.author)


async def wait_for(what: str, check: Any, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {seconds} s"
        await asyncio.sleep(0.05)


@pytest.mark.real
@pytest.mark.slow
@pytest.mark.cli
async def test_a_quiet_longer_than_the_socket_timeout_ends_neither_watch_nor_tail(
    quiet_service: tuple[Any, str],
) -> None:
    service, url = quiet_service
    session = await service.create_session(app_name=APP, user_id=USER, session_id=SID)
    await service.append_event(session, Event(author="before"))
    seen: list[str] = []
    watch = asyncio.create_task(follow(service, seen))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
    command = [sys.executable, "-m", "redis_agent_sessions", "tail", "-f", "--json"]
    tail = subprocess.Popen(  # noqa: ASYNC220 - started once; read in a thread below
        [*command, "--url", url, APP, USER, SID],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        # The quiet starts once the command follows: on a loaded machine its start-up alone
        # once outlasted the quiet, and it found the session already deleted.
        stdout = tail.stdout
        assert stdout is not None
        first = b""
        while b'"author"' not in first:
            first = await asyncio.wait_for(asyncio.to_thread(stdout.readline), 60)
            assert first, tail.communicate()
        assert b'"before"' in first, first
        await asyncio.sleep(QUIET_SECONDS)
        assert not watch.done(), watch.exception()
        assert tail.poll() is None, tail.communicate()
        await service.append_event(session, Event(author="after-the-quiet"))
        await wait_for("the watch sees the append", lambda: seen == ["after-the-quiet"], 10)

        # Deleted during another quiet: both end promptly, and normally.
        await asyncio.sleep(SOCKET_TIMEOUT * 3)
        await service.delete_session(app_name=APP, user_id=USER, session_id=SID)
        deleted = time.monotonic()
        await asyncio.wait_for(watch, PROMPT_SECONDS)
        out, err = await asyncio.to_thread(tail.communicate, timeout=PROMPT_SECONDS + 5)
        assert tail.returncode == 0, err
        assert time.monotonic() - deleted < PROMPT_SECONDS + 5
        authors = [line for line in out.decode().splitlines() if '"author"' in line]
        assert len(authors) == 1, authors
        assert '"after-the-quiet"' in authors[0], authors
        assert "deleted or expired" in err.decode()
    finally:
        watch.cancel()
        if tail.poll() is None:
            tail.kill()
            tail.wait()
