"""FactJobs: what an operator sees of background generation, and does with its dead letters
(``redis-agent-sessions facts jobs`` and ``facts dead-letters``)."""

from __future__ import annotations

from typing import Any

from redis_agent_sessions._redis import scripts as _scripts
from redis_agent_sessions._redis.codec import check_id
from redis_agent_sessions.errors import InvalidInputError
from redis_agent_sessions.memory._jobs import DeadLetter, ShardBacklog
from redis_agent_sessions.memory._service import MemoryServiceBase

__all__ = ["FactJobs"]


class FactJobs:
    """An app's background-generation queue, shard by shard, and its dead letters."""

    def __init__(self, memory: MemoryServiceBase[Any, Any, Any, Any]) -> None:
        self._queue = memory._memory.jobs

    @_scripts.typed_permissions
    async def backlog(self, app_name: str) -> list[ShardBacklog]:
        """Each shard's queued, active, deferred and pending jobs, the oldest queued job's
        age, its dead letters and the jobs it dropped (their session was gone)."""
        return await self._queue.backlog(check_id("app_name", app_name))

    @_scripts.typed_permissions
    async def dead_letters(self, app_name: str) -> list[DeadLetter]:
        """The app's dead letters, shard by shard, oldest first."""
        return await self._queue.dead_letters(check_id("app_name", app_name))

    @_scripts.typed_permissions
    async def retry(self, app_name: str, letter_id: str) -> DeadLetter:
        """Queue a dead letter's job again (its attempts counted afresh); InvalidInputError
        when there is no such dead letter."""
        return await self._answer(app_name, letter_id, "retry")

    @_scripts.typed_permissions
    async def drop(self, app_name: str, letter_id: str) -> DeadLetter:
        """Forget a dead letter (and the events an events job kept for it)."""
        return await self._answer(app_name, letter_id, "drop")

    async def _answer(self, app_name: str, letter_id: str, action: str) -> DeadLetter:
        app = check_id("app_name", app_name)
        if not isinstance(letter_id, str):
            raise InvalidInputError(f"letter_id must be a string: {letter_id!r}")
        letter = await self._queue.answer_letter(app, letter_id, action)
        if letter is None:
            raise InvalidInputError(f"no dead letter {letter_id!r} in app {app!r}")
        return letter
