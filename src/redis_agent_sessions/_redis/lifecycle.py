"""Client ownership shared by every service: inject a client, or let ``from_url`` make one."""

from __future__ import annotations

from types import TracebackType
from typing import Any, TypeAlias

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from typing_extensions import Self

from redis_agent_sessions._redis.params import check_client_kwargs
from redis_agent_sessions._redis.uri import ServiceURL, parse_service_url
from redis_agent_sessions.config import SessionServiceConfig
from redis_agent_sessions.errors import InvalidInputError

__all__ = [
    "AnyRedis",
    "ClientOwner",
    "check_client_or_uri",
    "client_for",
    "is_cluster_client",
    "make_client",
    "open_memory_url",
    "open_url",
]

AnyRedis: TypeAlias = "Redis | RedisCluster"
"""The clients every service accepts: a single node (or Sentinel primary), or a cluster."""


def is_cluster_client(client: object) -> bool:
    """Whether ``client`` talks to a Redis Cluster (which decides the key layout)."""
    return isinstance(client, RedisCluster)


def make_client(url: str, *, cluster: bool, **redis_kwargs: Any) -> AnyRedis:
    """``RedisCluster.from_url`` when ``cluster``, else ``Redis.from_url``."""
    if cluster:
        return RedisCluster.from_url(url, **redis_kwargs)
    return Redis.from_url(url, **redis_kwargs)


def check_client_or_uri(client: object, uri: str | None) -> None:
    """The drop-ins take exactly one of an injected client and a URI (as ADK's service
    registry and ``services.yaml`` build them)."""
    if client is not None and uri is not None:
        raise InvalidInputError("pass a client or a uri, not both")
    if client is None and uri is None:
        raise InvalidInputError("a client or a uri is needed")


def client_for(
    parsed: ServiceURL, settings: SessionServiceConfig, cluster: bool, redis_kwargs: dict[str, Any]
) -> AnyRedis:
    """The client for ``parsed``: a cluster client when the argument, the URL or the config
    (``cluster=True``) asks for one, since the cluster layout needs a client that follows
    MOVED replies; redis-py's parameters from the URL and from the caller, each given once."""
    cluster = bool(cluster or settings.cluster)
    from_url = parsed.client_kwargs(cluster)
    if twice := sorted(from_url.keys() & redis_kwargs.keys()):
        raise InvalidInputError(
            f"{', '.join(twice)} given both in the URL and as an argument; give each once"
        )
    check_client_kwargs({**from_url, **redis_kwargs})
    return make_client(parsed.redis_url, cluster=cluster, **from_url, **redis_kwargs)


def open_url(
    url: str, config: SessionServiceConfig | None, cluster: bool = False, **redis_kwargs: Any
) -> tuple[AnyRedis, SessionServiceConfig]:
    """Client and config for a session service's ``from_url``: settings may be in the URL."""
    parsed = parse_service_url(url)
    settings = parsed.config(config)
    return client_for(parsed, settings, cluster, redis_kwargs), settings


def open_memory_url(
    url: str,
    config: SessionServiceConfig | None,
    backend: Any,
    cluster: bool,
    **redis_kwargs: Any,
) -> tuple[AnyRedis, SessionServiceConfig, Any, dict[str, str]]:
    """Client, config, backend and the other memory settings of the URL (as written), for a
    memory service's ``from_url``: the URL's ``memory_backend`` counts unless ``backend``
    (not ``auto``) says otherwise."""
    parsed = parse_service_url(url)
    chosen = parsed.memory_backend or backend
    if parsed.memory_backend and backend not in ("auto", parsed.memory_backend):
        raise InvalidInputError(
            f"the URL asks for memory_backend={parsed.memory_backend} but backend={backend!r} "
            "was passed with it; give it in one place"
        )
    settings = parsed.config(config)
    client = client_for(parsed, settings, cluster, redis_kwargs)
    return client, settings, chosen, parsed.memory


class ClientOwner:
    """``from_url``, ``aclose`` and ``async with`` for a service built as ``cls(client, config=)``.

    A client passed in stays open when the service closes; one made by ``from_url`` is
    closed with it.
    """

    _client: AnyRedis
    _owns_client: bool = False

    def __init__(self, client: AnyRedis, *, config: SessionServiceConfig | None = None) -> None:
        raise NotImplementedError  # each service defines its own; declared for from_url

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        config: SessionServiceConfig | None = None,
        cluster: bool = False,
        **redis_kwargs: Any,
    ) -> Self:
        """A service with its own client, closed by ``aclose``.

        ``cluster=True`` connects to a Redis Cluster (``RedisCluster.from_url``; the URL
        names any node); otherwise ``Redis.from_url`` (``redis://``, ``rediss://``,
        ``unix://``). The URL's query may carry settings (``?key_prefix=prod&cluster=true``,
        any ``SessionServiceConfig`` field) next to redis-py's own parameters.
        """
        client, settings = open_url(url, config, cluster, **redis_kwargs)
        service = cls(client, config=settings)
        service._owns_client = True
        return service

    async def aclose(self) -> None:
        """Close the client if this service created it."""
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
