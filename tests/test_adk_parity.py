"""Parity: the same scenarios against ADK's InMemory and Database services and ours.

Each test plays one scenario on every backend and asserts that all of them observe the
same thing. Where we deliberately differ, a ``test_difference_*`` test pins what each
backend does; DIFFERENCES below is the list docs/adk.md documents.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.adk", reason="needs the [adk] extra (google.adk is not installed)")
pytest.importorskip("sqlalchemy", reason="the parity suite needs google-adk[db] (sqlalchemy)")

from google.adk.errors import StaleSessionError as AdkStaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError as AdkAlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError as AdkNotFoundError
from google.adk.events import Event, EventActions
from google.adk.sessions import (
    BaseSessionService,
    DatabaseSessionService,
    InMemorySessionService,
    Session,
)
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.sessions.sqlite_session_service import SqliteSessionService
from google.genai import types

from _snapshot import snapshot
from redis_agent_sessions import InvalidInputError, RedisSessionsError
from redis_agent_sessions import RedisSessionService as CoreSessionService
from redis_agent_sessions.adk import RedisSessionService

pytestmark = pytest.mark.adk

DIFFERENCES = {
    "stale_writer": "rejected with StaleSessionError, like DB (IM accepts it)",
    "failed_append_side_effects": "a rejected append leaves the caller's session and event "
    "untouched; DB has already put temp: keys in session.state and trimmed the delta",
    "duplicate_event_id": "a no-op returning the event, like IM (DB raises IntegrityError)",
    "empty_or_padded_session_ids": "stripped, or a new uuid for '', like IM and Sqlite (DB "
    "stores them verbatim); the core raises InvalidInputError",
    "empty_or_padded_app_or_user": "refused on create, nothing found on reads (IM, Sqlite and "
    "DB store them verbatim)",
    "non_json_state": "InvalidInputError before writing; IM keeps the object, DB stringifies it",
    "event_order": "append order, like IM (DB sorts by timestamp, id)",
    "after_timestamp": "a filter (timestamp >= t) like DB (IM keeps the suffix after the "
    "last older event)",
    "last_update_time": "exactly the last event's timestamp, like IM (DB rounds to us)",
}

# Later than any creation time, exact in binary, and fixed: a time taken at collection would
# fall behind the sessions' creation times if the test ran more than ~16 minutes later.
T0 = 4_102_444_800.0  # 2100-01-01


class Services(dict[str, Any]):
    """The services a scenario plays on, for one test case: its name and its parameters
    other than our backend's. ADK's services observe the same in every backend and read-cache
    variant of a case (they never touch ours), so :func:`agree` plays them once per case in a
    run, not once per backend (their deep copies and SQLite were most of the suite's time)."""

    def __init__(self, case: tuple[str, str], services: dict[str, Any]) -> None:
        super().__init__(services)
        self.case = case
        self.agreed = 0  # the calls of agree so far in this test


def _case(request: pytest.FixtureRequest) -> tuple[str, str]:
    callspec = getattr(request.node, "callspec", None)
    params = callspec.params.items() if callspec is not None else ()
    own = sorted((k, repr(v)) for k, v in params if k not in ("redis_client", "read_cache"))
    return request.node.originalname, repr(own)


@pytest.fixture
async def backends(
    worker_client: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[dict[str, Any]]:
    database = DatabaseSessionService(db_url=f"sqlite+aiosqlite:///{tmp_path / 'sessions.db'}")
    yield Services(
        _case(request),
        {
            "memory": InMemorySessionService(),
            "database": database,
            "redis": RedisSessionService(worker_client),
        },
    )
    await database.close()


@pytest.fixture
def normalizing(
    backends: dict[str, Any], tmp_path: Path, request: pytest.FixtureRequest
) -> dict[str, Any]:
    """The ADK services that normalize session ids (InMemory and the Sqlite one), and ours.

    ADK's DatabaseSessionService stores ids verbatim instead: test_difference_ids.
    """
    return Services(
        _case(request),
        {
            "memory": backends["memory"],
            "sqlite": SqliteSessionService(db_path=str(tmp_path / "adk-sqlite.db")),
            "redis": backends["redis"],
        },
    )


Scenario = Callable[[BaseSessionService], Awaitable[Any]]
_OBSERVED: dict[tuple[Any, ...], Any] = {}


async def agree(backends: dict[str, BaseSessionService], scenario: Scenario) -> Any:
    """Run ``scenario`` on every backend; assert equal observations and return ours. ADK's
    services play it once per test case (:class:`Services`), ours every time."""
    seen = {}
    case: tuple[Any, ...] | None = None
    if isinstance(backends, Services):
        backends.agreed += 1
        case = (*backends.case, backends.agreed)
    for name, service in backends.items():
        key = None if case is None or name == "redis" else (*case, name)
        if key is not None and key in _OBSERVED:
            seen[name] = _OBSERVED[key]
            continue
        seen[name] = await scenario(service)
        if key is not None:
            _OBSERVED[key] = seen[name]
    for name in backends:
        assert seen["redis"] == seen[name], seen
    return seen["redis"]


def view(session: Session | None, *, times: bool = False) -> Any:
    if session is None:
        return None
    out: dict[str, Any] = {
        "id": session.id,
        "app_name": session.app_name,
        "user_id": session.user_id,
        "state": session.state,
        "events": [e.model_dump(mode="json", exclude_none=True) for e in session.events],
    }
    if times:
        out["last_update_time"] = session.last_update_time
    return out


def event(i: int, delta: dict[str, Any] | None = None, **kw: Any) -> Event:
    return Event(
        id=f"e{i}",
        invocation_id=f"inv{i}",
        author="user",
        timestamp=T0 + i,
        content=types.Content(role="user", parts=[types.Part(text=f"message {i}")]),
        actions=EventActions(state_delta=delta or {}),
        **kw,
    )


async def errors_of(call: Awaitable[Any]) -> str | None:
    try:
        await call
    except Exception as exc:
        return type(exc).__name__
    return None


async def test_create_get_list_delete(backends: dict[str, Any]) -> None:
    async def scenario(svc: BaseSessionService) -> Any:
        s = await svc.create_session(app_name="app", user_id="u", session_id="s1", state={"a": 1})
        read = await svc.get_session(app_name="app", user_id="u", session_id="s1")
        assert read == s
        missing = [
            await svc.get_session(app_name="app", user_id="u", session_id="nope"),
            await svc.get_session(app_name="app", user_id="other", session_id="s1"),
            await svc.get_session(app_name="other", user_id="u", session_id="s1"),
        ]
        await svc.create_session(app_name="app", user_id="u", session_id="s2")
        listed = await svc.list_sessions(app_name="app", user_id="u")
        listed_other = await svc.list_sessions(app_name="app", user_id="nobody")
        await svc.delete_session(app_name="app", user_id="u", session_id="s1")
        await svc.delete_session(app_name="app", user_id="u", session_id="s1")
        after = await svc.get_session(app_name="app", user_id="u", session_id="s1")
        relisted = await svc.list_sessions(app_name="app", user_id="u")
        return (
            view(read),
            missing,
            [view(x) for x in listed.sessions],
            listed_other.sessions,
            after,
            [x.id for x in relisted.sessions],
        )

    await agree(backends, scenario)


async def test_generated_session_id(backends: dict[str, Any]) -> None:
    async def scenario(svc: BaseSessionService) -> Any:
        s = await svc.create_session(app_name="app", user_id="u")
        read = await svc.get_session(app_name="app", user_id="u", session_id=s.id)
        return len(s.id) >= 32, read == s

    assert await agree(backends, scenario) == (True, True)


async def test_scoped_state_merge(backends: dict[str, Any]) -> None:
    """scenarios.md 2 and 3: app: shared by the app, user: by the user's sessions."""

    async def scenario(svc: BaseSessionService) -> Any:
        s1 = await svc.create_session(
            app_name="my_app",
            user_id="alice",
            session_id="s1",
            state={"app:theme": "dark", "user:language": "en", "context": "session1"},
        )
        s2 = await svc.create_session(
            app_name="my_app", user_id="alice", session_id="s2", state={"context": "session2"}
        )
        await svc.append_event(
            s1,
            Event(
                id="sys",
                invocation_id="inv_system_update",
                author="system",
                timestamp=T0,
                actions=EventActions(
                    state_delta={
                        "task_status": "active",
                        "user:login_count": 5,
                        "user:last_login": T0,
                        "app:maintenance_mode": False,
                        "temp:validation_result": {"valid": True},
                        "nested": {"a": {"b": 1}},
                    }
                ),
            ),
        )
        await svc.append_event(
            s1, event(1, {"nested": {"a": {"c": 2}}, "none": None, "user:language": "fr"})
        )
        bob = await svc.create_session(app_name="my_app", user_id="bob", session_id="s3")
        return [
            view(await svc.get_session(app_name="my_app", user_id="alice", session_id=sid))
            for sid in ("s1", "s2")
        ] + [
            view(await svc.get_session(app_name="my_app", user_id="bob", session_id="s3")),
            view(bob),
            view(s2),
            await svc.get_user_state(app_name="my_app", user_id="alice"),
            await svc.get_user_state(app_name="my_app", user_id="bob"),
        ]

    s1 = (await agree(backends, scenario))[0]
    assert s1["state"]["nested"] == {"a": {"c": 2}}  # replaced per top-level key
    assert "none" in s1["state"]
    assert s1["state"]["none"] is None
    assert "temp:validation_result" not in s1["state"]


async def test_temp_keys(backends: dict[str, Any]) -> None:
    async def scenario(svc: BaseSessionService) -> Any:
        s = await svc.create_session(
            app_name="app", user_id="u", session_id="s", state={"temp:x": 1, "k": 1}
        )
        created = dict(s.state)
        e = event(1, {"temp:y": 2, "k": 2, "user:z": 3})
        returned = await svc.append_event(s, e)
        read = await svc.get_session(app_name="app", user_id="u", session_id="s")
        assert read is not None
        return (
            created,
            returned is e,
            s.state,
            e.actions.state_delta,
            s.events[-1] is e,
            view(read),
            read == s,
        )

    result = await agree(backends, scenario)
    assert result[2]["temp:y"] == 2
    assert result[3] == {"k": 2, "user:z": 3}


async def test_partial_events_write_nothing(backends: dict[str, Any]) -> None:
    async def scenario(svc: BaseSessionService) -> Any:
        s = await svc.create_session(app_name="app", user_id="u", session_id="s")
        before = s.model_copy(deep=True)
        e = event(1, {"k": 1, "temp:t": 1}, partial=True)
        returned = await svc.append_event(s, e)
        read = await svc.get_session(app_name="app", user_id="u", session_id="s")
        return returned is e, e.actions.state_delta, s == before, read == before

    assert await agree(backends, scenario) == (True, {"k": 1, "temp:t": 1}, True, True)


@pytest.mark.parametrize(
    ("num_recent_events", "after_timestamp"),
    [
        (None, None),
        (0, None),
        (2, None),
        (10, None),
        (None, T0 + 2),
        (None, T0 + 2.5),
        (1, T0 + 2),
        (3, T0 + 3),
        (None, T0 + 99),
        (0, T0),
        (None, 1.0),
    ],
)
async def test_get_session_config(
    backends: dict[str, Any], num_recent_events: int | None, after_timestamp: float | None
) -> None:
    async def scenario(svc: BaseSessionService) -> Any:
        s = await svc.create_session(app_name="app", user_id="u", session_id="s")
        for i in range(5):
            await svc.append_event(s, event(i, {"n": i}))
        config = GetSessionConfig(
            num_recent_events=num_recent_events, after_timestamp=after_timestamp
        )
        read = await svc.get_session(app_name="app", user_id="u", session_id="s", config=config)
        return view(read, times=True)

    await agree(backends, scenario)


async def test_get_user_state(backends: dict[str, Any]) -> None:
    async def scenario(svc: BaseSessionService) -> Any:
        empty = await svc.get_user_state(app_name="app", user_id="u")
        s = await svc.create_session(
            app_name="app", user_id="u", session_id="s", state={"user:a": 1, "app:b": 2, "c": 3}
        )
        await svc.append_event(s, event(1, {"user:d": [1, 2], "user:a": None}))
        return (
            empty,
            await svc.get_user_state(app_name="app", user_id="u"),
            await svc.get_user_state(app_name="app", user_id="other"),
            await svc.get_user_state(app_name="other", user_id="u"),
        )

    assert await agree(backends, scenario) == ({}, {"a": None, "d": [1, 2]}, {}, {})


async def test_list_sessions_all_users(backends: dict[str, Any]) -> None:
    async def scenario(svc: BaseSessionService) -> Any:
        a = await svc.create_session(
            app_name="app", user_id="alice", session_id="a1", state={"user:n": "A", "app:v": 1}
        )
        await svc.create_session(app_name="app", user_id="bob", session_id="b1")
        await svc.create_session(app_name="other", user_id="carol", session_id="c1")
        await svc.create_session(app_name="app", user_id="bob", session_id="b2", state={"x": 1})
        await svc.append_event(a, event(1, {"k": 1}))  # a1 becomes the most recent
        listed = await svc.list_sessions(app_name="app")
        empty = await svc.list_sessions(app_name="nothing")
        return [view(x) for x in listed.sessions], empty.sessions

    listed, empty = await agree(backends, scenario)
    assert [x["id"] for x in listed] == ["b1", "b2", "a1"]
    assert all(x["events"] == [] for x in listed)
    assert empty == []


async def test_duplicate_create_has_no_side_effect(backends: dict[str, Any]) -> None:
    async def scenario(svc: BaseSessionService) -> Any:
        await svc.create_session(
            app_name="app", user_id="u", session_id="s", state={"user:a": 1, "app:b": 1}
        )
        with pytest.raises(AdkAlreadyExistsError) as info:
            await svc.create_session(
                app_name="app",
                user_id="u",
                session_id="s",
                state={"user:a": 2, "app:b": 2, "c": 2},
            )
        read = await svc.get_session(app_name="app", user_id="u", session_id="s")
        return str(info.value), view(read)

    message, read = await agree(backends, scenario)
    assert message == "Session with id s already exists."
    assert read["state"] == {"user:a": 1, "app:b": 1}


async def test_padded_session_id_is_normalized(
    normalizing: dict[str, Any], redis_client: Any
) -> None:
    """google-adk's own session-service tests: a padded id reaches the stripped one."""

    async def scenario(svc: BaseSessionService) -> Any:
        s = await svc.create_session(
            app_name="app", user_id="u", session_id="order-42\n", state={"user:a": 1, "app:b": 1}
        )
        read = await svc.get_session(app_name="app", user_id="u", session_id=" order-42 ")
        before = await snapshot(redis_client) if svc is normalizing["redis"] else None
        with pytest.raises(AdkAlreadyExistsError) as info:
            await svc.create_session(
                app_name="app",
                user_id="u",
                session_id="\torder-42",
                state={"user:a": 2, "app:b": 2, "c": 2},
            )
        if before is not None:
            assert await snapshot(redis_client) == before
        again = await svc.get_session(app_name="app", user_id="u", session_id="order-42")
        listed = await svc.list_sessions(app_name="app", user_id="u")
        await svc.delete_session(app_name="app", user_id="u", session_id="\norder-42\t")
        gone = await svc.get_session(app_name="app", user_id="u", session_id="order-42")
        return s.id, view(read), str(info.value), view(again), [x.id for x in listed.sessions], gone

    sid, read, message, again, listed, gone = await agree(normalizing, scenario)
    assert (sid, message) == ("order-42", "Session with id order-42 already exists.")
    assert read == again
    assert again["state"] == {"user:a": 1, "app:b": 1}
    assert (listed, gone) == (["order-42"], None)


async def test_blank_session_id_gets_a_uuid_and_finds_nothing(normalizing: dict[str, Any]) -> None:
    async def scenario(svc: BaseSessionService) -> Any:
        made = [
            (await svc.create_session(app_name="app", user_id="u", session_id=sid)).id
            for sid in ("", "  \n")
        ]
        found = [
            await svc.get_session(app_name="app", user_id="u", session_id=sid) for sid in ("", " ")
        ]
        await svc.delete_session(app_name="app", user_id="u", session_id=" ")
        listed = await svc.list_sessions(app_name="app", user_id="u")
        return (
            [len(x) >= 32 and x == x.strip() for x in made],
            found,
            sorted(x.id for x in listed.sessions) == sorted(made),
        )

    assert await agree(normalizing, scenario) == ([True, True], [None, None], True)


async def test_empty_or_padded_user_has_nothing(
    backends: dict[str, Any], normalizing: dict[str, Any]
) -> None:
    """Reads for a user (or app) id nobody stored answer "nothing", as in every ADK service."""

    async def scenario(svc: BaseSessionService) -> Any:
        await svc.create_session(app_name="app", user_id="u", session_id="s", state={"user:a": 1})
        return (
            [x.id for x in (await svc.list_sessions(app_name="app", user_id="")).sessions],
            [x.id for x in (await svc.list_sessions(app_name="app", user_id=" u")).sessions],
            [x.id for x in (await svc.list_sessions(app_name="")).sessions],
            await svc.get_session(app_name="app", user_id="", session_id="s"),
            await svc.get_session(app_name="app ", user_id="u", session_id="s"),
            await svc.get_user_state(app_name="app", user_id=""),
            await svc.get_user_state(app_name="app", user_id="u\n"),
            await svc.delete_session(app_name="app", user_id=" u", session_id="s"),
            [x.id for x in (await svc.list_sessions(app_name="app", user_id="u")).sessions],
        )

    everyone = {**backends, "sqlite": normalizing["sqlite"]}
    assert await agree(everyone, scenario) == ([], [], [], None, None, {}, {}, None, ["s"])


async def test_ours_still_checks_other_bad_ids_on_reads(worker_client: Any) -> None:
    svc = RedisSessionService(worker_client)
    for call in (
        svc.list_sessions(app_name="app", user_id=5),  # type: ignore[arg-type]
        svc.get_session(app_name="app", user_id="u", session_id="a\ud800"),
        svc.get_user_state(app_name="x" * 1025, user_id="u"),
        svc.delete_session(app_name="app", user_id="u", session_id=None),  # type: ignore[arg-type]
    ):
        with pytest.raises(InvalidInputError):
            await call


async def test_append_to_missing_session(backends: dict[str, Any]) -> None:
    async def scenario(svc: BaseSessionService) -> Any:
        ghost = Session(id="ghost", app_name="app", user_id="u")
        with pytest.raises(AdkNotFoundError) as missing:
            await svc.append_event(ghost, event(1, {"k": 1}))
        s = await svc.create_session(app_name="app", user_id="u", session_id="s")
        await svc.delete_session(app_name="app", user_id="u", session_id="s")
        with pytest.raises(AdkNotFoundError) as deleted:
            await svc.append_event(s, event(2, {"k": 2}))
        recreated = await svc.get_session(app_name="app", user_id="u", session_id="s")
        listed = await svc.list_sessions(app_name="app", user_id="u")
        return str(missing.value), str(deleted.value), recreated, listed.sessions

    assert await agree(backends, scenario) == (
        "Session ghost not found.",
        "Session s not found.",
        None,
        [],
    )


async def test_read_back_equals_returned(backends: dict[str, Any]) -> None:
    """ADK's own contract tests compare sessions with pydantic ``==`` (private attrs too)."""

    async def scenario(svc: BaseSessionService) -> Any:
        s = await svc.create_session(
            app_name="app", user_id="u", session_id="s", state={"k": 1, "user:u": 1}
        )
        first = await svc.get_session(app_name="app", user_id="u", session_id="s") == s
        for i in range(3):
            await svc.append_event(s, event(i, {"k": i, "app:a": i}))
        read = await svc.get_session(app_name="app", user_id="u", session_id="s")
        assert read is not None
        same = view(read, times=True) == view(s, times=True)
        # A session read back can be appended to, and stays equal afterwards.
        await svc.append_event(read, event(9, {"k": 9}))
        again = await svc.get_session(app_name="app", user_id="u", session_id="s")
        return first, same, again == read

    assert await agree(backends, scenario) == (True, True, True)


async def test_ours_read_back_is_exactly_equal(worker_client: Any) -> None:
    svc = RedisSessionService(worker_client)
    s = await svc.create_session(app_name="app", user_id="u", state={"k": 1})
    assert await svc.get_session(app_name="app", user_id="u", session_id=s.id) == s
    for i in range(3):
        await svc.append_event(s, event(i, {"k": i}))
    read = await svc.get_session(app_name="app", user_id="u", session_id=s.id)
    assert read == s
    assert read is not None
    assert read._storage_update_marker == s._storage_update_marker == "3"
    assert read.last_update_time == T0 + 2


async def test_rich_event_round_trip(backends: dict[str, Any]) -> None:
    """Function calls, bytes, usage metadata and sets survive storage on every backend."""

    async def scenario(svc: BaseSessionService) -> Any:
        s = await svc.create_session(app_name="app", user_id="u", session_id="s")
        e = Event(
            id="rich",
            invocation_id="inv",
            author="agent",
            branch="root.child",
            timestamp=T0,
            content=types.Content(
                role="model",
                parts=[
                    types.Part.from_function_call(name="f", args={"x": [1, {"y": None}]}),
                    types.Part.from_bytes(data=b"\x00\xffbin", mime_type="image/png"),
                    types.Part(text="hi", thought=True),
                ],
            ),
            usage_metadata=types.GenerateContentResponseUsageMetadata(prompt_token_count=7),
            long_running_tool_ids={"b", "a"},
            # Beyond 64 bits: orjson alone would read these back as floats.
            custom_metadata={"k": [1, 2], "big": 2**70, "edge": -(2**63) - 1, "id": "9" * 19},
            actions=EventActions(
                state_delta={"k": 1},
                artifact_delta={"file.txt": 2},
                transfer_to_agent="other",
                escalate=True,
                skip_summarization=True,
            ),
        )
        await svc.append_event(s, e)
        read = await svc.get_session(app_name="app", user_id="u", session_id="s")
        assert read is not None
        assert read.events == [e]
        return view(read, times=True)

    await agree(backends, scenario)


# -- deliberate differences ---------------------------------------------------------------


async def test_difference_stale_writer(backends: dict[str, Any]) -> None:
    outcomes, caller_after = {}, {}
    for name, svc in backends.items():
        s = await svc.create_session(app_name="app", user_id="u", session_id="s")
        stale = await svc.get_session(app_name="app", user_id="u", session_id="s")
        await svc.append_event(s, event(1, {"k": "fresh"}))
        e = event(2, {"k": "stale", "temp:t": 1})
        outcomes[name] = await errors_of(svc.append_event(stale, e))
        read = await svc.get_session(app_name="app", user_id="u", session_id="s")
        assert read is not None
        if outcomes[name]:  # nothing of the rejected append reached storage
            assert read.state == {"k": "fresh"}
            assert [x.id for x in read.events] == ["e1"]
            caller_after[name] = (stale.state, len(stale.events), e.actions.state_delta)
    assert outcomes == {
        "memory": None,
        "database": "StaleSessionError",
        "redis": "StaleSessionError",
    }
    assert caller_after == {
        "database": ({"temp:t": 1}, 0, {"k": "stale"}),
        "redis": ({}, 0, {"k": "stale", "temp:t": 1}),
    }


async def test_difference_failed_append_leaves_caller_untouched(
    backends: dict[str, Any],
) -> None:
    caller_after = {}
    for name, svc in backends.items():
        ghost = Session(id="ghost", app_name="app", user_id="u")
        e = event(1, {"k": 1, "temp:t": 1})
        with pytest.raises(AdkNotFoundError):
            await svc.append_event(ghost, e)
        caller_after[name] = (ghost.state, e.actions.state_delta)
    assert caller_after == {
        "memory": ({}, {"k": 1, "temp:t": 1}),
        "database": ({"temp:t": 1}, {"k": 1}),
        "redis": ({}, {"k": 1, "temp:t": 1}),
    }


async def test_stale_error_is_adk_and_ours(worker_client: Any) -> None:
    svc = RedisSessionService(worker_client)
    s = await svc.create_session(app_name="app", user_id="u")
    stale = await svc.get_session(app_name="app", user_id="u", session_id=s.id)
    assert stale is not None
    await svc.append_event(s, event(1))
    with pytest.raises(AdkStaleSessionError) as info:
        await svc.append_event(stale, event(2))
    assert isinstance(info.value, RedisSessionsError)
    assert isinstance(info.value, ValueError)
    assert str(info.value).startswith("The session has been modified in storage")


async def test_difference_duplicate_event_id(backends: dict[str, Any]) -> None:
    outcomes = {}
    for name, svc in backends.items():
        s = await svc.create_session(app_name="app", user_id="u", session_id="s")
        e = event(1, {"k": 1})
        await svc.append_event(s, e)
        outcomes[name] = await errors_of(svc.append_event(s, e))
        read = await svc.get_session(app_name="app", user_id="u", session_id="s")
        assert read is not None
        assert [x.id for x in read.events] == ["e1"]
    assert outcomes == {"memory": None, "database": "IntegrityError", "redis": None}


async def test_difference_ids(
    backends: dict[str, Any], normalizing: dict[str, Any], worker_client: Any
) -> None:
    services = {
        **backends,
        "sqlite": normalizing["sqlite"],
        "core": CoreSessionService(worker_client),
    }
    outcomes: dict[str, list[Any]] = {}
    for name, svc in services.items():
        outcomes[name] = []
        for ids in (
            {"user_id": "u", "session_id": ""},
            {"user_id": "u", "session_id": " padded\n"},
            {"user_id": "", "session_id": "s1"},
            {"user_id": " u", "session_id": "s2"},
        ):
            try:
                s = await svc.create_session(app_name="app", **ids)
            except InvalidInputError:
                outcomes[name].append("InvalidInputError")
            else:
                same = (s.user_id, s.id) == (ids["user_id"], ids["session_id"])
                outcomes[name].append("verbatim" if same else "changed")
    refused = ["InvalidInputError", "InvalidInputError"]
    assert outcomes == {
        "memory": ["changed", "changed", "verbatim", "verbatim"],
        "sqlite": ["changed", "changed", "verbatim", "verbatim"],
        "database": ["verbatim"] * 4,
        "redis": ["changed", "changed", *refused],
        "core": refused * 2,
    }
    # The core is stricter on purpose: it names the argument, and it is a ValueError.
    with pytest.raises(ValueError, match="session_id"):
        await services["core"].create_session(app_name="app", user_id="u", session_id=" x")


class Opaque:
    pass


async def test_difference_non_json_state(backends: dict[str, Any]) -> None:
    value = Opaque()
    outcomes = {}
    for name, svc in backends.items():
        s = await svc.create_session(app_name="app", user_id="u", session_id="s")
        try:
            await svc.append_event(s, event(1, {"k": value}))
        except InvalidInputError:
            read = await svc.get_session(app_name="app", user_id="u", session_id="s")
            assert read is not None
            assert read.events == []
            outcomes[name] = "InvalidInputError"
            continue
        read = await svc.get_session(app_name="app", user_id="u", session_id="s")
        assert read is not None
        outcomes[name] = type(read.state["k"]).__name__
    assert outcomes == {"memory": "Opaque", "database": "str", "redis": "InvalidInputError"}


async def test_difference_event_order_and_after_timestamp(backends: dict[str, Any]) -> None:
    """Worker clocks disagree: timestamps 3, 1, 2 appended in that order."""
    orders, filtered = {}, {}
    for name, svc in backends.items():
        s = await svc.create_session(app_name="app", user_id="u", session_id="s")
        for i in (3, 1, 2):
            await svc.append_event(s, event(i))
        read = await svc.get_session(app_name="app", user_id="u", session_id="s")
        assert read is not None
        orders[name] = [x.id for x in read.events]
        config = GetSessionConfig(after_timestamp=T0 + 2)
        read = await svc.get_session(app_name="app", user_id="u", session_id="s", config=config)
        assert read is not None
        filtered[name] = [x.id for x in read.events]
    assert orders == {
        "memory": ["e3", "e1", "e2"],
        "database": ["e1", "e2", "e3"],
        "redis": ["e3", "e1", "e2"],
    }
    assert filtered == {"memory": ["e2"], "database": ["e2", "e3"], "redis": ["e3", "e2"]}


async def test_difference_last_update_time(backends: dict[str, Any]) -> None:
    odd = T0 + 0.123456789
    times = {}
    for name, svc in backends.items():
        s = await svc.create_session(app_name="app", user_id="u", session_id="s")
        e = event(0)
        e.timestamp = odd
        await svc.append_event(s, e)
        times[name] = s.last_update_time
    assert times["memory"] == times["redis"] == odd
    assert times["database"] == pytest.approx(odd, abs=1e-6)
