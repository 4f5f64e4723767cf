"""What a client talks to, decided once per service: one Redis node, or a Redis Cluster.

Two things follow from it, and nothing else in the package asks: the key layout (on a
cluster every script and transaction stays in one hash slot, so app-scope writes take a
second step; see ``redis_agent_sessions.sessions._layout``), and how commands that name
no key (``MODULE LIST``, ``FT.*``) are routed. The two can differ: a test client that checks
slots uses the cluster layout but is one node to route to.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ResponseError

from redis_agent_sessions._redis import lifecycle as _lifecycle
from redis_agent_sessions.errors import InvalidInputError

__all__ = ["Topology"]


class Topology:
    """The deployment behind one client, as the services use it."""

    def __init__(self, client: Any, *, cluster: bool | None = None) -> None:
        detected = _lifecycle.is_cluster_client(client)
        if cluster is False and detected:
            raise InvalidInputError("cluster=False, but the client is a RedisCluster")
        self.client = client
        self.cluster = detected or bool(cluster)
        """The cluster key layout: every script touches one slot."""
        self._cluster_client = isinstance(client, RedisCluster)
        self.fresh = self._cluster_client
        """Whether ``ready`` has work to do (checked first: it runs before every call)."""
        self._initializing: asyncio.Lock | None = None

    @property
    def routes_by_slot(self) -> bool:
        """Whether commands go to the node of their slot (a cluster client), not one node."""
        return self._cluster_client

    @property
    def endpoint(self) -> dict[str, str | int]:
        """Where the client connects, as telemetry's ``server.address``, ``server.port`` and
        ``db.namespace`` (a cluster's: the first node it was given, and database 0)."""
        if self._cluster_client:
            nodes = list(self.client.nodes_manager.startup_nodes.values())
            found: dict[str, Any] = {"host": nodes[0].host, "port": nodes[0].port} if nodes else {}
        else:
            pool = getattr(self.client, "connection_pool", None)
            found = dict(getattr(pool, "connection_kwargs", {}))
        endpoint: dict[str, str | int] = {"db.namespace": str(found.get("db", 0))}
        address = found.get("path") or found.get("host")
        if isinstance(address, str):
            endpoint["server.address"] = address
        if isinstance(found.get("port"), int) and not found.get("path"):
            endpoint["server.port"] = found["port"]
        return endpoint

    def socket_timeout(self) -> float | None:
        """Seconds the client's connections wait for any reply (None: for ever).

        Asked of a connection made as the client makes its own (never connected), not read
        from the client's arguments: ``Redis.from_url(url)`` passes none, and the
        connection class then applies its own default (redis-py's: 5 s).
        """
        timeout = getattr(self._new_connection(), "socket_timeout", None)
        return float(timeout) if isinstance(timeout, (int, float)) else None

    def _new_connection(self) -> Any:
        """An unconnected connection of the client's kind, or None for a client that makes
        none (a stand-in without a pool)."""
        if self._cluster_client:
            nodes = list(self.client.nodes_manager.startup_nodes.values())
            return nodes[0].connection_class(**nodes[0].connection_kwargs) if nodes else None
        make = getattr(getattr(self.client, "connection_pool", None), "make_connection", None)
        return make() if callable(make) else None

    async def ready(self) -> None:
        """Initialize a fresh cluster client once: redis-py 8.1's RedisCluster fails when its
        very first commands run concurrently (redis-py issue #3032)."""
        if not self.fresh:
            return
        if self._initializing is None:
            self._initializing = asyncio.Lock()
        async with self._initializing:
            if self.fresh:
                await self.client.initialize()
                self.fresh = False

    @property
    def address(self) -> str:
        """Where the client connects, for people to read: ``host:port``, or a socket's path
        (a cluster's: the first node it was given)."""
        endpoint = self.endpoint
        address = str(endpoint.get("server.address", "an unknown address"))
        return f"{address}:{endpoint['server.port']}" if "server.port" in endpoint else address

    async def on_primaries(self, *commands: tuple[Any, ...]) -> list[tuple[str, list[Any]]]:
        """Run commands that name no key on every primary, in one round trip to each (a
        pipeline; on a cluster, concurrently on the node's connections): per primary, its
        address and its replies in order, an error reply (a refused or unknown command) in
        place of its reply. A node that cannot be reached raises."""
        if not self._cluster_client:
            pipe = self.client.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)
            return [(self.address, list(await pipe.execute(raise_on_error=False)))]
        await self.ready()

        async def on(node: Any) -> tuple[str, list[Any]]:
            calls = (self.client.execute_command(*c, target_nodes=node) for c in commands)
            return str(node.name), list(await asyncio.gather(*map(_or_error, calls)))

        return list(await asyncio.gather(*map(on, self.client.get_primaries())))

    async def each_primary(self, *command: Any) -> list[Any]:
        """Run a command that names no key on every primary; their replies."""
        if not self._cluster_client:
            return [await self.client.execute_command(*command)]
        await self.ready()
        nodes = self.client.get_primaries()
        calls = (self.client.execute_command(*command, target_nodes=n) for n in nodes)
        return list(await asyncio.gather(*calls))

    async def any_node(self, *command: Any) -> Any:
        """Run a command that names no key on one node (every node of a deployment loads
        the same modules). A node, not the RANDOM flag, which redis-py 8.1 honours only on
        the first call."""
        if self._cluster_client:
            node = self.client.get_default_node()
            return await self.client.execute_command(*command, target_nodes=node)
        return await self.client.execute_command(*command)

    def node_of(self, key: str) -> str:
        """The name of the primary that holds ``key`` (the client's slot map; after
        ``ready``); one node's address when there is one node to route to."""
        if not self._cluster_client:
            return self.address
        return str(self.client.get_node_from_key(key).name)

    async def at_node(self, node: str, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Run commands that name no key on the primary named ``node`` (see
        ``node_of``); replies in order, errors raised."""
        if not self._cluster_client:
            return await self.at_key("", commands)
        target = self.client.get_node(node_name=node)
        calls = (self.client.execute_command(*c, target_nodes=target) for c in commands)
        return list(await asyncio.gather(*calls))

    async def primary_names(self) -> list[str]:
        """The names of the primaries (one node's address when there is one)."""
        if not self._cluster_client:
            return [self.address]
        await self.ready()
        return [str(node.name) for node in self.client.get_primaries()]

    async def at_key(self, key: str, commands: list[tuple[Any, ...]]) -> list[Any]:
        """Run commands that name no key (``FT.*``: an index name is no key) on the node that
        holds ``key``, in one round trip; replies in order, errors raised."""
        if not self._cluster_client:
            pipe = self.client.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)
            return list(await pipe.execute())
        node = self.client.get_node_from_key(key)
        calls = (self.client.execute_command(*c, target_nodes=node) for c in commands)
        return list(await asyncio.gather(*calls))


async def _or_error(reply: Awaitable[Any]) -> Any:
    try:
        return await reply
    except ResponseError as exc:
        return exc
