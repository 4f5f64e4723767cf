"""``tail -f``: following a session through Redis going away and coming back.

A watch retries a dropped connection for a few seconds, then raises; a service must hear of
a longer outage. An operator's tail is ended with Ctrl-C, so it waits for Redis without
bound (a restart, a failover, a network cut), saying so on stderr, and goes on after the
last event it printed: nothing lost, nothing twice.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable

from redis.exceptions import ConnectionError, TimeoutError

from redis_agent_sessions.cli._context import Context, first_line
from redis_agent_sessions.errors import SessionNotFoundError
from redis_agent_sessions.models import Event

__all__ = ["FIRST_RETRY", "LONGEST_RETRY", "follow"]

FIRST_RETRY = 0.5
LONGEST_RETRY = 5.0
"""Seconds between tries to reach Redis again: doubling from the first, up to the longest."""


async def follow(
    ctx: Context, args: argparse.Namespace, after: str | None, show: Callable[[Event], None]
) -> None:
    """Show each new event of the session after event ``after`` (None: from its first
    event); returns when the session is deleted or expires."""
    while True:
        watch = ctx.sessions.watch(
            app_name=args.app,
            user_id=args.user,
            session_id=args.session,
            after_event_id=after,
            from_beginning=after is None,
        )
        try:
            async for event in watch:
                show(event)
                after = event.id
            return
        except SessionNotFoundError:
            return  # gone while Redis was away (or with the data of a restarted server)
        except (ConnectionError, TimeoutError) as exc:
            await _wait_for_redis(ctx, args, exc)


async def _wait_for_redis(ctx: Context, args: argparse.Namespace, lost: Exception) -> None:
    """Return once Redis answers for the session again (that it is gone is an answer)."""
    where = _address(ctx)
    _say(ctx, f"lost Redis at {where} ({first_line(lost)}); retrying until it is back")
    delay = FIRST_RETRY
    while True:
        await asyncio.sleep(delay)
        try:
            # A read of the session: on a cluster, its node is the one that matters.
            await ctx.sessions.list_events(
                app_name=args.app, user_id=args.user, session_id=args.session, limit=1
            )
        except (ConnectionError, TimeoutError):
            delay = min(delay * 2, LONGEST_RETRY)
            continue
        except SessionNotFoundError:
            pass
        _say(ctx, f"reconnected to Redis at {where}")
        return


def _address(ctx: Context) -> str:
    """host:port (or the socket path) of the server, never the URL: it may hold a password."""
    endpoint = ctx.engine.layout.topology.endpoint
    address = str(endpoint.get("server.address", "?"))
    return f"{address}:{endpoint['server.port']}" if "server.port" in endpoint else address


def _say(ctx: Context, line: str) -> None:
    """One line on stderr as written: an error's text may hold ``[...]``, not markup."""
    ctx.err.print(line, markup=False, soft_wrap=True)
