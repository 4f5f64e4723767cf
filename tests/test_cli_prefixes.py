"""``ls`` and ``stats`` finding nothing under their key prefix name the prefixes that hold
sessions, and the apps of this prefix whose name is close to the one asked for: the hints
themselves on fakeredis, a real server and the real cluster, and the commands as an operator
runs them (a subprocess), whose named ``--key-prefix`` or app then lists the sessions."""

from __future__ import annotations

import re
import shlex
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.exceptions import NoPermissionError

from _backends import backend, pick
from _cli import Cli, drop
from redis_agent_sessions import RedisSessionService, SessionServiceConfig
from redis_agent_sessions.cli import _prefixes
from redis_agent_sessions.cli._prefixes import apps_hint, prefixes_hint
from redis_agent_sessions.keys import KeySpace


@pytest.fixture(params=pick("fake", "real", "cluster"))
async def client(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Any]:
    """An empty server (each kind's own: flushed before and after)."""
    async with backend(request.param, monkeypatch) as found:
        yield found


async def _sessions(client: Any, prefix: str, app: str, count: int = 1) -> None:
    svc = RedisSessionService(client, config=SessionServiceConfig(key_prefix=prefix))
    for i in range(count):
        await svc.create_session(app_name=app, user_id="u", session_id=f"s{i}")


async def test_no_hint_on_an_empty_server(client: Any) -> None:
    assert await prefixes_hint(client, "ras", "booking_app") == ""
    assert await prefixes_hint(client, "ras", None) == ""


async def test_suggests_the_apps_of_the_prefix_with_a_close_name(client: Any) -> None:
    keys = KeySpace("ras")
    assert await apps_hint(client, keys, "tutorial-app") == ""  # no apps at all
    for app in ("tutorial_app", "booking_app", "Tutorial.App", "weather"):
        await _sessions(client, "ras", app)
    await _sessions(client, "other", "tutorial-ap")  # another prefix's: not this one's
    # The same but for case and separators first; else the closest names.
    assert await apps_hint(client, keys, "tutorial-app") == (
        "; did you mean 'tutorial_app' or 'Tutorial.App'?"
    )
    assert await apps_hint(client, keys, "tutorail_app") == (
        "; did you mean 'tutorial_app' or 'Tutorial.App'?"
    )
    assert await apps_hint(client, keys, "booking") == "; did you mean 'booking_app'?"
    assert await apps_hint(client, keys, "something else") == ""
    assert await apps_hint(client, KeySpace("other"), "tutorial_app") == (
        "; did you mean 'tutorial-ap'?"
    )


@pytest.mark.fake
async def test_the_app_suggestion_reads_a_bounded_part_of_the_index(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with backend("fake", monkeypatch) as client:
        for app in ("a_first", "tutorial_app"):
            await _sessions(client, "ras", app)
        monkeypatch.setattr(_prefixes, "MOST_APPS", 1)
        assert await apps_hint(client, KeySpace("ras"), "tutorial-app") == ""
        assert await apps_hint(client, KeySpace("ras"), "a-first") == "; did you mean 'a_first'?"


async def test_names_the_prefixes_holding_the_apps_sessions(client: Any) -> None:
    await _sessions(client, "demo one", "booking_app", 2)
    await _sessions(client, "other", "booking_app")
    await _sessions(client, "elsewhere", "another_app")
    await _sessions(client, "ras", "another_app")  # the prefix asked about: never named
    hint = await prefixes_hint(client, "ras", "booking_app")
    assert hint == (
        "; other key prefixes hold its sessions: "
        "--key-prefix 'demo one' (2 sessions), --key-prefix other (1 session)"
    )


async def test_names_the_prefixes_of_other_apps_when_none_holds_the_app(client: Any) -> None:
    await _sessions(client, "p1", "a")
    await _sessions(client, "p1", "b")
    await _sessions(client, "p2", "c")
    hint = await prefixes_hint(client, "ras", "booking_app")
    assert hint == (
        "; other key prefixes hold sessions of other apps: "
        "--key-prefix p1 (a, b), --key-prefix p2 (c)"
    )
    assert await prefixes_hint(client, "ras", None) == (
        "; other key prefixes hold sessions: --key-prefix p1 (a, b), --key-prefix p2 (c)"
    )


async def test_names_a_few_and_counts_the_rest(client: Any) -> None:
    for i in range(7):
        await _sessions(client, f"p{i}", "app")
    hint = await prefixes_hint(client, "ras", "app")
    assert hint.endswith("--key-prefix p4 (1 session) and 2 more"), hint
    assert "p5" not in hint


async def test_ignores_a_zset_no_key_prefix_can_name(client: Any) -> None:
    # A "{" or "}" cannot be in a key prefix: "x:{tag}:apps" is no store's index.
    await client.zadd("x:{tag}:apps", {"a": 1})
    await client.zadd("empty-looking:apps", {"nothing%3Ahere": 1})
    assert await prefixes_hint(client, "ras", "nothing:here") == (
        "; other key prefixes hold sessions of other apps: "
        "--key-prefix empty-looking (nothing:here)"
    )


@pytest.mark.fake
async def test_the_scan_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    async with backend("fake", monkeypatch) as client:
        for i in range(300):
            await client.set(f"noise:{i}", "1")
        await _sessions(client, "found", "app")
        calls: list[int] = []
        scan = client.scan

        async def counted(*args: Any, **kwargs: Any) -> Any:
            calls.append(kwargs["count"])
            return await scan(*args, **kwargs)

        monkeypatch.setattr(client, "scan", counted)
        monkeypatch.setattr(_prefixes, "SCAN_COUNT", 10)
        monkeypatch.setattr(_prefixes, "SCAN_CALLS", 3)
        await prefixes_hint(client, "ras", "app")
        assert calls == [10, 10, 10]
        calls.clear()
        monkeypatch.setattr(_prefixes, "SCAN_CALLS", 1000)
        assert "--key-prefix found" in await prefixes_hint(client, "ras", "app")
        assert 3 < len(calls) < 1000  # to the end of the keyspace, and no further


@pytest.mark.fake
async def test_a_refused_scan_gives_no_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    """An ACL user or a managed service may refuse SCAN: the answer is just shorter."""
    async with backend("fake", monkeypatch) as client:
        await _sessions(client, "found", "app")

        async def refused(*args: Any, **kwargs: Any) -> Any:
            raise NoPermissionError("this user has no permissions to run the 'scan' command")

        monkeypatch.setattr(client, "scan", refused)
        assert await prefixes_hint(client, "ras", "app") == ""


@pytest.fixture
async def other(cli: Cli) -> AsyncIterator[str]:
    """A second fresh prefix on the cli fixture's server, dropped afterwards."""
    prefix = f"{cli.prefix}-other"
    yield prefix
    await drop(cli, prefix)


async def test_ls_names_the_key_prefix_to_use_and_it_works_as_printed(cli: Cli, other: str) -> None:
    app = f"app-{uuid.uuid4().hex[:8]}"
    async with cli.service(other) as svc:
        for sid in ("s1", "s2"):
            await svc.create_session(app_name=app, user_id="u", session_id=sid)
    empty = cli.run("ls", app)
    assert empty.returncode == 1
    assert empty.stdout == ""
    assert empty.stderr.startswith(
        f"redis-agent-sessions: no sessions for app {app!r} under the key prefix {cli.prefix!r}; "
        "other key prefixes hold its sessions: "
    ), empty.stderr
    named = re.findall(r"--key-prefix ('[^']*'|\S+) \((\d+) sessions?\)", empty.stderr)
    assert named == [(other, "2")], empty.stderr
    # Pasted as named, the option lists them.
    listed = cli.run("ls", app, prefix=shlex.split(named[0][0])[0])
    assert listed.returncode == 0, listed.stderr
    assert re.search(r"\bs1\b", listed.stdout)
    assert re.search(r"\bs2\b", listed.stdout)
    # A user with no sessions where the app has some: the prefix is right, no hint.
    nobody = cli.run("ls", app, "--user", "nobody", prefix=other)
    assert nobody.returncode == 1
    assert ";" not in nobody.stderr
    # `ls` of the apps says where there are some (this test's other prefix, at least).
    apps = cli.run("ls")
    assert apps.returncode == 1
    assert apps.stderr.startswith(
        f"redis-agent-sessions: no apps: no session was created under the key prefix "
        f"{cli.prefix!r}; other key prefixes hold sessions: --key-prefix "
    ), apps.stderr


async def test_ls_and_stats_suggest_the_app_meant_and_it_works_as_printed(cli: Cli) -> None:
    app = f"tutorial_app_{uuid.uuid4().hex[:6]}"
    async with cli.service() as svc:
        await svc.create_session(app_name=app, user_id="ada", session_id="trip-1")
    typo = app.replace("_", "-")
    for command in (["ls", typo], ["ls", typo, "--user", "ada"], ["stats", typo]):
        wrong = cli.run(*command)
        assert wrong.returncode == 1, wrong.stderr
        assert wrong.stderr.rstrip().endswith(f"did you mean {app!r}?"), wrong.stderr
        named = re.findall(r"did you mean '([^']+)'", wrong.stderr)
        assert named == [app]
        right = cli.run(command[0], named[0], *command[2:])
        assert right.returncode == 0, right.stderr
        assert "trip-1" in right.stdout or command[0] == "stats"


async def test_stats_names_the_key_prefixes_that_hold_sessions(cli: Cli, other: str) -> None:
    app = f"app-{uuid.uuid4().hex[:8]}"
    async with cli.service(other) as svc:
        await svc.create_session(app_name=app, user_id="u", session_id="s1")
    wrong = cli.run("stats")
    assert wrong.returncode == 1
    assert wrong.stderr.startswith(
        f"redis-agent-sessions: no apps: no session was created under the key prefix "
        f"{cli.prefix!r}; other key prefixes hold sessions: "
    ), wrong.stderr
    assert f"--key-prefix {shlex.quote(other)} (" in wrong.stderr
    one = cli.run("stats", app)
    assert one.returncode == 1
    assert f"other key prefixes hold its sessions: --key-prefix {shlex.quote(other)}" in (
        one.stderr
    )
    assert cli.run("stats", app, prefix=other).returncode == 0
