"""Background generation from the command line:

- ``facts worker``: a FactWorker in this process until SIGTERM or Ctrl-C (then it lets its
  running jobs finish for ``--grace`` seconds and releases the rest);
- ``facts jobs [APP]``: each shard's backlog, pending jobs, oldest queued job's age, dead
  letters and dropped jobs;
- ``facts dead-letters APP``: the dead letters, or ``--retry ID`` / ``--drop ID`` one.

Sub-commands of ``facts`` (whose own arguments are APP USER): ``facts -- worker USER``
lists the facts of an app named ``worker``.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import Any

from rich.text import Text

from redis_agent_sessions._messages import plural, visible
from redis_agent_sessions._redis.codec import text
from redis_agent_sessions._redis.uri import parse_service_url
from redis_agent_sessions.cli._context import Context, NotFound, UsageError, utc, when
from redis_agent_sessions.keys import unescape
from redis_agent_sessions.memory import FactJobs, FactWorker
from redis_agent_sessions.memory._url import learning_settings, semantic_settings

__all__ = ["SUBCOMMANDS", "run"]

SUBCOMMANDS = ("worker", "jobs", "dead-letters")


async def run(ctx: Context, args: argparse.Namespace) -> int:
    if args.command == "facts worker":
        return await _worker(ctx, args)
    if args.command == "facts jobs":
        return await _jobs(ctx, args)
    return await _letters(ctx, args)


async def _worker(ctx: Context, args: argparse.Namespace) -> int:
    params = dict(parse_service_url(ctx.url).memory)
    if args.generator is not None:
        params.pop("generator", None)
        params["generator"] = args.generator
    if "generator" not in params:
        raise UsageError("name the model: --generator import:<module>:<name> or adk:<model>")
    # The service the URL describes, embedder included: the facts a worker adds get vectors.
    embedder, vector_index, min_similarity = semantic_settings(params, None, "HNSW", 0.0)
    generator, facts = learning_settings(params, None, None)
    memory = ctx.memory(
        embedder=embedder, vector_index=vector_index, min_similarity=min_similarity,
        generator=generator, facts=facts,
    )  # fmt: skip
    worker = FactWorker(
        memory, concurrency=args.concurrency, apps=args.app, grace=args.grace,
        visibility_timeout=args.visibility_timeout, max_attempts=args.max_attempts,
        retry_delay=args.retry_delay,
    )  # fmt: skip
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, worker.stop)
    apps = ", ".join(map(repr, args.app)) if args.app else "every app in the registry"
    ctx.err.print(
        f"facts worker {worker.name}: running jobs of {apps}, {args.concurrency} at a time; "
        "SIGTERM or Ctrl-C stops it",
        soft_wrap=True,
    )
    try:
        await worker.run()
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
    counts = worker.counts
    ctx.err.print(
        f"facts worker {worker.name} stopped: {plural(counts['done'], 'job')} done, "
        f"{counts['retry']} to retry, {counts['dead']} dead, {counts['gone']} dropped "
        f"(session gone), {counts['released']} released, {counts['claimed']} claimed",
        soft_wrap=True,
    )
    return 0


async def _apps(ctx: Context, app: str | None) -> list[str]:
    if app is not None:
        return [app]
    members: list[Any] = await ctx.client.zrange(ctx.keys.apps(), 0, -1)
    apps = [unescape(text(m)) for m in members]
    if not apps:
        raise NotFound("no apps: no session was created under this key prefix (name one: APP)")
    return apps


async def _jobs(ctx: Context, args: argparse.Namespace) -> int:
    jobs = FactJobs(ctx.memory())
    rows: list[dict[str, Any]] = []
    for app in await _apps(ctx, args.app):
        for shard in await jobs.backlog(app):
            row = dict(shard.__dict__)
            held = ("queued", "active", "deferred", "pending", "dead_letters")
            if args.app is not None or any(row[k] for k in held):
                rows.append(row)
    if ctx.json:
        ctx.print_json(rows)
        return 0
    if not rows:
        ctx.out.print("no background generation jobs, pending or dead, in any app")
        return 0
    table = ctx.table(
        "APP", "SHARD", "QUEUED", "ACTIVE", "DEFERRED", "PENDING", "OLDEST", "DEAD", "DROPPED"
    )
    for row in rows:
        age = row["oldest_age"]
        table.add_row(
            Text(visible(row["app"])), str(row["shard"]), str(row["queued"]), str(row["active"]),
            str(row["deferred"]), str(row["pending"]), "-" if age is None else f"{age:.1f}s",
            str(row["dead_letters"]), str(row["dropped"]),
        )  # fmt: skip
    ctx.out.print(table)
    return 0


async def _letters(ctx: Context, args: argparse.Namespace) -> int:
    jobs = FactJobs(ctx.memory())
    if args.retry is not None or args.drop is not None:
        action = "retry" if args.retry is not None else "drop"
        letter_id = args.retry if args.retry is not None else args.drop
        try:
            letter = await (jobs.retry if action == "retry" else jobs.drop)(args.app, letter_id)
        except ValueError as exc:
            raise NotFound(str(exc)) from None
        if ctx.json:
            ctx.print_json({"retried" if action == "retry" else "dropped": _json(letter)})
            return 0
        done = "queued again" if action == "retry" else "dropped"
        ctx.err.print(
            Text(
                visible(
                    f"{done}: dead letter {letter.id} ({letter.kind} job of session "
                    f"{letter.session_id!r}, user {letter.user!r}, app {args.app!r})"
                )
            ),
            soft_wrap=True,
        )
        return 0
    letters = await jobs.dead_letters(args.app)
    if ctx.json:
        ctx.print_json([_json(d) for d in letters])
        return 0
    if not letters:
        raise NotFound(f"no dead letters in app {args.app!r}")
    table = ctx.table("ID", "USER", "SESSION", "KIND", "ATTEMPTS", "FAILED", "ERROR")
    for d in letters:
        table.add_row(
            d.id, Text(visible(d.user)), Text(visible(d.session_id)), d.kind, str(d.attempts),
            when(d.at), Text(visible(" ".join(d.error.split())[:120])),
        )  # fmt: skip
    ctx.out.print(table)
    ctx.out.print(Text(f"{plural(len(letters), 'dead letter')} in app {visible(args.app)!r}"))
    return 0


def _json(letter: Any) -> dict[str, Any]:
    return {**letter.__dict__, "at": utc(letter.at)}
