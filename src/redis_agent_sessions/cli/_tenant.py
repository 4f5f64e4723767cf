"""``tenant``: an operator's steps for one app whose workers get a Redis user limited to its
keys (docs/security.md#tenants).

- ``create APP`` (admin URL): the memory backend recorded, the app's search indexes made,
  the app listed; prints the user's ``ACL SETUSER`` lines (a placeholder password), or with
  ``--apply`` sets them, the password read from a file or the environment, never argv.
- ``check APP`` (the tenant's URL): its own sessions and memory work, and every probe of
  another app's keys, the shared records and the index commands is refused. Exit 1 when a
  probe is not as it must be.
- ``drop APP`` (admin URL): the app's indexes, keys and registry entry removed (asks first);
  with ``--apply``, its user deleted too.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
from typing import Any

from redis.asyncio.cluster import RedisCluster

from redis_agent_sessions._messages import plural
from redis_agent_sessions._redis.codec import check_id
from redis_agent_sessions.cli._context import CliError, Context, UsageError
from redis_agent_sessions.tenants import (
    acl_setuser_lines,
    check_tenant,
    drop_tenant,
    provision_tenant,
)

__all__ = ["run"]

PLACEHOLDER = ">CHANGE-ME"
"""The password rule of printed lines: the operator puts the user's own."""
_USER_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


async def run(ctx: Context, args: argparse.Namespace) -> int:
    app = check_id("app_name", args.app)
    if args.action == "create":
        return await _create(ctx, args, app)
    if args.action == "check":
        return await _check(ctx, app)
    return await _drop(ctx, args, app)


def _user(ctx: Context, args: argparse.Namespace, app: str) -> str:
    user = args.user or f"{ctx.config.key_prefix}-{app}"
    if not _USER_NAME.match(user):
        raise UsageError(
            f"{user!r} cannot be a Redis user name here: pass --user NAME (letters, digits, "
            "'-', '_' and '.')"
        )
    return user


def _password(args: argparse.Namespace) -> str:
    if args.password_file:
        try:
            with open(args.password_file, encoding="utf-8") as f:
                password = f.readline().rstrip("\r\n")
        except OSError as exc:
            raise UsageError(f"cannot read --password-file: {exc.strerror}") from None
        source = f"the first line of {args.password_file}"
    else:
        password = os.environ.get(args.password_env, "")
        source = f"${args.password_env}"
    if not password or any(c.isspace() for c in password):
        raise UsageError(f"--apply needs a password without spaces in {source}")
    return password


async def _create(ctx: Context, args: argparse.Namespace, app: str) -> int:
    user = _user(ctx, args, app)
    password = _password(args) if args.apply else None
    report = await provision_tenant(
        ctx.client,
        app,
        config=ctx.config,
        backend=ctx.memory_backend,  # type: ignore[arg-type]
        vector_index=args.vector_index,
        rebuild_vectors=args.rebuild_vectors,
        facts=not args.no_facts,
    )
    if password is not None:
        await _on_every_node(ctx, "ACL", "SETUSER", user, "reset", "on", f">{password}",
                             *report.rules)  # fmt: skip
    lines = acl_setuser_lines(user, [PLACEHOLDER, *report.rules])
    if ctx.json:
        ctx.print_json({**dataclasses.asdict(report), "user": user, "applied": args.apply,
                        "acl_lines": lines})  # fmt: skip
    elif not args.apply:
        for line in lines:
            ctx.out.print(line, markup=False, highlight=False, soft_wrap=True)
    made = ", ".join(report.made) or "none"
    ctx.err.print(
        f"app {app!r} listed; memory backend {report.backend}"
        + (f"; indexes made: {made}" if report.backend == "search" else "")
        + (f"; user {user!r} set" if args.apply else f"; replace {PLACEHOLDER[1:]} with the "
           "user's password in the lines above (or use --apply)"),
        markup=False, highlight=False,
    )  # fmt: skip
    return 0


async def _check(ctx: Context, app: str) -> int:
    probes = await check_tenant(ctx.client, app, config=ctx.config)
    failed = [p for p in probes if not p.ok]
    if ctx.json:
        ctx.print_json({"ok": not failed, "probes": [dataclasses.asdict(p) for p in probes]})
    else:
        table = ctx.table("probe", "", "detail")
        for p in probes:
            table.add_row(p.name, "ok" if p.ok else "FAIL", " ".join(p.detail.split())[:100])
        ctx.out.print(table)
    if failed:
        raise CliError(f"{plural(len(failed), 'probe')} failed, first: {failed[0].name}: "
                       f"{' '.join(failed[0].detail.split())[:200]}")  # fmt: skip
    ctx.err.print(f"tenant of {app!r}: {plural(len(probes), 'probe')} as they must be")
    return 0


async def _drop(ctx: Context, args: argparse.Namespace, app: str) -> int:
    user = _user(ctx, args, app) if args.apply else None
    if not args.yes:
        _confirm(f"Remove app {app!r}: its indexes, sessions, state and memory?")
    report = await drop_tenant(ctx.client, app, config=ctx.config)
    if user is not None:
        await _on_every_node(ctx, "ACL", "DELUSER", user)
    if ctx.json:
        ctx.print_json({**dataclasses.asdict(report), "user_deleted": user})
    ctx.err.print(
        f"app {app!r} removed: {plural(report.keys_deleted, 'key')}, "
        f"{plural(len(report.dropped), 'index', 'indexes')} dropped"
        + (f", user {user!r} deleted" if user else ""),
        markup=False, highlight=False,
    )  # fmt: skip
    return 0


def _confirm(question: str) -> None:
    if not sys.stdin.isatty():
        raise UsageError(f"{question} Not confirmed: pass --yes to run without a terminal")
    if input(f"{question} [y/N] ").strip().lower() not in ("y", "yes"):
        raise CliError("not confirmed; nothing removed")


async def _on_every_node(ctx: Context, *command: str) -> None:
    """An ACL command on every node (a cluster's users are per node, replicas included)."""
    client: Any = ctx.client
    if not isinstance(client, RedisCluster):
        await client.execute_command(*command)
        return
    for node in client.get_nodes():
        await client.execute_command(*command, target_nodes=node)
