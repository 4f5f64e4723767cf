"""TLS with a private CA, configured by the URL alone.

ADK's ``--session_service_uri`` gives users nothing but a URL, so everything a TLS
deployment needs (the CA, verification on or off, the hostname check, a client certificate)
must come through the query as redis-py's own connection parameters, converted as redis-py
converts them, while unknown ones are still refused.

The server tests (``real``) start their own TLS-only redis-servers from the ``redis-server``
on PATH, with certificates from a CA generated for the session (tests/_tls.py), so they need
neither REDIS_URL nor the network. The conversion and refusal tests need no server.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from redis.asyncio import Redis
from redis.asyncio.connection import ConnectionPool, SSLConnection, parse_url
from redis.exceptions import ConnectionError as RedisConnectionError

from _tls import AuthClients, KeyPair, Pki, TlsServer, make_pki, start_tls_server
from redis_agent_sessions import (
    Content,
    Event,
    EventActions,
    InvalidInputError,
    Part,
    RedisMemoryService,
    RedisSessionService,
)

VERIFY_FAILED = "certificate verify failed"


def tls_url(port: int, host: str = "127.0.0.1", /, **params: str | Path) -> str:
    """``rediss://host:port/0`` with ``params`` as its query, each value URL-encoded."""
    query = "&".join(f"{name}={quote(str(value), safe='')}" for name, value in params.items())
    return f"rediss://{host}:{port}/0" + (f"?{query}" if query else "")


def mtls_url(port: int, pki: Pki, **params: str | Path) -> str:
    """A verifying URL that also presents the client certificate, plus ``params``."""
    return tls_url(
        port,
        ssl_ca_certs=pki.ca,
        ssl_cert_reqs="required",
        ssl_certfile=pki.client.cert,
        ssl_keyfile=pki.client.key,
        **params,
    )


# -- the PKI and the servers, once per session -----------------------------------------------


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _serve(
    tmp_path_factory: pytest.TempPathFactory, pair: KeyPair, ca: Path, auth: AuthClients
) -> Iterator[TlsServer]:
    server = start_tls_server(tmp_path_factory.mktemp("redis-tls"), pair, ca, auth_clients=auth)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def tls_server(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[TlsServer]:
    """Certificate for ``localhost`` and ``127.0.0.1``; no client certificates asked."""
    yield from _serve(tmp_path_factory, pki.server, pki.ca, "no")


@pytest.fixture(scope="session")
def localhost_only_server(
    tmp_path_factory: pytest.TempPathFactory, pki: Pki
) -> Iterator[TlsServer]:
    """Certificate for ``localhost`` only: reached at 127.0.0.1, the hostname does not match."""
    yield from _serve(tmp_path_factory, pki.localhost_only, pki.ca, "no")


@pytest.fixture(scope="session")
def mtls_server(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[TlsServer]:
    """``--tls-auth-clients yes``: clients must present a certificate signed by the CA."""
    yield from _serve(tmp_path_factory, pki.server, pki.ca, "yes")


# -- what a working and a refused connection look like ---------------------------------------


def _event(text: str, **delta: Any) -> Event:
    return Event(
        author="user",
        invocation_id="inv-tls",
        content=Content(role="user", parts=[Part(text=text)]),
        actions=EventActions(state_delta=delta),
    )


async def round_trip(url: str) -> None:
    """create_session, append_event with a state delta, get_session: all through ``url``."""
    app = f"tls-{uuid.uuid4().hex[:8]}"
    async with RedisSessionService.from_url(url) as service:
        session = await service.create_session(app_name=app, user_id="u", state={"step": 0})
        event = _event("hello over TLS", step=1, **{"user:tls": True})
        await service.append_event(session, event)
        got = await service.get_session(app_name=app, user_id="u", session_id=session.id)
        assert got is not None
        assert got.state == {"step": 1, "user:tls": True}
        assert [e.id for e in got.events] == [event.id]
        assert got.events[0].actions.state_delta == {"step": 1, "user:tls": True}
        await service.delete_session(app_name=app, user_id="u", session_id=session.id)


async def refused(url: str, match: str | None = None) -> RedisConnectionError:
    """The first command through ``url`` fails with redis-py's ConnectionError (not a
    TypeError or ValueError from a parameter that never reached the TLS layer)."""
    async with RedisSessionService.from_url(url) as service:
        with pytest.raises(RedisConnectionError, match=match) as caught:
            await service.create_session(app_name="tls-refused", user_id="u")
    assert not isinstance(caught.value, (TypeError, ValueError))
    return caught.value


# -- 1-3: verification on with the right CA, with another CA, and off --------------------------


@pytest.mark.real
async def test_verification_with_the_private_ca_round_trips(
    tls_server: TlsServer, pki: Pki
) -> None:
    await round_trip(tls_url(tls_server.port, ssl_ca_certs=pki.ca, ssl_cert_reqs="required"))


@pytest.mark.real
@pytest.mark.parametrize("ca", ["unrelated CA", "system trust store"])
async def test_verification_refuses_a_server_its_ca_did_not_sign(
    tls_server: TlsServer, pki: Pki, ca: str
) -> None:
    params: dict[str, str | Path] = {"ssl_cert_reqs": "required"}
    if ca == "unrelated CA":
        params["ssl_ca_certs"] = pki.other_ca
    await refused(tls_url(tls_server.port, **params), match=VERIFY_FAILED)


@pytest.mark.real
async def test_verification_off_needs_no_ca(tls_server: TlsServer) -> None:
    await round_trip(tls_url(tls_server.port, ssl_cert_reqs="none"))


# -- 4: the hostname check --------------------------------------------------------------------


@pytest.mark.real
async def test_the_hostname_check_passes_on_a_matching_san(tls_server: TlsServer, pki: Pki) -> None:
    """The server certificate names ``127.0.0.1`` (an IP SAN) and ``localhost`` (a DNS
    SAN): the check passes for either name."""
    await round_trip(
        tls_url(
            tls_server.port,
            ssl_ca_certs=pki.ca,
            ssl_cert_reqs="required",
            ssl_check_hostname="true",
        )
    )
    if not _localhost_is_loopback():
        return  # the server listens on 127.0.0.1 only
    await round_trip(
        tls_url(
            tls_server.port,
            "localhost",
            ssl_ca_certs=pki.ca,
            ssl_cert_reqs="required",
            ssl_check_hostname="true",
        )
    )


@pytest.mark.real
async def test_a_hostname_mismatch_fails_unless_the_check_is_off(
    localhost_only_server: TlsServer, pki: Pki
) -> None:
    """A certificate for ``localhost`` only, reached at 127.0.0.1: the check fails; turned
    off, the chain is still verified (a wrong CA still fails)."""
    port = localhost_only_server.port
    await refused(
        tls_url(port, ssl_ca_certs=pki.ca, ssl_cert_reqs="required", ssl_check_hostname="true"),
        match="IP address mismatch",
    )
    # redis-py checks the hostname by default when it verifies.
    await refused(tls_url(port, ssl_ca_certs=pki.ca, ssl_cert_reqs="required"), match="mismatch")
    await round_trip(
        tls_url(port, ssl_ca_certs=pki.ca, ssl_cert_reqs="required", ssl_check_hostname="false")
    )
    await refused(
        tls_url(
            port, ssl_ca_certs=pki.other_ca, ssl_cert_reqs="required", ssl_check_hostname="false"
        ),
        match=VERIFY_FAILED,
    )


def _localhost_is_loopback() -> bool:
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo("localhost", None)}
    except OSError:
        return False
    return "127.0.0.1" in addresses


# -- 5: client certificates -------------------------------------------------------------------


@pytest.mark.real
async def test_a_server_asking_for_client_certificates_gets_them_from_the_url(
    mtls_server: TlsServer, pki: Pki
) -> None:
    verified: dict[str, str | Path] = {"ssl_ca_certs": pki.ca, "ssl_cert_reqs": "required"}
    await refused(tls_url(mtls_server.port, **verified))
    await round_trip(mtls_url(mtls_server.port, pki))


# -- 6: the ADK drop-ins and the memory service -----------------------------------------------


@pytest.mark.real
async def test_the_memory_service_takes_the_same_url(mtls_server: TlsServer, pki: Pki) -> None:
    app = f"tls-mem-{uuid.uuid4().hex[:8]}"
    # Redis 7.0 on PATH has no search module.
    url = mtls_url(mtls_server.port, pki, memory_backend="plain")
    async with (
        RedisSessionService.from_url(url) as sessions,
        RedisMemoryService.from_url(url) as memory,
    ):
        session = await sessions.create_session(app_name=app, user_id="u")
        await sessions.append_event(session, _event("the tangerine ferry leaves at dawn"))
        assert await memory.backend() == "plain"
        await memory.add_session_to_memory(session)
        found = await memory.search_memory(app_name=app, user_id="u", query="tangerine")
        assert len(found.memories) == 1
        await sessions.delete_session(app_name=app, user_id="u", session_id=session.id)


@pytest.mark.real
@pytest.mark.adk
async def test_the_adk_drop_ins_take_the_same_url(mtls_server: TlsServer, pki: Pki) -> None:
    pytest.importorskip("google.adk")
    from google.adk.events import Event as AdkEvent
    from google.adk.events import EventActions as AdkEventActions
    from google.genai import types

    from redis_agent_sessions import adk

    app = f"tls-adk-{uuid.uuid4().hex[:8]}"
    url = mtls_url(mtls_server.port, pki, memory_backend="plain")
    sessions = adk.RedisSessionService(uri=url)
    memory = adk.RedisMemoryService(uri=url)
    try:
        session = await sessions.create_session(app_name=app, user_id="u", state={"step": 0})
        event = AdkEvent(
            author="user",
            invocation_id="inv-tls",
            content=types.Content(role="user", parts=[types.Part(text="a lighthouse in fog")]),
            actions=AdkEventActions(state_delta={"step": 1, "user:tls": True}),
        )
        await sessions.append_event(session, event)
        got = await sessions.get_session(app_name=app, user_id="u", session_id=session.id)
        assert got is not None
        assert got.state == {"step": 1, "user:tls": True}
        assert [e.id for e in got.events] == [event.id]
        await memory.add_session_to_memory(got)
        found = await memory.search_memory(app_name=app, user_id="u", query="lighthouse")
        assert len(found.memories) == 1
        await sessions.delete_session(app_name=app, user_id="u", session_id=session.id)
    finally:
        await sessions.close()
        await memory.close()


# -- 7: the CLI -------------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("redis-agent-sessions")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "redis_agent_sessions"]
    result = subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result


@pytest.mark.real
@pytest.mark.cli
def test_the_cli_connects_with_tls_from_the_url(tls_server: TlsServer, pki: Pki) -> None:
    prefix = f"tls-cli-{uuid.uuid4().hex[:8]}"
    url = tls_url(tls_server.port, ssl_ca_certs=pki.ca, ssl_cert_reqs="required", key_prefix=prefix)

    async def seed() -> None:
        async with RedisSessionService.from_url(url) as service:
            session = await service.create_session(app_name="cli-app", user_id="u")
            await service.append_event(session, _event("hi", step=1))

    asyncio.run(seed())
    result = _cli("stats", "--json", "--url", url)
    assert result.returncode == 0, result.stderr
    apps = {row["app_name"]: row for row in json.loads(result.stdout)["apps"]}
    assert apps["cli-app"]["sessions"] == 1
    assert apps["cli-app"]["events"] == 1

    wrong = tls_url(tls_server.port, ssl_ca_certs=pki.other_ca, ssl_cert_reqs="required")
    result = _cli("stats", "--url", wrong)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "cannot reach Redis" in result.stderr
    assert VERIFY_FAILED in result.stderr


# -- 8: conversion and refusal, no server -----------------------------------------------------


@pytest.fixture
def tls_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The TLS files the URLs below name, relative to the working directory: a missing one
    is refused when the client is made (their content is read at the first connection)."""
    monkeypatch.chdir(tmp_path)
    for name in ("ca dir/ca.crt", "c.crt", "c.key", "x"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("never read here")
    (tmp_path / "certs").mkdir()


CONVERTED: list[tuple[str, str, Any]] = [
    ("ssl_check_hostname=false", "ssl_check_hostname", False),
    ("ssl_check_hostname=true", "ssl_check_hostname", True),
    ("socket_timeout=2.5", "socket_timeout", 2.5),
    ("socket_connect_timeout=1.5", "socket_connect_timeout", 1.5),
    ("socket_keepalive=yes", "socket_keepalive", True),
    ("max_connections=7", "max_connections", 7),
    ("health_check_interval=3", "health_check_interval", 3),
    ("ssl_ca_certs=ca%20dir%2Fca.crt", "ssl_ca_certs", "ca dir/ca.crt"),
    ("ssl_ca_path=certs", "ssl_ca_path", "certs"),
    ("ssl_certfile=c.crt", "ssl_certfile", "c.crt"),
    ("ssl_keyfile=c.key", "ssl_keyfile", "c.key"),
    ("ssl_password=s%26cret", "ssl_password", "s&cret"),
    ("ssl_cert_reqs=none", "ssl_cert_reqs", "none"),
    ("ssl_cert_reqs=required", "ssl_cert_reqs", "required"),
    ("ssl_ciphers=ECDHE%2BAESGCM", "ssl_ciphers", "ECDHE+AESGCM"),
    ("ssl_min_version=771", "ssl_min_version", 771),  # ssl.TLSVersion.TLSv1_2
]


def _pool(service: Any) -> ConnectionPool:
    """The connection pool of a service's own (single-node) client, never connected here."""
    client = service._client
    assert isinstance(client, Redis)
    return client.connection_pool


@pytest.mark.usefixtures("tls_files")
@pytest.mark.parametrize(("query", "name", "expected"), CONVERTED)
async def test_connection_parameters_are_converted_as_redis_py_converts_them(
    query: str, name: str, expected: Any
) -> None:
    url = f"rediss://h:6380/0?{query}"
    for service in (RedisSessionService.from_url(url), RedisMemoryService.from_url(url)):
        async with service:
            pool = _pool(service)
            # The pool's own parameters (max_connections) stay on the pool.
            kwargs = pool.connection_kwargs
            value = kwargs[name] if name in kwargs else getattr(pool, name)
            assert value == expected
            assert type(value) is type(expected)
            assert value == dict(parse_url(url))[name]
            assert pool.connection_class is SSLConnection
            pool.make_connection()  # every parameter is one SSLConnection takes


@pytest.mark.usefixtures("tls_files")
async def test_the_issues_url_reaches_redis_py_typed() -> None:
    url = "rediss://h/0?ssl_check_hostname=false&socket_timeout=2.5&ssl_ca_certs=x"
    async with RedisSessionService.from_url(url) as service:
        kwargs = _pool(service).connection_kwargs
        assert kwargs["ssl_check_hostname"] is False
        assert kwargs["socket_timeout"] == 2.5
        assert kwargs["ssl_ca_certs"] == "x"
        connection = _pool(service).make_connection()
        assert isinstance(connection, SSLConnection)
        assert connection.ssl_context.check_hostname is False
        assert connection.ssl_context.ca_certs == "x"


@pytest.mark.adk
@pytest.mark.usefixtures("tls_files")
def test_the_adk_drop_in_builds_the_same_client() -> None:
    pytest.importorskip("google.adk")
    from redis_agent_sessions import adk

    url = "rediss://h/0?ssl_check_hostname=false&socket_timeout=2.5&ssl_ca_certs=x"
    service = adk.RedisSessionService(uri=url)
    kwargs = _pool(service).connection_kwargs
    assert kwargs["ssl_check_hostname"] is False
    assert kwargs["socket_timeout"] == 2.5
    assert kwargs["ssl_ca_certs"] == "x"
    asyncio.run(service.close())


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("ssl_ca_cert=/x", "'ssl_ca_cert'"),  # a typo of ssl_ca_certs
        ("sslcertreqs=none", "'sslcertreqs'"),
        ("ssl_ca_certs=/x&ssl_verify=no", "'ssl_verify'"),
        # Constructor arguments redis-py takes only as objects, never from a string.
        ("connection_class=SSLConnection", "'connection_class'"),
    ],
)
def test_unknown_parameters_are_refused_by_name(query: str, message: str) -> None:
    url = f"rediss://h/0?{query}"
    with pytest.raises(InvalidInputError, match=message):
        RedisSessionService.from_url(url)
    with pytest.raises(InvalidInputError, match=message):
        RedisMemoryService.from_url(url)


@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("socket_timeout=abc", "socket_timeout"),
        ("ssl_check_hostname=maybe", "ssl_check_hostname"),
        ("max_connections=many", "max_connections"),
        ("ssl_cert_reqs=sometimes", "ssl_cert_reqs"),
        ("ssl_include_verify_flags=VERIFY_NOTHING_SUCH", "ssl_include_verify_flags"),
    ],
)
def test_bad_values_are_invalid_input_naming_the_parameter(query: str, name: str) -> None:
    """Refused when the service is built, as InvalidInputError: neither redis-py's own
    ValueError from its URL parser nor an error at the first connection passes."""
    url = f"rediss://h/0?{query}"
    with pytest.raises(InvalidInputError, match=name):
        RedisSessionService.from_url(url)
    with pytest.raises(InvalidInputError, match=name):
        RedisMemoryService.from_url(url)


@pytest.mark.cli
def test_the_cli_refuses_an_unknown_parameter_in_one_line() -> None:
    result = _cli("stats", "--url", "rediss://127.0.0.1:1/0?ssl_ca_cert=/x")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "'ssl_ca_cert'" in result.stderr
