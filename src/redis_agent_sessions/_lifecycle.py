"""Client ownership shared by every service: inject a client, or let ``from_url`` make one."""

from __future__ import annotations

from types import TracebackType
from typing import Any

from redis.asyncio import Redis
from typing_extensions import Self

from .config import SessionServiceConfig

__all__ = ["ClientOwner"]


class ClientOwner:
    """``from_url``, ``aclose`` and ``async with`` for a service built as ``cls(client, config=)``.

    A client passed in stays open when the service closes; one made by ``from_url`` is
    closed with it.
    """

    _client: Redis
    _owns_client: bool = False

    def __init__(self, client: Redis, *, config: SessionServiceConfig | None = None) -> None:
        raise NotImplementedError  # each service defines its own; declared for from_url

    @classmethod
    def from_url(
        cls, url: str, *, config: SessionServiceConfig | None = None, **redis_kwargs: Any
    ) -> Self:
        """A service with its own client (``redis.asyncio.Redis.from_url``), closed by
        :meth:`aclose`."""
        service = cls(Redis.from_url(url, **redis_kwargs), config=config)
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
