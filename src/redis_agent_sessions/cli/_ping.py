"""``ping``: the readiness probe of the services, for orchestrators and scripts.

Exit codes: 0 ready, 1 reached but not ready (a check failed: permissions, scripts, write
concern, memory backend), 2 Redis not reached or bad usage. When not ready, the first failed
check is also the one line on stderr that every failing command prints (the report, on
stdout, may go to a file or a probe's log).
"""

from __future__ import annotations

import argparse

from redis_agent_sessions._health import Readiness
from redis_agent_sessions._messages import say_error
from redis_agent_sessions.cli._context import Context

__all__ = ["run"]


async def run(ctx: Context, args: argparse.Namespace) -> int:
    results: dict[str, Readiness] = {
        "sessions": await ctx.sessions.check_ready(timeout=args.timeout, app_name=args.app)
    }
    if args.memory:
        memory = ctx.memory()
        results["memory"] = await memory.check_ready(timeout=args.timeout, app_name=args.app)
    ready = all(results.values())
    if ctx.json:
        ctx.print_json(
            {
                "ready": ready,
                "services": {
                    service: [
                        {"check": c.name, "ok": c.ok, "detail": c.detail, "seconds": c.seconds}
                        for c in readiness.checks
                    ]
                    for service, readiness in results.items()
                },
            }
        )
    else:
        table = ctx.table("service", "check", "", "detail", "ms")
        for service, readiness in results.items():
            for c in readiness.checks:
                mark = "ok" if c.ok else "FAIL"
                table.add_row(service, c.name, mark, c.detail, f"{c.seconds * 1000:.1f}")
        ctx.out.print(table)
        ctx.out.print("ready" if ready else "NOT READY")
    if ready:
        return 0
    service, check = next((s, c) for s, r in results.items() for c in r.checks if not c.ok)
    say_error(f"not ready: {service}: {check.name}: {' '.join(check.detail.split())}")
    reached = all(r.checks[0].ok for r in results.values())
    return 1 if reached else 2
