"""``stats``: per app, sessions, users, events, index entries of sessions that no longer
exist, memory entries and (sampled) bytes, learned facts and their generations, background
generation's queue shard by shard; on a cluster, the users whose app-scope writes a sweep is
due to look at; the memory backend; the server's version and modules.

Counts walk the app's session index a page at a time with pipelined XLEN/EXISTS/ZCARD, so
they cost O(sessions) round-trip-free work on the server but never a keyspace scan. Bytes are
MEMORY USAGE of a bounded, evenly spread sample of sessions, scaled to all of them. The
sweep's counts are a dry run of it (at most 10,000 users). Learned facts are counted in the
stats hashes of the memory users, which only a SCAN MATCH of their names finds (memory keeps no
registry of its users): one walk for the whole report, the counts summed per app. The
queue is read as ``facts jobs`` reads it: a fixed number of reads per app (its shards' counts
and XPENDING summaries), whatever it holds.
"""

from __future__ import annotations

import argparse
from typing import Any

import orjson
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError, ResponseError
from rich.text import Text

from redis_agent_sessions._messages import plural, size, visible
from redis_agent_sessions._redis.codec import text
from redis_agent_sessions._redis.identity import server_identity
from redis_agent_sessions._redis.pressure import fullest, problem, read_policies
from redis_agent_sessions.cli._context import Context, NotFound, first_line
from redis_agent_sessions.cli._prefixes import apps_hint, prefixes_hint
from redis_agent_sessions.errors import PermissionDeniedError
from redis_agent_sessions.keys import glob_escape, split_app_member, unescape
from redis_agent_sessions.memory import FactJobs
from redis_agent_sessions.sessions._sweep import DEFAULT_OLDER_THAN, MAX_SWEEP_LIMIT

__all__ = ["run"]

_PAGE = 1000
_LEARNED = ("generations", "facts_added", "facts_updated", "facts_deleted", "facts_expired")
"""The counters memory_facts.lua keeps in a user's memory stats hash."""


async def run(ctx: Context, args: argparse.Namespace) -> int:
    if args.app is not None:
        apps = [args.app]
    else:
        members: list[Any] = await ctx.client.zrange(ctx.keys.apps(), 0, -1)
        apps = [unescape(text(m)) for m in members]
    prefix = ctx.config.key_prefix
    if not apps:
        hint = await prefixes_hint(ctx.client, prefix, None)
        raise NotFound(f"no apps: no session was created under the key prefix {prefix!r}{hint}")
    rows = [await _app(ctx, app, args.sample) for app in apps]
    learned = await _learned(ctx, args.app)
    jobs = FactJobs(ctx.memory())
    for row in rows:
        row["learned_facts"] = None if isinstance(learned, str) else learned.get(row["app_name"])
        row["background_jobs"], row["background_jobs_unknown"] = await _jobs(jobs, row["app_name"])
    found = ("sessions", "app_state_keys", "app_writes_unapplied_users", "learned_facts")
    if args.app is not None and not any(rows[0][name] for name in (*found, "background_jobs")):
        hint = await apps_hint(ctx.client, ctx.keys, args.app)
        hint += await prefixes_hint(ctx.client, prefix, args.app)
        raise NotFound(
            f"no sessions, app state, learned facts or background jobs for app {args.app!r}"
            f" under the key prefix {prefix!r}{hint}"
        )
    report: dict[str, Any] = {
        "server": await _server(ctx),
        "memory": await _memory(ctx),
        "memory_backend": text(await ctx.client.get(ctx.keys.memory_backend()) or "not chosen"),
        "memory_vectors": _vectors(await ctx.client.get(ctx.keys.memory_vectors())),
        # Why the apps' learned_facts are null when the walk was refused; null otherwise.
        "learned_facts_unknown": learned if isinstance(learned, str) else None,
        "apps": rows,
    }
    if ctx.json:
        ctx.print_json(report)
        return 0
    server = report["server"]
    ctx.out.print(
        f"{server['name']} {server['version']} ({server['mode']}); modules: "
        f"{', '.join(server['modules']) or 'none'}; memory backend: {report['memory_backend']}"
        + _vectors_text(report["memory_vectors"])
    )
    ctx.out.print(f"Memory: {report['memory']['text']}")
    columns = ["APP", "SESSIONS", "EXPIRED", "USERS", "EVENTS", "MEMORY ENTRIES", "BYTES (EST.)"]
    table = ctx.table(*columns, *(["SWEEP DUE", "UNAPPLIED"] if ctx.cluster else []))
    for row in rows:
        cells = [
            visible(row["app_name"]),
            str(row["sessions"]),
            str(row["expired_sessions"]),
            str(row["users"]),
            str(row["events"]),
            str(row["memory_entries"]),
            "unknown" if row["bytes"] is None else size(row["bytes"]),
        ]
        if ctx.cluster:
            more = row["app_writes_more"]  # a bound reached: counts are at least these
            writes = plural(row["app_writes_unapplied_entries"], "write", at_least=more)
            cells += [
                f"{row['app_writes_due_users']}{'+' if more else ''}",
                f"{row['app_writes_unapplied_users']}{'+' if more else ''} ({writes})",
            ]
        table.add_row(*cells)
    ctx.out.print(table)
    _print_learned(ctx, rows, learned)  # data, before the legends of the tables' columns
    queues = _print_jobs(ctx, rows)
    ctx.out.print(
        "EXPIRED: sessions of the app's index that no longer exist (each leaves an entry in "
        "the app's and its user's indexes until a write or `redis-agent-sessions expired "
        "APP` drops them)"
    )
    ctx.out.print(
        f"BYTES: MEMORY USAGE of the session keys of up to {plural(args.sample, 'session')} "
        "per app and of their users' keys, scaled to all; memory entries not included"
    )
    if ctx.cluster:
        ctx.out.print(
            f"SWEEP DUE: users registered for app-scope writes over {DEFAULT_OLDER_THAN:g} s "
            "ago; UNAPPLIED: those whose writes a worker left half done (seen by them only): "
            "`redis-agent-sessions sweep APP` applies them"
        )
    if queues:
        ctx.out.print(
            "BACKLOG: background generation's jobs waiting, queued for a worker or deferred "
            "(their trigger, a retry's pause), as max_backlog counts them; PENDING: handed to "
            "a worker and not acknowledged; OLDEST: the oldest queued job's wait; shards "
            "holding nothing left out (`redis-agent-sessions facts jobs APP` shows them all)"
        )
    return 0


async def _app(ctx: Context, app: str, sample: int) -> dict[str, Any]:
    index = ctx.keys.app_sessions(app)
    total = await ctx.client.zcard(index)
    users: set[str] = set()
    events = expired = 0
    step = max(1, total // sample) if total else 1
    sampled: list[tuple[str, str]] = []
    for start in range(0, total, _PAGE):
        members: list[Any] = await ctx.client.zrange(index, start, start + _PAGE - 1)
        pipe = ctx.client.pipeline(transaction=False)
        for offset, member in enumerate(members):
            user, sid = split_app_member(text(member))
            users.add(user)
            keys = ctx.keys.session(app, user, sid)
            pipe.xlen(keys.events)
            pipe.exists(keys.meta)
            if (start + offset) % step == 0 and len(sampled) < sample:
                sampled.append((user, sid))
        counts = await pipe.execute()
        events += sum(counts[::2])
        expired += counts[1::2].count(0)
    pipe = ctx.client.pipeline(transaction=False)
    for user in sorted(users):
        pipe.zcard(ctx.keys.memory_entries(app, user))
    entries = sum(await pipe.execute() if users else [])
    swept = await ctx.sessions.sweep_app_writes(app_name=app, limit=MAX_SWEEP_LIMIT, dry_run=True)
    return {
        "app_name": app,
        "sessions": total,
        "expired_sessions": expired,
        "users": len(users),
        "events": events,
        "memory_entries": entries,
        "app_state_keys": await ctx.client.hlen(ctx.keys.app_state(app)),
        "bytes": await _bytes(ctx, app, sampled, total, len(users)),
        "bytes_sampled_sessions": len(sampled),
        "app_writes_due_users": swept.users_examined,
        "app_writes_unapplied_users": swept.users_pending,
        "app_writes_unapplied_entries": swept.entries_pending,
        "app_writes_more": swept.more,
    }


async def _learned(ctx: Context, app: str | None) -> dict[str, dict[str, int]] | str:
    """Per app, its facts stored and its users' generation counts (apps with none left
    out); what refused the walk when it was refused (a managed service may refuse SCAN)."""
    head = ctx.keys.memory_stats(app or "", "")[:-1]  # "<prefix>:mem:stats:{<app>:"
    if app is None:
        head = head[:-1]  # "<prefix>:mem:stats:{": every app's users
    owners: list[tuple[str, str]] = []
    try:
        async for key in ctx.client.scan_iter(
            match=glob_escape(head) + "*}", count=1000, _type="hash"
        ):
            owner = _stats_owner(ctx, text(key))
            if owner is not None:
                owners.append(owner)
        counted: dict[str, dict[str, int]] = {}
        for start in range(0, len(owners), _PAGE):
            page = owners[start : start + _PAGE]
            pipe = ctx.client.pipeline(transaction=False)
            for owner in page:
                pipe.hmget(ctx.keys.memory_stats(*owner), *_LEARNED)
                pipe.zcard(ctx.keys.memory_facts(*owner))
            replies = await pipe.execute()
            for (owner_app, _), counts, stored in zip(
                page, replies[::2], replies[1::2], strict=True
            ):
                sums = counted.setdefault(owner_app, dict.fromkeys(("facts_stored", *_LEARNED), 0))
                sums["facts_stored"] += stored
                for name, count in zip(_LEARNED, counts, strict=True):
                    sums[name] += int(count or 0)
    except RedisError as exc:
        return f"unknown ({first_line(exc)})"
    return {a: sums for a, sums in counted.items() if any(sums.values())}


async def _jobs(jobs: FactJobs, app: str) -> tuple[list[dict[str, Any]], str | None]:
    """The app's queue shard by shard ([] when it holds nothing: no job open, no dead
    letter, none dropped), and what refused the reads when they were."""
    try:
        shards = await jobs.backlog(app)
    except (RedisError, PermissionDeniedError) as exc:
        return [], f"unknown ({first_line(exc)})"
    rows = []
    for shard in shards:
        row = {k: v for k, v in shard.__dict__.items() if k != "app"}
        rows.append({"shard": row.pop("shard"), "backlog": shard.queued + shard.deferred, **row})
    return (rows if any(_holds(row) for row in rows) else []), None


def _holds(row: dict[str, Any]) -> bool:
    held = ("queued", "active", "deferred", "pending", "dead_letters", "dropped")
    return any(row[name] for name in held)


def _print_jobs(ctx: Context, rows: list[dict[str, Any]]) -> bool:
    """Each app's shards holding jobs, in one table; whether there was any."""
    table = ctx.table("APP", "SHARD", "BACKLOG", "PENDING", "OLDEST", "DEAD LETTERS")
    shown = False
    for row in rows:
        if (refused := row["background_jobs_unknown"]) is not None:
            ctx.out.print(Text(f"{visible(row['app_name'])}: background jobs: {refused}"))
        for shard in row["background_jobs"]:
            if not _holds(shard):
                continue
            age = shard["oldest_age"]
            table.add_row(
                Text(visible(row["app_name"])), str(shard["shard"]), str(shard["backlog"]),
                str(shard["pending"]), "-" if age is None else f"{age:.1f}s",
                str(shard["dead_letters"]),
            )  # fmt: skip
            shown = True
    if shown:
        ctx.out.print(table)
    return shown


def _stats_owner(ctx: Context, key: str) -> tuple[str, str] | None:
    """(app, user) of a memory stats hash's key (the SCAN's MATCH is a glob: checked)."""
    head = ctx.keys.memory_stats("", "")[:-2]  # "<prefix>:mem:stats:{"
    if not (key.startswith(head) and key.endswith("}")):
        return None
    app, sep, user = key[len(head) : -1].partition(":")
    return (unescape(app), unescape(user)) if sep and user and ":" not in user else None


def _print_learned(
    ctx: Context, rows: list[dict[str, Any]], learned: dict[str, dict[str, int]] | str
) -> None:
    if isinstance(learned, str):
        ctx.out.print(f"learned facts: {learned}")
        return
    for row in rows:
        if (n := row["learned_facts"]) is not None:
            ctx.out.print(
                Text(
                    f"{visible(row['app_name'])}: learned facts: {n['facts_stored']:,} stored, "
                    f"{plural(n['generations'], 'generation')} ({n['facts_added']:,} added, "
                    f"{n['facts_updated']:,} updated, {n['facts_deleted']:,} deleted, "
                    f"{n['facts_expired']:,} expired)"
                )
            )


async def _bytes(
    ctx: Context, app: str, sampled: list[tuple[str, str]], total: int, users: int
) -> int | None:
    """Sampled sessions' keys scaled to all sessions, their users' state scaled to all
    users, plus the app's own keys; None when MEMORY USAGE is refused (managed services
    and least-privilege users)."""
    if not sampled:
        return 0
    try:
        return await _sized(ctx, app, sampled, total, users)
    except RedisError:
        return None


async def _sized(
    ctx: Context, app: str, sampled: list[tuple[str, str]], total: int, users: int
) -> int:
    pipe = ctx.client.pipeline(transaction=False)
    for user, sid in sampled:
        k = ctx.keys.session(app, user, sid)
        for key in (k.meta, k.state, k.events, k.event_ids, k.compactions):
            pipe.memory_usage(key)
    per_session = sum(size or 0 for size in await pipe.execute()) / len(sampled)
    owners = sorted({user for user, _ in sampled})
    pipe = ctx.client.pipeline(transaction=False)
    for user in owners:
        pipe.memory_usage(ctx.keys.user_state(app, user))
        pipe.memory_usage(ctx.keys.user_sessions(app, user))
        pipe.memory_usage(ctx.keys.user_updated(app, user))
    per_user = sum(size or 0 for size in await pipe.execute()) / len(owners)
    pipe = ctx.client.pipeline(transaction=False)
    for key in (ctx.keys.app_state(app), ctx.keys.app_sessions(app), ctx.keys.app_updated(app)):
        pipe.memory_usage(key)
    own = sum(size or 0 for size in await pipe.execute())
    return int(per_session * total + per_user * users) + own


async def _server(ctx: Context) -> dict[str, Any]:
    # A cluster asks one node: every node of a deployment runs the same build. A node, not
    # the RANDOM flag, which redis-py honours only on the first call.
    client = ctx.client
    node: dict[str, Any] = {}
    if isinstance(client, RedisCluster):
        node["target_nodes"] = client.get_default_node()
    try:
        info: Any = await ctx.client.execute_command("INFO", "server", **node)
        if isinstance(info, dict) and "redis_version" not in info:
            info = next(iter(info.values()))
        name, version = server_identity(info)
    except RedisError as exc:  # managed services may refuse INFO to a restricted user
        info, name, version = {}, "Redis", f"unknown (INFO server: {first_line(exc)})"
    try:
        modules = await ctx.client.execute_command("MODULE", "LIST", **node)
        names = sorted(
            text(m[b"name"] if b"name" in m else m["name"]) for m in map(_pairs, modules)
        )
    except ResponseError:  # an ACL user may be denied MODULE LIST
        names = ["unknown (MODULE LIST refused)"]
    return {
        "name": name,
        "version": version,
        "mode": "cluster" if ctx.cluster else info.get("redis_mode", "standalone"),
        "modules": names,
    }


async def _memory(ctx: Context) -> dict[str, Any]:
    """Used and maximum memory and the policy (of the fullest primary on a cluster), and
    what that policy means for the store; what stops it is said as readiness says it."""
    try:
        policies = await read_policies(ctx.engine.layout.topology)
    except RedisError as exc:  # INFO may be refused to a restricted user
        return {"text": f"unknown (INFO memory: {first_line(exc)})"}
    top = fullest(policies)
    found = {"used": top.used, "maxmemory": top.maxmemory, "policy": top.policy}
    where = f" (the fullest of {len(policies)} primaries)" if len(policies) > 1 else ""
    warning = problem(policies, "those given ttl_seconds or a ttl of their own")
    return {**found, "text": top.describe() + where + (f"; {warning}" if warning else "")}


def _pairs(module: Any) -> dict[Any, Any]:
    if isinstance(module, dict):
        return module
    return dict(zip(module[::2], module[1::2], strict=True))


def _vectors(raw: Any) -> dict[str, Any] | None:
    """The memory's vector record (None: no embedder has written; see ``reembed``)."""
    if raw is None:
        return None
    try:
        found = orjson.loads(raw)
    except orjson.JSONDecodeError:
        found = None
    return found if isinstance(found, dict) else {"unreadable": text(raw)}


def _vectors_text(record: dict[str, Any] | None) -> str:
    if record is None:
        return "; vectors: none"
    if "unreadable" in record:
        return f"; vectors: unreadable record {record['unreadable']!r}"
    return f"; vectors: {record.get('model')} ({record.get('dimensions')} dimensions)"
