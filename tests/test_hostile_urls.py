"""Hostile and malformed Redis URLs: each refused with InvalidInputError saying what is wrong
(the CLI: exit 2, one line), none ever showing a password, in a message or a log line.

Spans are checked in test_telemetry.py, where the SDK is set up."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from _cli import FORKERS
from _servers import skip_without
from redis_agent_sessions import InvalidInputError, RedisMemoryService, RedisSessionService
from redis_agent_sessions._redis.redact import has_secret, redact_url

SECRET = "SECRETPW"

REFUSED: list[tuple[str, str]] = [
    # Defect 8: the password, in the authority or the query, in every kind of refusal.
    (f"redis://admin:{SECRET}@127.0.0.1:6379/0?bogus=1", r"unknown URL parameter 'bogus'"),
    (
        f"redis://admin:{SECRET}@127.0.0.1:99999/0",
        r"^the port must be a number from 0 to 65535: redis://admin:\*\*\*@127\.0\.0\.1:99999/0$",
    ),
    (
        f"ftp://admin:{SECRET}@127.0.0.1:6379/0",
        r"scheme must be one of redis, rediss, unix\): ftp://admin:\*\*\*@127\.0\.0\.1:6379/0$",
    ),
    (f"redis://127.0.0.1/0?password={SECRET}&bogus=1", r"unknown URL parameter 'bogus'"),
    (f"redis://[::1:{SECRET}@h/0", r"^not a URL \(Invalid IPv6 URL\): redis://\[:\*\*\*@h/0$"),
    # An unencoded "/" or "?" puts part of the password where the port or the path is read.
    (
        f"redis://admin:{SECRET}/x@127.0.0.1:6379/0",
        r"^the port must be a number from 0 to 65535 \(a password's '/', '\?', '#' or '@' must "
        r"be percent-encoded\): redis://admin:\*\*\*@127\.0\.0\.1:6379/0$",
    ),
    (f"redis://admin:{SECRET}?x@127.0.0.1/0", r"^the port must be a number"),
    (f"rediss://h/0?ssl_password={SECRET}&ssl_check_hostname=maybe", "ssl_check_hostname"),
    (f"redis://h/0?password={SECRET}&password=again", r"'password' is given twice"),
    # Defect 9: values redis-py would ignore or take to mean something else.
    (
        f"redis://admin:{SECRET}@127.0.0.1/abc",
        r"^the URL's path must be a database number, as in redis://host:6379/0: "
        r"redis://admin:\*\*\*@127\.0\.0\.1/abc$",
    ),
    ("redis://h/1/2", r"path must be a database number"),
    ("redis://h/-1", r"path must be a database number"),
    (
        f"redis://admin:{SECRET}@h/0?db=1",
        r"^the URL names database 0 in its path and db=1 in its query; give it in one place$",
    ),
    ("redis://h/0?socket_timeout=-1", r"^URL parameter socket_timeout must be a positive number"),
    ("redis://h/0?socket_timeout=nan", r"socket_timeout must be a positive number of seconds"),
    ("redis://h/0?socket_timeout=1e400", r"socket_timeout must be a positive number of seconds"),
    ("redis://h/0?socket_timeout=0", r"socket_timeout must be a positive number of seconds"),
    ("redis://h/0?socket_connect_timeout=inf", r"socket_connect_timeout must be a positive"),
    ("redis://h/0?max_connections=-1", r"^URL parameter max_connections must not be negative"),
    ("redis://h/0?encoding=utf-16", r"^encoding must be utf-8 \(the library stores UTF-8 JSON\)"),
    ("redis://h/0?encoding=no-such-codec", r"^encoding must be utf-8"),
    # Defect 10: what is wrong, named.
    (
        "rediss://h/0?ssl_ca_certs=/nonexistent/ca.pem",
        r"^ssl_ca_certs: no such file: '/nonexistent/ca\.pem'$",
    ),
    ("rediss://h/0?ssl_certfile=/nonexistent/c.crt", r"^ssl_certfile: no such file"),
    ("rediss://h/0?ssl_ca_path=/nonexistent/certs", r"^ssl_ca_path: no such directory"),
    (
        "redis://h/0?key_prefix={x}",
        r"^bad service settings in the URL: key_prefix: key prefix must be non-empty and "
        r"contain no '\{' or '\}': '\{x\}'$",
    ),
]


@pytest.mark.parametrize(("url", "message"), REFUSED)
def test_a_bad_url_is_refused_by_name_and_shows_no_password(
    url: str, message: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    for make in (RedisSessionService.from_url, RedisMemoryService.from_url):
        with pytest.raises(InvalidInputError, match=message) as refused:
            make(url)
        assert SECRET not in str(refused.value)
    assert SECRET not in caplog.text


@pytest.mark.parametrize(
    ("url", "db"),
    [
        ("redis://h/0?db=0", 0),  # both, agreeing
        ("redis://h?db=3", 3),
        ("redis://h/", 0),
        ("redis://h:6380/2", 2),
        ("redis://h/4?encoding=UTF8&decode_responses=true", 4),
    ],
)
def test_a_good_database_and_encoding_reach_the_client(url: str, db: int) -> None:
    service = RedisSessionService.from_url(url)
    assert service._client.connection_pool.connection_kwargs.get("db", 0) == db


def test_tls_files_that_exist_are_accepted_and_passed_as_arguments_too(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("read at the first connection")
    RedisSessionService.from_url(f"rediss://h/0?ssl_ca_certs={ca}&ssl_ca_path={tmp_path}")
    # The same check for redis-py's parameters given as arguments.
    with pytest.raises(InvalidInputError, match=r"^ssl_keyfile: no such file"):
        RedisSessionService.from_url("rediss://h/0", ssl_keyfile=str(tmp_path / "missing.key"))
    with pytest.raises(InvalidInputError, match=r"^encoding must be utf-8"):
        RedisSessionService.from_url("redis://h/0", encoding="latin-1")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"redis://admin:{SECRET}@h:6379/0", "redis://admin:***@h:6379/0"),
        (f"redis://:{SECRET}@h", "redis://:***@h"),
        (f"rediss://h/0?password={SECRET}&x=1", "rediss://h/0?password=***&x=1"),
        (f"redis://h/0?ssl_password={SECRET}#f", "redis://h/0?ssl_password=***#f"),
        (f"redis://u:{SECRET}/x@h/0", "redis://u:***@h/0"),
        (f"redis://u:{SECRET}?x@h", "redis://u:***@h"),
        (f"redis://u:{SECRET}#x@h/0?db=1", "redis://u:***@h/0?db=1"),
        (f"redis://u:{SECRET}@w@h/0", "redis://u:***@h/0"),
        (f"unix://u:{SECRET}@/tmp/redis.sock?db=1", "unix://u:***@/tmp/redis.sock?db=1"),
        (f"redis://[x:{SECRET}@h", "redis://[x:***@h"),
        # Nothing to hide: a user name, an "@" in the query, a socket path with one.
        ("redis://ops@h/0", "redis://ops@h/0"),
        ("redis://h:6379/0?client_name=a@b", "redis://h:6379/0?client_name=a@b"),
        ("redis://[::1]:6379/0?client_name=a@b", "redis://[::1]:6379/0?client_name=a@b"),
        ("unix:///tmp/a@b.sock", "unix:///tmp/a@b.sock"),
        ("redis://h/0?password=", "redis://h/0?password="),
    ],
)
def test_the_redactor_hides_every_password(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert has_secret(url) == (shown != url)


# -- the CLI ------------------------------------------------------------------------------------


def _cli(*args: str) -> Any:
    result = FORKERS.run(["ls", *args], timeout=60)
    assert "Traceback" not in result.stderr, result.stderr
    return result


@pytest.mark.cli
@pytest.mark.parametrize(("url", "message"), REFUSED)
def test_the_cli_refuses_a_bad_url_in_one_line_without_the_password(url: str, message: str) -> None:
    result = _cli("--url", url)
    assert result.returncode == 2, result.stderr
    assert SECRET not in result.stdout + result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("redis-agent-sessions: bad Redis URL"), line
    reason = re.sub(r"^redis-agent-sessions: bad Redis URL( '[^ ]*')?: ", "", line)
    assert re.search(message, reason), line


@pytest.mark.cli
@pytest.mark.parametrize("prefix", ["{x}", "", "a}b"])
def test_the_cli_says_what_is_wrong_with_a_key_prefix(prefix: str) -> None:
    result = _cli("--url", "redis://127.0.0.1:1/0", "--key-prefix", prefix)
    assert result.returncode == 2
    assert result.stderr == (
        f"redis-agent-sessions: bad --key-prefix {prefix!r}: "
        f"key prefix must be non-empty and contain no '{{' or '}}': {prefix!r}\n"
    )


@pytest.mark.real
@pytest.mark.cli
@pytest.mark.parametrize("where", ["authority", "query"])
def test_the_cli_shows_no_password_a_server_refused(where: str) -> None:
    parts = urlsplit(skip_without("REDIS_URL"))
    if where == "authority":
        url = urlunsplit(parts._replace(netloc=f"nobody:{SECRET}@{parts.netloc}"))
        shown = urlunsplit(parts._replace(netloc=f"nobody:***@{parts.netloc}"))
    else:
        url = urlunsplit(parts._replace(query=f"username=nobody&password={SECRET}"))
        shown = urlunsplit(parts._replace(query="username=nobody&password=***"))
    result = _cli("--url", url)
    assert result.returncode == 2
    assert SECRET not in result.stdout + result.stderr
    assert result.stderr.startswith(f"redis-agent-sessions: cannot reach Redis at {shown}: ")
