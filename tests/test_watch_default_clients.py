"""A watch on a client built with redis-py's defaults outlives any quiet (issue 41).

``Redis.from_url(url)`` (and so ``RedisSessionService.from_url(url)`` and ``tail -f``) names
no ``socket_timeout``; redis-py's connection then applies its own 5 s. A watch that looked
for the timeout only among the client's arguments found none, blocked 5 s in ``XREAD``,
timed out on the client at every quiet read, and raised after six in a row (about 33 s).
Nothing here is patched or shortened: every client is built as a user builds it, and the
quiet outlasts those six timeouts and the backoff between them. The watches run side by
side, so the test takes one quiet, not one per client.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from _servers import REQUIRE_SERVERS, skip_without
from redis_agent_sessions import Event, RedisSessionService, SessionServiceConfig

APP, USER = "quiet_app", "quiet_user"
# Six client timeouts of 5 s and the backoff between them (3.1 s) end an unfixed watch at
# about 33 s; a few seconds more so that a loaded machine still shows it.
QUIET_SECONDS = 38.0
# A deletion is noticed at the next wake-up: at most half the 5 s timeout, plus slack.
PROMPT_SECONDS = 8.0


@dataclass
class Watcher:
    """One service, built on one kind of default client, watching its own session."""

    name: str
    service: Any
    event: Callable[[str], Any]
    client: Any = None
    """The client passed in, which the service leaves open when it closes."""
    seen: list[str] = field(default_factory=list)
    task: asyncio.Task[None] | None = None

    @property
    def session_id(self) -> str:
        return "s-" + "".join(c if c.isalnum() else "-" for c in self.name)

    def ids(self) -> dict[str, str]:
        return {"app_name": APP, "user_id": USER, "session_id": self.session_id}

    async def follow(self) -> None:
        async for event in self.service.watch(**self.ids()):
            self.seen.append(event.author)

    async def append(self, author: str) -> None:
        session = await self.service.get_session(**self.ids())
        await self.service.append_event(session, self.event(author))


def _default_clients(config: SessionServiceConfig) -> list[Watcher]:
    """Every way of building a client with redis-py's defaults that the docs show."""
    url = skip_without("REDIS_URL")
    parts = urlsplit(url)
    db = int(parts.path.strip("/") or 0)
    # The prefix in the URL: a config passed with a URL must not repeat the URL's settings.
    with_prefix = f"{url}?key_prefix={config.key_prefix}"
    plain = Redis(host=parts.hostname or "127.0.0.1", port=parts.port or 6379, db=db)
    watchers = [
        Watcher("service from_url", RedisSessionService.from_url(with_prefix), _event),
        _given("Redis(host, port)", plain, config),
        _given("Redis.from_url", Redis.from_url(url), config),
    ]
    cluster_url = os.environ.get("REDIS_CLUSTER_URL")
    if cluster_url:
        node = urlsplit(cluster_url)
        built = RedisCluster(host=node.hostname or "127.0.0.1", port=node.port or 6379)
        watchers += [
            Watcher(
                "service from_url ?cluster=true",
                RedisSessionService.from_url(
                    f"{cluster_url}?cluster=true&key_prefix={config.key_prefix}"
                ),
                _event,
            ),
            _given("RedisCluster.from_url", RedisCluster.from_url(cluster_url), config),
            _given("RedisCluster(host, port)", built, config),
        ]
    elif REQUIRE_SERVERS:
        pytest.fail("REDIS_CLUSTER_URL is not set but RAS_REQUIRE_SERVERS=1")
    if _installed("google.adk"):
        from google.adk.events import Event as AdkEvent

        from redis_agent_sessions.adk import RedisSessionService as AdkService

        adk = AdkService.from_url(with_prefix)
        watchers.append(Watcher("ADK service from_url", adk, lambda a: AdkEvent(author=a)))
    return watchers


def _event(author: str) -> Event:
    return Event(author=author)


def _given(name: str, client: Any, config: SessionServiceConfig) -> Watcher:
    return Watcher(name, RedisSessionService(client, config=config), _event, client)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def _tail(url: str, prefix: str, session_id: str) -> subprocess.Popen[bytes]:
    """``tail -f`` as an operator runs it: the URL alone, nothing about timeouts."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "redis_agent_sessions", "tail", "-f", "--json"]
    flags = ["--url", url, "--key-prefix", prefix]
    return subprocess.Popen(
        [*command, *flags, APP, USER, session_id],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )


async def _drop(prefix: str) -> None:
    """Delete what the sessions left under ``prefix`` (the apps index)."""
    urls = [os.environ.get("REDIS_URL"), os.environ.get("REDIS_CLUSTER_URL")]
    for url, cluster in zip(urls, (False, True), strict=True):
        if not url:
            continue
        client: Any = RedisCluster.from_url(url) if cluster else Redis.from_url(url)
        async with client:
            async for key in client.scan_iter(match=f"{prefix}:*", count=1000):
                await client.delete(key)


async def _wait_for(what: str, check: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {seconds} s"
        await asyncio.sleep(0.05)


async def _each(watchers: list[Watcher], step: Callable[[Watcher], Awaitable[Any]]) -> None:
    await asyncio.gather(*(step(w) for w in watchers))


def _ended(watchers: list[Watcher]) -> dict[str, str]:
    """The watches that ended, with how (their error, or a normal end)."""
    found = {}
    for w in watchers:
        if w.task is not None and w.task.done():
            error = None if w.task.cancelled() else w.task.exception()
            found[w.name] = f"{type(error).__name__}: {error}" if error else "ended"
    return found


@pytest.mark.real
@pytest.mark.slow
async def test_watches_on_default_clients_outlive_a_quiet_longer_than_their_retries() -> None:
    prefix = f"quiet-{uuid.uuid4().hex[:8]}"
    watchers = _default_clients(SessionServiceConfig(key_prefix=prefix))
    tail: subprocess.Popen[bytes] | None = None
    try:
        await _each(watchers, lambda w: w.service.create_session(**w.ids()))
        await _each(watchers, lambda w: w.append("before"))
        for w in watchers:
            w.task = asyncio.create_task(w.follow())
        if _installed("rich"):  # the [cli] extra
            tail = _tail(skip_without("REDIS_URL"), prefix, watchers[0].session_id)
        await asyncio.sleep(QUIET_SECONDS)
        ended = _ended(watchers)
        if tail is not None and tail.poll() is not None:
            ended["tail -f"] = f"exit {tail.returncode}: {tail.communicate()[1].decode().strip()}"
        assert ended == {}

        await _each(watchers, lambda w: w.append("after-the-quiet"))
        for w in watchers:
            seen = w.seen
            await _wait_for(f"{w.name} sees it", lambda s=seen: s == ["after-the-quiet"], 10)

        # Deleted: every watch ends, normally and promptly, as documented.
        await _each(watchers, lambda w: w.service.delete_session(**w.ids()))
        tasks = [w.task for w in watchers if w.task is not None]
        await asyncio.wait_for(asyncio.gather(*tasks), PROMPT_SECONDS)
        if tail is not None:
            out, err = await asyncio.to_thread(tail.communicate, timeout=PROMPT_SECONDS + 5)
            assert tail.returncode == 0, err.decode()
            authors = [line for line in out.decode().splitlines() if '"author"' in line]
            assert ['"before"' in authors[0], '"after-the-quiet"' in authors[1]] == [True, True]
            assert "deleted or expired" in err.decode()
    finally:
        for w in watchers:
            if w.task is not None:
                w.task.cancel()
            await w.service.delete_session(**w.ids())
        await _drop(prefix)
        for w in watchers:
            await w.service.aclose()
            if w.client is not None:
                await w.client.aclose()
        if tail is not None and tail.poll() is None:
            tail.kill()
            tail.wait()
