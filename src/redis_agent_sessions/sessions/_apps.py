"""The registry of app names that operators' listings read (``<prefix>:apps``): a step of
its own, apart from the create script, on every topology. On a cluster it lives in no app's
slot; everywhere, a tenant's Redis user may only read it (docs/security.md#tenants), and
Redis refuses a script any key in its KEYS that the user may not write. So a create checks
it with plain reads before the session is written (a registry of a foreign type, or an app
not listed that this user may not list, fails the create with nothing written) and lists
its app after, each at most once per app and process."""

from __future__ import annotations

from typing import Any

from redis_agent_sessions._redis import scripts as _scripts
from redis_agent_sessions._redis.codec import text
from redis_agent_sessions._redis.session_calls import REGISTER_APP, RegisterApp
from redis_agent_sessions.errors import CorruptDataError, PermissionDeniedError
from redis_agent_sessions.keys import KeySpace, escape

__all__ = ["AppListing"]


class AppListing:
    """Lists apps in the registry: only those not listed yet are written (a tenant's Redis
    user may only read it, docs/security.md#tenants), each checked once per process."""

    def __init__(self, client: Any, keys: KeySpace) -> None:
        self._client = client
        self._script = _scripts.register(client, REGISTER_APP)
        self._registry = keys.apps()
        self._listed: set[str] = set()

    async def check(self, app_name: str) -> None:
        """Raise what listing the app would (a foreign type, a refused ZADD), writing
        nothing."""
        if app_name in self._listed:
            return
        pipe = self._client.pipeline(transaction=False)
        pipe.type(self._registry)
        pipe.zscore(self._registry, escape(app_name))
        kind, score = await _scripts.execute(pipe, [self._registry])
        if text(kind) not in ("none", "zset"):
            raise CorruptDataError(self._registry, f"expected a zset, found {text(kind)}")
        if score is not None:
            self._listed.add(app_name)
            return
        await self._run(app_name, 0.0, write=False)

    async def list(self, app_name: str, first_created: float) -> None:
        if app_name not in self._listed:
            await self._run(app_name, first_created, write=True)
            self._listed.add(app_name)

    async def _run(self, app_name: str, first_created: float, *, write: bool) -> None:
        call = RegisterApp(
            apps=self._registry,
            app_member=escape(app_name),
            first_created=repr(first_created),
            write="1" if write else "",
        )
        try:
            await _scripts.run(self._script, call)
        except PermissionDeniedError as exc:
            if exc.key != self._registry or exc.command not in (None, "EVALSHA"):
                raise
            # Redis refuses the script outright when this user may only read the registry.
            raise PermissionDeniedError("zadd", self._registry, str(exc)) from exc
