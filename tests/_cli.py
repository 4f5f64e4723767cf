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
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from _servers import skip_without
from redis_agent_sessions import RedisSessionService, SessionServiceConfig

__all__ = ["Cli", "cli", "cli_forker", "drop"]

TIMEOUT = 120  # seconds a command may take


class Forker:
    """``cli_forker.py`` running: :meth:`run` is ``subprocess.run`` of ``python -m
    redis_agent_sessions ARGS`` with its output captured as text, without the imports."""

    def __init__(self) -> None:
        # The caller's stdin, for commands run without one of their own (as subprocess.run).
        stdin = os.dup(0) if _is_open(0) else os.open(os.devnull, os.O_RDONLY)
        try:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _START,
                    str(Path(__file__).with_name("cli_forker.py")),
                    str(stdin),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                pass_fds=(stdin,),
            )
        finally:
            os.close(stdin)
        # What changes how an interpreter starts, other than PYTHONPATH (which the child
        # applies): a command run under other settings gets a fresh interpreter.
        self.startup = _startup_env(os.environ)

    def fits(self) -> bool:
        return self.proc.poll() is None and _startup_env(os.environ) == self.startup

    def run(self, argv: list[str], stdin: str | None) -> subprocess.CompletedProcess[str]:
        with tempfile.TemporaryDirectory(prefix="ras-cli-") as tmp:
            paths = {name: Path(tmp, name) for name in ("stdin", "stdout", "stderr")}
            if stdin is not None:
                paths["stdin"].write_text(stdin)
            request = {
                "argv": argv,
                "env": dict(os.environ),
                "cwd": os.getcwd(),
                "stdin": None if stdin is None else str(paths["stdin"]),
                "stdout": str(paths["stdout"]),
                "stderr": str(paths["stderr"]),
            }
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            pid = self._reply(TIMEOUT)["pid"]
            try:
                status = self._reply(TIMEOUT)["status"]
            except subprocess.TimeoutExpired:
                os.kill(pid, signal.SIGKILL)  # the command's own process, forked for it
                self._reply(TIMEOUT)
                raise
            # Read as subprocess.run(text=True) reads a pipe: locale encoding, universal newlines.
            out, err = (paths[name].read_text() for name in ("stdout", "stderr"))
        return subprocess.CompletedProcess(["python", "-m", *argv], status, out, err)

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


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _startup_env(env: Any) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("PYTHON") and k != "PYTHONPATH"}


@pytest.fixture(scope="session")
def cli_forker() -> Iterator[Forker]:
    forker = Forker()
    yield forker
    forker.close()


@dataclass
class Cli:
    url: str
    cluster: bool
    prefix: str = field(default_factory=lambda: f"cli-{uuid.uuid4().hex[:8]}")
    forker: Forker | None = None

    def argv(self, *args: str, prefix: str | None = None) -> list[str]:
        """The command line of ``args`` on this server, under ``prefix`` (default: the test's)."""
        flags = ["--url", self.url, "--key-prefix", prefix or self.prefix]
        cluster = ["--cluster"] if self.cluster else []
        return [sys.executable, "-m", "redis_agent_sessions", *args, *flags, *cluster]

    def run(self, *args: str, stdin: str | None = None, prefix: str | None = None) -> Any:
        argv = self.argv(*args, prefix=prefix)
        if self.forker is not None and self.forker.fits():
            result = self.forker.run(argv[3:], stdin)
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

    def service(self, prefix: str | None = None) -> RedisSessionService:
        config = SessionServiceConfig(key_prefix=prefix or self.prefix)
        return RedisSessionService.from_url(self.url, config=config, cluster=self.cluster)


@pytest.fixture(
    params=[
        pytest.param("REDIS_URL", marks=pytest.mark.real),
        pytest.param("REDIS_CLUSTER_URL", marks=[pytest.mark.real, pytest.mark.cluster]),
    ]
)
async def cli(request: pytest.FixtureRequest, cli_forker: Forker) -> AsyncIterator[Cli]:
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
