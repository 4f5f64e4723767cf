"""The registry of app names that operators' listings read (``<prefix>:apps``), on a
cluster: there it lives in no app's slot, so a create checks it before the session is
written (a registry of a foreign type, or one this Redis user may not write, fails the
create with nothing written) and lists its app after. On one node the create script lists
the app itself, by the same rule (``create_session.lua``)."""

from __future__ import annotations

from typing import Any

from redis_agent_sessions._redis import scripts as _scripts
from redis_agent_sessions.keys import KeySpace, escape
from redis_agent_sessions.sessions._replies import typed

__all__ = ["AppListing"]


class AppListing:
    """Lists apps in the registry: only those not listed yet are written (a tenant's Redis
    user may only read it, docs/security.md#tenants), each checked once per process."""

    def __init__(self, client: Any, keys: KeySpace) -> None:
        self._script = _scripts.register(client, "register_app")
        self._registry = keys.apps()
        self._listed: set[str] = set()

    async def check(self, app_name: str) -> None:
        """Raise what listing the app would (a foreign type, a refused ZADD), writing
        nothing."""
        if app_name not in self._listed and await self._run(app_name, 0.0, write=False) == 0:
            self._listed.add(app_name)

    async def list(self, app_name: str, first_created: float) -> None:
        if app_name not in self._listed:
            await self._run(app_name, first_created, write=True)
            self._listed.add(app_name)

    async def _run(self, app_name: str, first_created: float, *, write: bool) -> int:
        args = [escape(app_name), repr(first_created), "1" if write else ""]
        return int(typed(await _scripts.call(self._script, [self._registry], args)))
