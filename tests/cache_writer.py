"""Run by tests/test_read_cache.py in its own OS process: changes one session the way
another worker would, between two reads of a worker that caches it, and prints what the
session now is (``get_session`` of a service without the cache) as one JSON object.

    python cache_writer.py URL PREFIX SID ACTION [--cluster] [--adk]

ACTION: ``append`` (3 events, with session, ``user:`` and ``app:`` keys), ``delete``,
``recreate`` (delete, create under the same id, 2 events), or ``recreate-same`` (delete, then
create under the same id with events of the old ones' ids and times but other content: the
stream ids and revisions match the old session's, only the creation time tells them apart).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from redis_agent_sessions import Event, EventActions, RedisSessionService, SessionServiceConfig

APP, USER = "cache_app", "cache_user"


async def main(url: str, prefix: str, sid: str, action: str, cluster: bool, adk: bool) -> None:
    config = SessionServiceConfig(key_prefix=prefix)
    ids = {"app_name": APP, "user_id": USER, "session_id": sid}
    service: Any
    if adk:
        from google.adk.events import Event as AdkEvent
        from google.adk.events import EventActions as AdkEventActions

        from redis_agent_sessions.adk import RedisSessionService as AdkService

        service = AdkService.from_url(url, config=config, cluster=cluster)

        def event(delta: dict[str, Any], **same: Any) -> Any:
            return AdkEvent(author="other", actions=AdkEventActions(state_delta=delta), **same)
    else:
        service = RedisSessionService.from_url(url, config=config, cluster=cluster)

        def event(delta: dict[str, Any], **same: Any) -> Any:
            return Event(author="other", actions=EventActions(state_delta=delta), **same)

    async with service:
        old = await service.get_session(**ids)
        if action == "append":
            for i in range(3):
                await service.append_event(
                    old, event({"other": i, "user:seen": i, "app:version": i})
                )
        elif action.startswith("recreate"):
            await service.delete_session(**ids)
            new = await service.create_session(
                app_name=APP, user_id=USER, session_id=sid, state={"again": True}
            )
            if action == "recreate":
                for i in range(2):
                    await service.append_event(new, event({"round": 2, "i": i}))
            else:
                for i, was in enumerate(old.events):
                    same = {"id": was.id, "timestamp": was.timestamp}
                    await service.append_event(new, event({"i": i, "v": 2}, **same))
        elif action == "delete":
            await service.delete_session(**ids)
        now = await service.get_session(**ids)
    print(json.dumps(None if now is None else now.model_dump(mode="json")))


if __name__ == "__main__":
    url, prefix, sid, action = sys.argv[1:5]
    asyncio.run(main(url, prefix, sid, action, "--cluster" in sys.argv, "--adk" in sys.argv))
