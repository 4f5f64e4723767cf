"""Each operator command's arguments (plain argparse: ``--help`` needs no extra)."""

from __future__ import annotations

import argparse

from redis_agent_sessions.cli._jsonl import MAX_LINE_BYTES

__all__ = ["PAGE_FLAG", "add"]

PAGE_FLAG = "--page"
"""The flag carrying a page token (the API's ``page_token``), named in its errors."""
# Positional arguments say what they are in --help, as options do.
APP = "the app's name (app_name; `ls` lists the apps)"
USER = "the user's id (user_id)"
SESSION = "the session's id (session_id)"


def add(name: str, parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("connection")
    group.add_argument(
        "--url",
        help="Redis URL (default: $REDIS_URL, else redis://localhost:6379/0); may carry "
        "settings such as ?key_prefix=prod&cluster=true",
    )
    group.add_argument(
        "--key-prefix",
        help="key prefix of the deployment (default: ras); `ls` finding nothing names the "
        "prefixes that hold sessions",
    )
    group.add_argument(
        "--cluster", action="store_true", help="connect to a Redis Cluster (any node's URL)"
    )
    _ADD[name](parser)


def _json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="JSON output, for scripts")


def _session(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("app", metavar="APP", help=APP)
    parser.add_argument("user", metavar="USER", help=USER)
    parser.add_argument("session", metavar="SESSION", help=SESSION)


def _ls(p: argparse.ArgumentParser) -> None:
    p.add_argument("app", metavar="APP", nargs="?", help="an app (none: list the apps)")
    p.add_argument("--user", help="only this user's sessions")
    p.add_argument(
        "--limit", type=_positive, default=50, help="sessions per page (default 50, max 1000)"
    )
    p.add_argument(PAGE_FLAG, dest="page", help="page token printed by the previous page")
    p.add_argument("--order", choices=["updated", "created"], default="updated", help="sort key")
    p.add_argument("--oldest-first", action="store_true", help="oldest first")
    _json(p)


def _show(p: argparse.ArgumentParser) -> None:
    _session(p)
    p.add_argument("--last", type=_positive, metavar="N", help="only the newest N events")
    _json(p)


def _tail(p: argparse.ArgumentParser) -> None:
    _session(p)
    p.add_argument("-n", "--lines", type=_count, default=10, help="events to show first (10)")
    p.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="keep printing new events until the session is deleted or Ctrl-C; waits "
        "through Redis outages of any length (retrying every 0.5 s to 5 s) and goes on "
        "after the last event printed",
    )
    _json(p)


def _search(p: argparse.ArgumentParser) -> None:
    p.add_argument("app", metavar="APP", help=APP)
    p.add_argument("user", metavar="USER", help=USER)
    p.add_argument("query", metavar="QUERY", help="what to recall, in words (quoted)")
    p.add_argument("--limit", type=_positive, default=10, help="most results (default 10)")
    _json(p)


def _facts(p: argparse.ArgumentParser) -> None:
    p.add_argument("app", metavar="APP", help=APP)
    p.add_argument("user", metavar="USER", help=USER)
    what = p.add_mutually_exclusive_group()
    what.add_argument(
        "--history", action="store_true", help="each fact's earlier revisions under it"
    )
    what.add_argument(
        "--delete", metavar="FACT_ID", help="forget this fact and its history (no question asked)"
    )
    _json(p)


def _facts_worker(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--generator",
        metavar="SPEC",
        help="the model: import:<module>:<name> or adk:<model> (default: the URL's ?generator=)",
    )
    p.add_argument("--concurrency", type=_positive, default=4, help="jobs at once (default 4)")
    p.add_argument(
        "--app",
        action="append",
        metavar="APP",
        help="only this app's jobs (repeat for more; default: every app in the registry)",
    )
    p.add_argument(
        "--visibility-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="take over the jobs of a worker silent this long (default 60)",
    )
    p.add_argument(
        "--max-attempts", type=_positive, default=5, help="attempts before a dead letter (5)"
    )
    p.add_argument(
        "--retry-delay",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="pause before a failed job's first retry, doubling after (default 1)",
    )
    p.add_argument(
        "--grace",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="on SIGTERM, let running jobs finish this long, then release them (default 30)",
    )


def _facts_jobs(p: argparse.ArgumentParser) -> None:
    p.add_argument("app", metavar="APP", nargs="?", help="one app (default: every app)")
    _json(p)


def _facts_letters(p: argparse.ArgumentParser) -> None:
    p.add_argument("app", metavar="APP", help=APP)
    what = p.add_mutually_exclusive_group()
    what.add_argument("--retry", metavar="ID", help="queue this dead letter's job again")
    what.add_argument("--drop", metavar="ID", help="forget this dead letter")
    _json(p)


def _stats(p: argparse.ArgumentParser) -> None:
    p.add_argument("app", metavar="APP", nargs="?", help="one app (default: every app)")
    p.add_argument(
        "--sample",
        type=_positive,
        default=200,
        help="sessions per app whose keys MEMORY USAGE measures (default 200)",
    )
    _json(p)


def _export(p: argparse.ArgumentParser) -> None:
    p.add_argument("app", metavar="APP", help=APP)
    p.add_argument("--user", help="only this user's sessions")
    p.add_argument("-o", "--output", metavar="FILE", help="file to write (default: stdout)")


def _import(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="an export file ('-' reads stdin)")
    how = p.add_mutually_exclusive_group()
    how.add_argument(
        "--replace", action="store_true", help="replace sessions that exist (default: refuse)"
    )
    how.add_argument(
        "--skip-existing", action="store_true", help="leave sessions that exist as they are"
    )
    p.add_argument(
        "--max-line-bytes",
        type=_positive,
        default=MAX_LINE_BYTES,
        metavar="N",
        help=f"refuse a line (a session) longer than this (default {MAX_LINE_BYTES:,})",
    )


def _migrate(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--from",
        dest="source",
        required=True,
        metavar="DB_URL",
        help="google-adk DatabaseSessionService URL (sqlite+aiosqlite:///file.db, "
        "postgresql+asyncpg://..., mysql+aiomysql://...)",
    )
    p.add_argument(
        "--app",
        action="append",
        dest="apps",
        metavar="APP",
        help="only this app (repeat for more; default: every app in the database)",
    )
    p.add_argument("--dry-run", action="store_true", help="count what would be copied")


def _delete(p: argparse.ArgumentParser) -> None:
    _session(p)
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")


def _purge(p: argparse.ArgumentParser) -> None:
    p.add_argument("app", metavar="APP", help=APP)
    p.add_argument(
        "--older-than",
        required=True,
        type=duration,
        metavar="DURATION",
        help="not updated for this long: 90d, 12h, 30m, 45s, 2w",
    )
    p.add_argument("--user", help="only this user's sessions")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument(
        "--dry-run", action="store_true", help="only list them (app, user, session, last update)"
    )
    _json(p)


def _expired(p: argparse.ArgumentParser) -> None:
    p.add_argument("app", metavar="APP", help=APP)
    p.add_argument("--dry-run", action="store_true", help="only count them")
    _json(p)


def _incomplete(p: argparse.ArgumentParser) -> None:
    p.add_argument("app", metavar="APP", help=APP)
    p.add_argument(
        "--delete", action="store_true", help="delete them (default: only list them, exit 1)"
    )
    _json(p)


def _reindex(p: argparse.ArgumentParser) -> None:
    p.add_argument("--app", help="only this app's users")
    p.add_argument("--user", help="only this user (with --app)")
    p.add_argument("--dry-run", action="store_true", help="only count what needs reindexing")
    _json(p)


def _reembed(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--embedder",
        metavar="SPEC",
        help="the model: google:<model> or import:<module>:<name> (default: the URL's ?embedder=)",
    )
    p.add_argument("--dimensions", type=_positive, help="vector dimensions (Google models)")
    p.add_argument(
        "--vector-index",
        choices=["HNSW", "FLAT", "SVS-VAMANA"],
        help="the vector index's algorithm, search backend (default HNSW)",
    )
    p.add_argument("--app", help="only this app's users")
    p.add_argument("--user", help="only this user (with --app)")
    p.add_argument("--dry-run", action="store_true", help="only count what needs embedding")
    _json(p)


def _ping(p: argparse.ArgumentParser) -> None:
    p.add_argument("--memory", action="store_true", help="check the memory service too")
    p.add_argument(
        "--app",
        metavar="APP",
        help="probe in this app (for a Redis user limited to one app's keys)",
    )
    p.add_argument(
        "--timeout", type=float, default=5.0, help="seconds the whole check may take (5)"
    )
    _json(p)


def _tenant(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "action",
        choices=("create", "check", "drop"),
        help="create: make the app's indexes and list it (admin URL), print or apply its "
        "user's ACL lines; check: probe a tenant's user (its URL) as an attacker would; "
        "drop: remove the app's indexes, keys and registry entry (admin URL)",
    )
    p.add_argument("app", metavar="APP", help=APP)
    p.add_argument(
        "--user",
        help="the tenant's Redis user name (default: <key prefix>-<app>, when it "
        "is made of letters, digits, '-', '_' and '.')",
    )
    p.add_argument(
        "--apply",
        action="store_true",
        help="create: set the user's ACL (on every node of a cluster) instead of printing "
        "the lines; drop: delete the user too",
    )
    secret = p.add_mutually_exclusive_group()
    secret.add_argument(
        "--password-file",
        metavar="FILE",
        help="create --apply: the user's password, from "
        "the first line of FILE (never from the command line)",
    )
    secret.add_argument(
        "--password-env",
        metavar="VAR",
        default="RAS_TENANT_PASSWORD",
        help="create --apply: the environment variable holding the password "
        "(default RAS_TENANT_PASSWORD)",
    )
    p.add_argument(
        "--vector-index",
        default="HNSW",
        choices=("HNSW", "FLAT", "SVS-VAMANA"),
        help="create: the vector indexes' algorithm, as the tenant's memory service's "
        "vector_index (HNSW)",
    )
    p.add_argument(
        "--rebuild-vectors",
        action="store_true",
        help="create: drop and make again a vector index of another definition (a new "
        "embedding model's dimension), not its entries",
    )
    p.add_argument(
        "--no-facts", action="store_true", help="create: no learned-facts commands in the line"
    )
    p.add_argument("-y", "--yes", action="store_true", help="drop: do not ask for confirmation")
    _json(p)


def _sweep(p: argparse.ArgumentParser) -> None:
    p.add_argument("app", metavar="APP", help=APP)
    p.add_argument(
        "--older-than",
        type=duration,
        default=300.0,
        metavar="DURATION",
        help="users registered at least this long ago (default 5m, at least 2m): 5m, 300s, 1h",
    )
    p.add_argument(
        "--limit", type=_positive, default=1000, help="users per call (default 1000, max 10000)"
    )
    p.add_argument("--dry-run", action="store_true", help="only count them")
    _json(p)


def _mcp(p: argparse.ArgumentParser) -> None:
    p.add_argument("--app", required=True, help="the app whose memory and sessions to serve")
    p.add_argument("--user", help="serve only this user's (default: each tool call names its user)")
    p.add_argument(
        "--allow-writes",
        action="store_true",
        help="add the tools that add and delete memory (default: read-only)",
    )
    p.add_argument(
        "--transport",
        choices=("stdio", "http"),
        default="stdio",
        help="stdio: a client starts this command (default); http: streamable HTTP at "
        "http://HOST:PORT/mcp",
    )
    p.add_argument(
        "--host",
        help="http: address to listen on (default 127.0.0.1); any other than a loopback "
        "address needs a bearer token",
    )
    p.add_argument(
        "--port", type=_count, help="http: port to listen on (default 8000; 0: any free port)"
    )
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help="http: the bearer token clients must send, from the first line of FILE "
        "(default: $RAS_MCP_TOKEN)",
    )


_ADD = {
    "ping": _ping,
    "ls": _ls,
    "show": _show,
    "tail": _tail,
    "search": _search,
    "facts": _facts,
    "facts worker": _facts_worker,
    "facts jobs": _facts_jobs,
    "facts dead-letters": _facts_letters,
    "stats": _stats,
    "export": _export,
    "import": _import,
    "migrate": _migrate,
    "delete": _delete,
    "purge": _purge,
    "expired": _expired,
    "incomplete": _incomplete,
    "reembed": _reembed,
    "reindex": _reindex,
    "sweep": _sweep,
    "tenant": _tenant,
    "mcp": _mcp,
}

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def duration(text: str) -> float:
    """Seconds in ``90d``, ``12h``, ``30m``, ``45s`` or ``2w``."""
    number, unit = text[:-1], text[-1:].lower()
    try:
        value = float(number)
    except ValueError:
        value = -1
    if unit not in _UNITS or not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(
            f"not a duration: {text!r} (a positive number and s, m, h, d or w: 90d)"
        )
    return value * _UNITS[unit]


def _positive(text: str) -> int:
    value = _count(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text!r}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative: {text!r}")
    return value
