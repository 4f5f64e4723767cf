"""Paging through a session's events, and watching new ones live (every backend)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

import pytest
from redis.exceptions import TimeoutError as RedisTimeoutError

from redis_agent_sessions import (
    Event,
    EventActions,
    InvalidInputError,
    RedisSessionService,
    SessionNotFoundError,
)
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.sessions import _event_stream

APP, USER = "app", "user"


async def session_with(service: RedisSessionService, n: int, sid: str = "s") -> Any:
    s = await service.create_session(app_name=APP, user_id=USER, session_id=sid)
    for i in range(n):
        await service.append_event(
            s, Event(author=f"e{i}", actions=EventActions(state_delta={"i": i}))
        )
    return s


async def all_pages(service: RedisSessionService, limit: int, **kw: Any) -> list[list[str]]:
    pages, token = [], None
    while True:
        page = await service.list_events(
            app_name=APP, user_id=USER, session_id="s", limit=limit, page_token=token, **kw
        )
        pages.append([e.author for e in page.events])
        token = page.next_page_token
        if token is None:
            return pages


async def test_pages_cover_every_event_once_in_either_order(service: RedisSessionService) -> None:
    s = await session_with(service, 7)
    assert await all_pages(service, 3) == [["e0", "e1", "e2"], ["e3", "e4", "e5"], ["e6"]]
    assert await all_pages(service, 3, newest_first=True) == [
        ["e6", "e5", "e4"],
        ["e3", "e2", "e1"],
        ["e0"],
    ]
    # An exact multiple ends without an empty page; the events are the stored ones.
    assert await all_pages(service, 7) == [[f"e{i}" for i in range(7)]]
    page = await service.list_events(app_name=APP, user_id=USER, session_id="s", limit=100)
    assert page.events == s.events
    assert page.next_page_token is None


async def test_a_page_reads_only_its_events(service: RedisSessionService) -> None:
    await session_with(service, 300)
    decoded: list[int] = []
    codec = service._engine.ctx.codec
    original = codec.decode_events

    def counting(raws: Any, schemas: Any = None) -> Any:
        decoded.append(len(raws))
        return original(raws, schemas)

    codec.decode_events = counting  # type: ignore[method-assign]
    page = await service.list_events(
        app_name=APP, user_id=USER, session_id="s", limit=5, newest_first=True
    )
    assert [e.author for e in page.events] == ["e299", "e298", "e297", "e296", "e295"]
    assert decoded == [5]


async def test_events_appended_between_pages_are_found_by_the_next(
    service: RedisSessionService,
) -> None:
    s = await session_with(service, 2)
    first = await service.list_events(app_name=APP, user_id=USER, session_id="s", limit=2)
    assert first.next_page_token is None  # nothing more *yet*: a caller tails with watch
    await service.append_event(s, Event(author="late"))
    page = await service.list_events(app_name=APP, user_id=USER, session_id="s", limit=1)
    rest = await service.list_events(
        app_name=APP, user_id=USER, session_id="s", limit=5, page_token=page.next_page_token
    )
    assert [e.author for e in rest.events] == ["e1", "late"]


async def test_bad_paging_input_is_refused(service: RedisSessionService) -> None:
    await session_with(service, 3)
    await session_with(service, 3, sid="other")
    page = await service.list_events(app_name=APP, user_id=USER, session_id="s", limit=1)
    token = page.next_page_token
    assert token is not None
    for bad in (0, -1, 10_001, 1.5, True, "5"):
        with pytest.raises(InvalidInputError, match="limit"):
            await service.list_events(app_name=APP, user_id=USER, session_id="s", limit=bad)
    for other in ({"session_id": "other"}, {"session_id": "s", "newest_first": True}):
        with pytest.raises(InvalidInputError, match="another listing or order"):
            await service.list_events(app_name=APP, user_id=USER, page_token=token, **other)
    for junk in ("", "not a token!", "W10", 5):
        with pytest.raises(InvalidInputError, match="page_token"):
            await service.list_events(app_name=APP, user_id=USER, session_id="s", page_token=junk)
    with pytest.raises(SessionNotFoundError):
        await service.list_events(app_name=APP, user_id=USER, session_id="missing")


async def collect(events: Any, n: int) -> list[Event]:
    out = []
    async for event in events:
        out.append(event)
        if len(out) == n:
            break
    return out


async def test_a_watch_sees_what_another_worker_appends_in_order(
    service: RedisSessionService, make_service: Any
) -> None:
    s = await session_with(service, 2)
    # From a given event, so the test never depends on when the watch's first read runs.
    watch = service.watch(
        app_name=APP, user_id=USER, session_id="s", after_event_id=s.events[-1].id, block_ms=50
    )
    watcher = asyncio.create_task(collect(watch, 4))
    other = make_service()
    copy = await other.get_session(app_name=APP, user_id=USER, session_id="s")
    for i in range(4):
        await other.append_event(copy, Event(author=f"w{i}"))
    seen = await asyncio.wait_for(watcher, 10)
    assert [e.author for e in seen] == ["w0", "w1", "w2", "w3"]
    assert seen == copy.events[2:]
    assert s.events  # untouched by the watch


async def test_a_watch_without_a_position_starts_after_the_newest_event(
    service: RedisSessionService, make_service: Any
) -> None:
    """Tolerant by design: the watch takes its position at its first read, whenever the
    scheduler runs it, so another worker appends until the watch yields. Whatever came
    before that position is never seen; everything after it is seen, in order."""
    await session_with(service, 2)
    watch = service.watch(app_name=APP, user_id=USER, session_id="s", block_ms=50)
    first = asyncio.ensure_future(anext(watch))
    other = make_service()
    copy = await other.get_session(app_name=APP, user_id=USER, session_id="s")
    appended: list[str] = []
    while not first.done():
        assert len(appended) < 100, "the watch never yielded"  # fail, never hang
        appended.append(f"n{len(appended)}")
        await other.append_event(copy, Event(author=appended[-1]))
        await asyncio.wait({first}, timeout=0.1)
    seen = [first.result().author]
    assert seen[0] in appended  # never e0 or e1, which were there before the watch
    for _ in range(len(appended) - appended.index(seen[0]) - 1):
        seen.append((await asyncio.wait_for(anext(watch), 10)).author)
    assert seen == appended[appended.index(seen[0]) :]
    await watch.aclose()


async def test_a_watch_resumes_after_an_event_or_from_the_beginning(
    service: RedisSessionService,
) -> None:
    s = await session_with(service, 5)
    resumed = service.watch(
        app_name=APP, user_id=USER, session_id="s", after_event_id=s.events[1].id, block_ms=50
    )
    assert [e.author for e in await collect(resumed, 3)] == ["e2", "e3", "e4"]
    everything = service.watch(
        app_name=APP, user_id=USER, session_id="s", from_beginning=True, block_ms=50
    )
    assert await collect(everything, 5) == s.events


async def test_a_watch_ends_when_the_session_is_deleted(service: RedisSessionService) -> None:
    s = await session_with(service, 1)
    # Step by step, so the delete comes after the watch has seen "last", whatever the
    # scheduler does (a stream deleted before the read would show nothing).
    watch = service.watch(**ids(s), after_event_id=s.events[-1].id, block_ms=50)
    await service.append_event(s, Event(author="last"))
    assert (await asyncio.wait_for(anext(watch), 10)).author == "last"
    following = asyncio.ensure_future(anext(watch))
    await service.delete_session(**ids(s))
    # Re-created under the same id: the watch still ends, it never follows the stranger.
    again = await service.create_session(**ids(s))
    await service.append_event(again, Event(author="stranger"))
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(following, 10)


def ids(s: Any) -> dict[str, str]:
    return {"app_name": s.app_name, "user_id": s.user_id, "session_id": s.id}


async def test_a_watch_can_be_cancelled_and_the_client_still_works(
    service: RedisSessionService,
) -> None:
    s = await session_with(service, 1)
    task = asyncio.create_task(collect(service.watch(**ids(s), block_ms=10_000), 1))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await service.append_event(s, Event(author="after"))
    got = await service.get_session(**ids(s))
    assert got is not None
    assert [e.author for e in got.events] == ["e0", "after"]


# Python 3.10 has no way to tell that a cancel is pending (Task.cancelling is 3.11's), so
# there the watch cannot tell a cancel redis-py turned into a timeout from a real one: the
# test exists where the library can keep its promise.
if sys.version_info >= (3, 11):

    async def cancel_blocked_watch(
        service: RedisSessionService,
        monkeypatch: pytest.MonkeyPatch,
        after_cancel: Callable[[list[Any]], list[Any]],
    ) -> None:
        """Cancels a watch blocked in its read; ``after_cancel(start)`` is what the client
        makes of that cancel (``start``: the watch's first reply): an error it raises, or
        the reply of a read it retried. Later reads block as XREAD would. The watch must
        end, cancelled."""
        s = await session_with(service, 1)
        blocked = asyncio.Event()
        execute = _event_stream._scripts.execute
        start: list[Any] = []

        async def read(pipe: Any, keys: list[str]) -> list[Any]:
            if not start:  # the watch's starting position, read as ever
                start.extend(await execute(pipe, keys))
                return start
            if not blocked.is_set():
                blocked.set()
                try:
                    await asyncio.sleep(60)
                except asyncio.CancelledError:
                    return after_cancel(start)
            await asyncio.sleep(60)
            raise AssertionError("not cancelled")

        monkeypatch.setattr(_event_stream._scripts, "execute", read)
        task = asyncio.create_task(collect(service.watch(**ids(s), block_ms=10_000), 1))
        await asyncio.wait_for(blocked.wait(), 10)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=5)
        assert done, "the watch went on after its cancel"
        assert task.cancelled()

    async def test_a_cancel_that_redis_py_turns_into_a_timeout_still_ends_the_watch(
        service: RedisSessionService, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A cancel can come out of redis-py's read as its own TimeoutError; the watch's
        reconnect loop must not take it for a dropped connection and go on."""

        def timed_out(start: list[Any]) -> list[Any]:
            raise RedisTimeoutError("Timeout reading from the server")

        await cancel_blocked_watch(service, monkeypatch, timed_out)

    async def test_a_cancel_that_a_client_retry_swallows_still_ends_the_watch(
        service: RedisSessionService, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The cluster client's pipeline retries a read that failed with its connection
        or timeout error, so a cancel that redis-py turned into one comes back as an
        ordinary (empty) reply; the watch must end at that reply, not block again."""

        def retried(start: list[Any]) -> list[Any]:
            # Nothing arrived, and the session is the one the watch started on.
            return [None, start[0][0]]

        await cancel_blocked_watch(service, monkeypatch, retried)


async def test_bad_watch_input(service: RedisSessionService) -> None:
    s = await session_with(service, 1)
    with pytest.raises(SessionNotFoundError):
        await collect(service.watch(app_name=APP, user_id=USER, session_id="missing"), 1)
    with pytest.raises(InvalidInputError, match="has no event 'nope'"):
        await collect(service.watch(**ids(s), after_event_id="nope"), 1)
    with pytest.raises(InvalidInputError, match="not both"):
        service.watch(**ids(s), after_event_id=s.events[0].id, from_beginning=True)
    for bad in (0, -5, 1.5, True):
        with pytest.raises(InvalidInputError, match="block_ms"):
            service.watch(**ids(s), block_ms=bad)
    with pytest.raises(InvalidInputError, match="user_id"):
        service.watch(app_name=APP, user_id="", session_id="s")


async def test_event_ids_record_revision_and_stream_position(
    service: RedisSessionService, redis_client: Any
) -> None:
    s = await session_with(service, 2)
    keys = KeySpace().session(APP, USER, "s")
    entries = await redis_client.xrange(keys.events)
    for rev, (event, (stream_id, _)) in enumerate(zip(s.events, entries, strict=True), 1):
        assert await redis_client.hget(keys.event_ids, event.id) == f"{rev} ".encode() + stream_id
    # A value written before positions were recorded still answers retries.
    await redis_client.hset(keys.event_ids, s.events[1].id, "2")
    assert await service.append_event(s, s.events[1]) is s.events[1]
    with pytest.raises(InvalidInputError, match="from_beginning=True instead"):
        await collect(service.watch(**ids(s), after_event_id=s.events[1].id), 1)


@pytest.mark.adk
async def test_the_adk_drop_in_pages_and_watches_adk_events(worker_client: Any) -> None:
    from google.adk.errors.session_not_found_error import SessionNotFoundError as AdkNotFound
    from google.adk.events import Event as AdkEvent

    from redis_agent_sessions.adk import RedisSessionService as AdkService

    service = AdkService(worker_client)
    s = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    for i in range(5):
        await service.append_event(s, AdkEvent(author=f"a{i}", invocation_id=f"inv{i}"))
    page = await service.list_events(app_name=APP, user_id=USER, session_id=" s ", limit=3)
    rest = await service.list_events(
        app_name=APP, user_id=USER, session_id="s", page_token=page.next_page_token
    )
    assert page.events + rest.events == s.events
    assert all(isinstance(e, AdkEvent) for e in page.events)
    watched = service.watch(app_name=APP, user_id=USER, session_id="s", from_beginning=True)
    assert await collect(watched, 5) == s.events
    with pytest.raises(AdkNotFound):
        await service.list_events(app_name=APP, user_id=USER, session_id="missing")
    with pytest.raises(AdkNotFound):
        await collect(service.watch(app_name=APP, user_id=USER, session_id="missing"), 1)
