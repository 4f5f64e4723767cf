"""``reembed``: give stored memory entries vectors of a model, so a keyword-only deployment
can turn semantic recall on, or a new model can be rolled out. Resumable: a second run skips
what the first one finished (see ``memory/_reembed.py``)."""

from __future__ import annotations

import argparse

from redis_agent_sessions._messages import plural
from redis_agent_sessions._redis.uri import parse_service_url
from redis_agent_sessions.cli._context import Context, UsageError
from redis_agent_sessions.memory._url import semantic_settings

__all__ = ["run"]


async def run(ctx: Context, args: argparse.Namespace) -> int:
    params = dict(parse_service_url(ctx.url).memory)
    if args.embedder is not None:
        params["embedder"] = args.embedder
    if args.dimensions is not None:
        params["embedder_dimensions"] = str(args.dimensions)
    if args.vector_index is not None:
        params["vector_index"] = args.vector_index
    if "embedder" not in params:
        raise UsageError("name the model: --embedder google:<model> or import:<module>:<name>")
    embedder, vector_index, _ = semantic_settings(params, None, "HNSW", 0.0)
    memory = ctx.memory(embedder=embedder, vector_index=vector_index)
    report = await ctx.tracked(
        "checking" if args.dry_run else "re-embedding",
        lambda advance: memory.reembed(
            app_name=args.app, user_id=args.user, dry_run=args.dry_run, on_progress=advance
        ),
    )
    payload = {
        "model": report.model,
        "dimensions": report.dimensions,
        "recorded": report.recorded,
        "dry_run": report.dry_run,
        "users": report.users,
        "entries": report.entries,
        "current": report.current,
        "embedded": report.embedded,
        "skipped": report.skipped,
    }
    line = ctx.walked(args.app, report.users, report.entries, report.current, payload)
    if line is None:
        return 0
    was = report.recorded
    before = "none" if was is None else f"{was.get('model')} ({was.get('dimensions')} dimensions)"
    if args.dry_run:
        ctx.out.print(
            f"{line}, {report.embedded:,} to embed with {report.model} "
            f"({plural(report.dimensions, 'dimension')}; stored vectors: {before}) (dry run)",
            soft_wrap=True,
        )
        return 0
    skipped = f"; {report.skipped:,} changed meanwhile (run again)" if report.skipped else ""
    ctx.err.print(
        f"{line}, {report.embedded:,} embedded with {report.model}{skipped}", soft_wrap=True
    )
    return 0
