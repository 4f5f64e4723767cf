"""The operator CLI as the tests run it: an OS process per command under a fresh key prefix,
and the ``cli`` fixture (conftest.py gives it to every module), on real Redis 7 and on the
real cluster.

Each command is ``python -m redis_agent_sessions ARGS`` in a process of its own, forked from
one that imported the CLI once per test session (``cli_forker.py``: the imports were most of
each command's time). The entry point itself, a fresh interpreter, is run by the tests that
start it with ``subprocess`` (``test_cli.py``'s ``_bare``, the closed pipe, ``tail -f``).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from _servers import skip_without
from _snapshot import Snapshot, snapshot
from redis_agent_sessions import RedisSessionService, SessionServiceConfig

__all__ = ["FORKERS", "Cli", "Forkers", "cli", "cli_forker", "drop"]

TIMEOUT = 120  # seconds a command may take


class Forker:
    """``cli_forker.py`` running, started with ``env`` (and so its startup settings), with
    ``preload`` imported too: :meth:`run` is ``subprocess.run`` of ``python -m
    redis_agent_sessions ARGS`` with its output captured as text, without the imports."""

    def __init__(self, env: dict[str, str], preload: tuple[str, ...]) -> None:
        # The caller's stdin, for commands run without one of their own (as subprocess.run).
        stdin = os.dup(0) if _is_open(0) else os.open(os.devnull, os.O_RDONLY)
        script = str(Path(__file__).with_name("cli_forker.py"))
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _START, script, str(stdin), *preload],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                pass_fds=(stdin,),
                env=env,
            )
        finally:
            os.close(stdin)
        self.lock = threading.Lock()  # one command at a time (tests run some in a thread)

    def run(
        self,
        argv: list[str],
        stdin: str | None,
        env: dict[str, str],
        timeout: float,
        script: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        with self.lock, tempfile.TemporaryDirectory(prefix="ras-cli-") as tmp:
            paths = {name: Path(tmp, name) for name in ("stdin", "stdout", "stderr")}
            if stdin is not None:
                paths["stdin"].write_text(stdin)
            request = {
                "argv": argv,
                "env": env,
                "cwd": os.getcwd(),
                "stdin": None if stdin is None else str(paths["stdin"]),
                "stdout": str(paths["stdout"]),
                "stderr": str(paths["stderr"]),
                "script": script,
            }
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            pid = self._reply(timeout)["pid"]
            try:
                status = self._reply(timeout)["status"]
            except subprocess.TimeoutExpired:
                os.kill(pid, signal.SIGKILL)  # the command's own process, forked for it
                self._reply(timeout)
                raise
            # Read as subprocess.run(text=True) reads a pipe: locale encoding, universal newlines.
            out, err = (paths[name].read_text() for name in ("stdout", "stderr"))
        command = ["python", script] if script else ["python", "-m"]
        return subprocess.CompletedProcess([*command, *argv], status, out, err)

    def _reply(self, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            raise subprocess.TimeoutExpired(["cli_forker.py"], timeout)
        line = self.proc.stdout.readline()
        assert line, f"cli_forker.py ended (exit {self.proc.wait()})"
        reply: dict[str, Any] = json.loads(line)
        return reply

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # it ends at the end of its input
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        assert self.proc.stdout is not None
        self.proc.stdout.close()


_START = "import runpy, sys; runpy.run_path(sys.argv.pop(1), run_name='__main__')"


class Forkers:
    """The forkers of a test session, one per startup environment: a command runs in a
    child of the one started with the same ``PYTHON*`` settings as the command's (other
    than PYTHONPATH, which the child applies), as if started afresh with them."""

    def __init__(self) -> None:
        self._by_startup: dict[tuple[Any, ...], Forker] = {}

    def run(
        self,
        argv: list[str],
        *,
        stdin: str | None = None,
        env: dict[str, str] | None = None,
        preload: tuple[str, ...] = (),
        timeout: float = TIMEOUT,
        script: str | Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """``subprocess.run([python, "-m", "redis_agent_sessions", *argv], input=stdin,
        env=env, capture_output=True, text=True, timeout=timeout)``, or with ``script``
        ``[python, script, *argv]``; ``preload``: modules the command imports that are worth
        importing once (a forker of their own imports them when it starts)."""
        env = dict(os.environ if env is None else env)
        startup = tuple(sorted((k, v) for k, v in env.items() if _at_startup(k)))
        forker = self._by_startup.get((startup, preload))
        if forker is None or forker.proc.poll() is not None:
            forker = self._by_startup[(startup, preload)] = Forker(env, preload)
        return forker.run(argv, stdin, env, timeout, None if script is None else str(script))

    def close(self) -> None:
        for forker in self._by_startup.values():
            forker.close()


def _at_startup(variable: str) -> bool:
    return variable.startswith("PYTHON") and variable != "PYTHONPATH"


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


FORKERS = Forkers()
"""The test session's forkers, for helpers that are no fixture (each starts on first use);
``cli_forker`` closes them when the session ends."""


@pytest.fixture(scope="session", autouse=True)
def cli_forker() -> Iterator[Forkers]:
    yield FORKERS
    FORKERS.close()


@dataclass
class Cli:
    url: str
    cluster: bool
    prefix: str = field(default_factory=lambda: f"cli-{uuid.uuid4().hex[:8]}")
    forker: Forkers | None = None

    def argv(self, *args: str, prefix: str | None = None) -> list[str]:
        """The command line of ``args`` on this server, under ``prefix`` (default: the test's)."""
        flags = ["--url", self.url, "--key-prefix", prefix or self.prefix]
        cluster = ["--cluster"] if self.cluster else []
        return [sys.executable, "-m", "redis_agent_sessions", *args, *flags, *cluster]

    def run(self, *args: str, stdin: str | None = None, prefix: str | None = None) -> Any:
        argv = self.argv(*args, prefix=prefix)
        if self.forker is not None:
            result = self.forker.run(argv[3:], stdin=stdin)
        else:
            result = subprocess.run(
                argv, capture_output=True, text=True, input=stdin, timeout=TIMEOUT
            )
        assert "Traceback" not in result.stderr, result.stderr
        if result.returncode:
            # Every failure is one clear line on stderr.
            assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        return result

    def json(self, *args: str) -> Any:
        result = self.run(*args, "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def client(self) -> Any:
        return RedisCluster.from_url(self.url) if self.cluster else Redis.from_url(self.url)

    async def snapshot(self) -> Snapshot:
        """Every key of this server (of every primary of a cluster): see ``_snapshot``."""
        client = self.client()
        async with client:
            return await snapshot(client)

    def service(self, prefix: str | None = None) -> RedisSessionService:
        config = SessionServiceConfig(key_prefix=prefix or self.prefix)
        return RedisSessionService.from_url(self.url, config=config, cluster=self.cluster)


@pytest.fixture(
    params=[
        pytest.param("REDIS_URL", marks=pytest.mark.real),
        pytest.param("REDIS_CLUSTER_URL", marks=[pytest.mark.real, pytest.mark.cluster]),
    ]
)
async def cli(request: pytest.FixtureRequest, cli_forker: Forkers) -> AsyncIterator[Cli]:
    url = skip_without(request.param)
    found = Cli(url, cluster=request.param == "REDIS_CLUSTER_URL", forker=cli_forker)
    yield found
    await drop(found, found.prefix)


async def drop(cli: Cli, prefix: str) -> None:
    """Delete every key under ``prefix`` (a test may scan; the CLI never does)."""
    client = cli.client()
    async with client:
        keys = [k async for k in client.scan_iter(match=f"{prefix}:*", count=1000)]
        for key in keys:
            await client.delete(key)
