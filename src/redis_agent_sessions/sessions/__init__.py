"""RedisSessionService: the session store with this package's own models."""

from __future__ import annotations

from redis_agent_sessions.models import Event, GetSessionConfig, ListSessionsResponse, Session
from redis_agent_sessions.sessions._pydantic_codec import PydanticCodec, private
from redis_agent_sessions.sessions._service import SessionServiceBase

__all__ = ["RedisSessionService"]


class _Codec(PydanticCodec[Session, Event]):
    """Maps the engine onto ``redis_agent_sessions.models``."""

    # These models are small enough that pydantic-core builds them faster than a plan can
    # in Python (benchmarks/adk.py: a plan read of 1,000 core events took 1.7x their
    # model_validate_json), so they are validated, and stored without a fingerprint.
    trusted_decode = False

    def __init__(self) -> None:
        super().__init__(Session, Event, GetSessionConfig)

    def revision(self, session: Session) -> int | None:
        revision: int | None = private(session, "_revision")
        return revision

    def set_revision(self, session: Session, revision: int) -> None:
        session._revision = revision


class RedisSessionService(
    SessionServiceBase[Session, Event, GetSessionConfig, ListSessionsResponse]
):
    """Sessions, events and scoped state stored in Redis, shared by every worker.

    Args:
        client: a ``redis.asyncio.Redis`` or ``redis.asyncio.cluster.RedisCluster`` client
            (the key layout follows); it stays open when this service closes.
        config: key prefix, TTL, stale-writer policy, size limit, write concern and read
            cache.

    Ids are taken as given: an empty or space-padded app name, user id or session id is
    an InvalidInputError, so that an id always names exactly what the caller wrote.
    """

    def _codec(self) -> _Codec:
        return _Codec()

    def _list_response(self, sessions: list[Session]) -> ListSessionsResponse:
        return ListSessionsResponse(sessions=sessions)
