"""Listing sessions page by page from the indexes (every backend)."""

from __future__ import annotations

from typing import Any

import pytest

from redis_agent_sessions import Event, InvalidInputError, RedisSessionService
from redis_agent_sessions.keys import KeySpace

APP = "app"


async def walk(service: RedisSessionService, page_size: int, **kw: Any) -> list[list[str]]:
    pages, token = [], None
    while True:
        page = await service.list_sessions_page(
            app_name=APP, page_size=page_size, page_token=token, **kw
        )
        pages.append([s.id for s in page.sessions])
        token = page.next_page_token
        if token is None:
            return pages


def cluster(service: RedisSessionService) -> bool:
    return service._engine.layout.name == "cluster"


async def seed(service: RedisSessionService, n: int = 7) -> list[Any]:
    made = []
    for i in range(n):
        made.append(
            await service.create_session(
                app_name=APP, user_id=f"u{i % 2}", session_id=f"s{i}", state={"i": i}
            )
        )
    return made


async def test_pages_walk_every_session_once_in_each_order(service: RedisSessionService) -> None:
    made = await seed(service)
    await service.append_event(made[0], Event(author="x"))  # s0 is now the latest update
    assert await walk(service, 3, order_by="created") == [
        ["s6", "s5", "s4"],
        ["s3", "s2", "s1"],
        ["s0"],
    ]
    assert await walk(service, 3, order_by="created", newest_first=False) == [
        ["s0", "s1", "s2"],
        ["s3", "s4", "s5"],
        ["s6"],
    ]
    assert await walk(service, 7, order_by="created") == [[f"s{i}" for i in range(6, -1, -1)]]
    mine = await service.list_sessions_page(app_name=APP, user_id="u0", page_size=10)
    assert [s.id for s in mine.sessions] == ["s0", "s6", "s4", "s2"]
    assert mine.next_page_token is None
    if cluster(service):
        return
    assert await walk(service, 3) == [["s0", "s6", "s5"], ["s4", "s3", "s2"], ["s1"]]
    assert await walk(service, 4, newest_first=False) == [
        ["s1", "s2", "s3", "s4"],
        ["s5", "s6", "s0"],
    ]


async def test_a_page_holds_what_list_sessions_holds(service: RedisSessionService) -> None:
    made = await seed(service, 3)
    await service.append_event(made[1], Event(author="x", timestamp=made[1].last_update_time + 5))
    page = await service.list_sessions_page(app_name=APP, order_by="created", newest_first=False)
    listed = (await service.list_sessions(app_name=APP)).sessions
    assert sorted(page.sessions, key=lambda s: s.id) == sorted(listed, key=lambda s: s.id)
    assert page.sessions[1].state == {"i": 1}
    assert page.sessions[1].last_update_time == made[1].last_update_time
    assert all(s.events == [] for s in page.sessions)


async def test_equal_scores_are_cut_by_member_without_loss(service: RedisSessionService) -> None:
    made = await seed(service, 6)
    for s in made:  # the same update time for all six: every score ties
        await service.append_event(s, Event(author="x", timestamp=1_900_000_000.0))
    for newest_first in (True, False):
        pages = await walk(service, 4, user_id="u0", order_by="updated", newest_first=newest_first)
        flat = [sid for page in pages for sid in page]
        assert sorted(flat) == ["s0", "s2", "s4"]
        assert len(pages) == 1
        pages = await walk(service, 1, user_id="u1", newest_first=newest_first)
        assert sorted(sid for page in pages for sid in page) == ["s1", "s3", "s5"]
        assert len(pages) == 3


async def test_a_run_of_ties_longer_than_a_read_is_walked(service: RedisSessionService) -> None:
    for i in range(8):
        s = await service.create_session(app_name=APP, user_id="t", session_id=f"t{i}")
        await service.append_event(s, Event(author="x", timestamp=1_900_000_000.0))
    for newest_first in (True, False):
        pages = await walk(service, 1, user_id="t", newest_first=newest_first)
        flat = [sid for page in pages for sid in page]
        assert sorted(flat) == [f"t{i}" for i in range(8)]
        assert len(pages) == 8
        assert flat == sorted(flat, reverse=newest_first)


async def test_expired_sessions_are_skipped_and_the_page_filled(
    service: RedisSessionService, redis_client: Any
) -> None:
    await seed(service)
    space = KeySpace()
    for sid, user in (("s6", "u0"), ("s5", "u1"), ("s3", "u1")):
        k = space.session(APP, user, sid)
        await redis_client.delete(k.meta, k.state, k.events, k.event_ids)  # what expiry does
    first = await service.list_sessions_page(app_name=APP, page_size=3, order_by="created")
    assert [s.id for s in first.sessions] == ["s4", "s2", "s1"]
    rest = await service.list_sessions_page(
        app_name=APP, page_size=3, order_by="created", page_token=first.next_page_token
    )
    assert [s.id for s in rest.sessions] == ["s0"]
    assert rest.next_page_token is None
    # The indexes no longer hold them.
    assert await redis_client.zscore(space.user_sessions(APP, "u0"), "s6") is None
    assert await redis_client.zscore(space.user_updated(APP, "u1"), "s5") is None
    if not cluster(service):
        assert await redis_client.zcard(space.app_updated(APP)) == 4


async def test_updates_and_deletes_keep_the_by_update_indexes(
    service: RedisSessionService, redis_client: Any
) -> None:
    made = await seed(service, 2)
    space = KeySpace()
    await service.append_event(made[0], Event(author="x", timestamp=1_950_000_000.5))
    assert await redis_client.zscore(space.user_updated(APP, "u0"), "s0") == 1_950_000_000.5
    if not cluster(service):
        assert await redis_client.zscore(space.app_updated(APP), "u0:s0") == 1_950_000_000.5
    await service.delete_session(app_name=APP, user_id="u0", session_id="s0")
    assert await redis_client.zscore(space.user_updated(APP, "u0"), "s0") is None
    if not cluster(service):
        assert await redis_client.zrange(space.app_updated(APP), 0, -1) == [b"u1:s1"]


async def test_bad_page_input_is_refused(service: RedisSessionService) -> None:
    await seed(service, 3)
    page = await service.list_sessions_page(
        app_name=APP, user_id="u0", page_size=1, order_by="created"
    )
    token = page.next_page_token
    assert token is not None
    for bad in (0, 1001, -1, 2.5, True, "10"):
        with pytest.raises(InvalidInputError, match="page_size"):
            await service.list_sessions_page(app_name=APP, page_size=bad)
    with pytest.raises(InvalidInputError, match="order_by"):
        await service.list_sessions_page(app_name=APP, order_by="name")  # type: ignore[arg-type]
    for other in (
        {"user_id": "u1", "order_by": "created"},
        {"user_id": "u0", "order_by": "updated"},
        {"user_id": "u0", "order_by": "created", "newest_first": False},
    ):
        with pytest.raises(InvalidInputError, match="another listing or order"):
            await service.list_sessions_page(app_name=APP, page_token=token, **other)
    for junk in ("", "x", 3):
        with pytest.raises(InvalidInputError, match="page_token"):
            await service.list_sessions_page(
                app_name=APP,
                order_by="created",
                page_token=junk,  # type: ignore[arg-type]
            )
    with pytest.raises(InvalidInputError, match="user_id"):
        await service.list_sessions_page(app_name=APP, user_id=" u0")
    if cluster(service):
        with pytest.raises(InvalidInputError, match="by creation"):
            await service.list_sessions_page(app_name=APP)
    empty = await service.list_sessions_page(app_name="nothing-here", order_by="created")
    assert empty.sessions == []
    assert empty.next_page_token is None


@pytest.mark.adk
async def test_the_adk_drop_in_pages_adk_sessions(worker_client: Any) -> None:
    from google.adk.sessions import Session as AdkSession

    from redis_agent_sessions.adk import RedisSessionService as AdkService

    service = AdkService(worker_client)
    for i in range(3):
        await service.create_session(app_name=APP, user_id="u", session_id=f"s{i}")
    page = await service.list_sessions_page(app_name=APP, user_id="u", page_size=2)
    assert [s.id for s in page.sessions] == ["s2", "s1"]
    assert all(isinstance(s, AdkSession) for s in page.sessions)
    got = await service.get_session(app_name=APP, user_id="u", session_id="s2")
    assert page.sessions[0] == got
    padded = await service.list_sessions_page(app_name=APP, user_id=" u")
    assert padded.sessions == []
