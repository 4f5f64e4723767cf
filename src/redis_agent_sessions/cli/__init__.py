"""The ``redis-agent-sessions`` command: the demo, and the operator commands (``[cli]`` extra).

Exit codes: 0 ok, 1 not found / nothing matched (or data that cannot be read, or that stops
the command: an import meeting a session that exists), 2 usage or connection error, 141
when the reader of stdout went away (``| head``; silent, as for Unix tools); every other
failure prints one line on stderr, ``redis-agent-sessions: <message>``, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from redis_agent_sessions._messages import PROG, say_error
from redis_agent_sessions._version import __version__

__all__ = ["main"]

# command -> (module in this package, help); each module has `async def run(ctx, args)`.
_COMMANDS = {
    "ls": ("_browse", "list apps, or the sessions of an app (paged)"),
    "show": ("_browse", "a session's state by scope and its events as a transcript"),
    "tail": ("_browse", "a session's newest events; -f follows new ones as workers append"),
    "search": ("_browse", "memory search over a user's past sessions"),
    "facts": ("_facts", "a user's learned facts (--history: with earlier revisions; --delete)"),
    "facts worker": ("_facts_jobs", "run background generation's jobs until SIGTERM or Ctrl-C"),
    "facts jobs": ("_facts_jobs", "background generation's backlog, pending and dead, by shard"),
    "facts dead-letters": ("_facts_jobs", "jobs that failed their last attempt (--retry, --drop)"),
    "stats": ("_stats", "sessions, users, events, memory, bytes and background jobs, per app"),
    "export": ("_transfer", "write sessions as JSON Lines, one session per line"),
    "import": ("_transfer", "write sessions from an export file"),
    "migrate": ("_migrate", "copy sessions from google-adk's DatabaseSessionService"),
    "delete": ("_remove", "delete one session"),
    "purge": ("_remove", "delete an app's sessions not updated for a while"),
    "expired": ("_expired", "drop the index entries of an app's sessions that no longer exist"),
    "incomplete": ("_incomplete", "find (--delete: remove) sessions Redis evicted in part"),
    "reembed": ("_reembed", "give memory entries vectors of a model (semantic recall)"),
    "reindex": ("_reindex", "analyse memory entries again after an analysis change"),
    "sweep": ("_sweep", "apply app-scope writes that workers left half done (Redis Cluster)"),
    "ping": ("_ping", "readiness: Redis answers, scripts run, write concern and memory work"),
    "tenant": ("_tenant", "provision (create), probe (check) or remove (drop) one tenant app"),
    "mcp": ("_mcp", "serve an app's memory and sessions to MCP clients ([mcp] extra)"),
}


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line (the usage text is one ``--help`` away)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Shared, durable sessions for AI agent workers, stored in Redis.",
        epilog="Exit codes: 0 ok, 1 not found, nothing matched or a data problem, 2 usage or "
        "connection error, 141 the output's reader went away (| head).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _demo_parser(commands)
    from redis_agent_sessions.cli import _options

    for name, (_, summary) in _COMMANDS.items():
        sub = commands.add_parser(name, help=summary, description=summary)
        _options.add(name, sub)
    return parser


def _demo_parser(commands: argparse._SubParsersAction[_Parser]) -> None:
    demo = commands.add_parser(
        "demo",
        help="run worker processes sharing flight-booking sessions through Redis",
        description=(
            "Runs worker processes that serve interleaved turns of a scripted flight-booking "
            "conversation for several users, shows a stale writer being rejected, checks the "
            "result and shows it as redis-cli and `redis-agent-sessions ls` show it. Uses "
            "REDIS_URL when set, read as the library reads URLs (?cluster=true for a Redis "
            "Cluster, TLS files, ...; keys under a fresh ras-demo-<random> prefix, nested under "
            "the URL's key_prefix if any, nothing else touched, kept for the operator commands "
            "it ends with); otherwise starts a throwaway local redis-server and stops it at the "
            "end (--keep-server: leaves it running, and ends with the commands that browse it "
            "and the one that stops it)."
        ),
    )
    demo.add_argument(
        "--keep-server",
        action="store_true",
        help="leave the throwaway redis-server running after the demo, to browse its data "
        "with the commands the demo prints (with REDIS_URL the data stays anyway)",
    )
    demo.add_argument(
        "--workers", type=int, default=3, help="worker processes to start (at least 3; default 3)"
    )
    demo.add_argument(
        "--key-prefix",
        help="key prefix for the demo's data (default: ras-demo, or ras-demo-<random> "
        "with REDIS_URL; under the URL's key_prefix if it has one); must not hold an earlier "
        "demo run",
    )


SIGPIPE_STATUS = 128 + 13
"""What a shell reports for a Unix tool that SIGPIPE ended (``yes | head``)."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    try:
        code = _command(argv)
        # Python flushes stdout once more at exit, past this try: a reader gone by then
        # would get a traceback.
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # `... | head`: the reader has all it wanted. Stop quietly, as Unix tools do; what is
        # still buffered goes nowhere, so the flush at exit cannot fail again.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):
            pass  # stdout is no file (a test's capture): nothing will flush it to a pipe
        return SIGPIPE_STATUS


_FACTS_SUBCOMMANDS = ("worker", "jobs", "dead-letters")
"""``facts worker`` and the others: commands of their own (``facts`` takes APP USER; an app
of one of these names is reached as ``facts -- worker USER``)."""


def _command(argv: Sequence[str] | None) -> int:
    parser = _parser()
    words = list(sys.argv[1:] if argv is None else argv)
    if len(words) > 1 and words[0] == "facts" and words[1] in _FACTS_SUBCOMMANDS:
        words[:2] = [f"facts {words[1]}"]
    args = parser.parse_args(words)
    if args.command == "demo":
        return _demo(parser, args)
    try:
        return asyncio.run(_operate(args))
    except KeyboardInterrupt:  # Ctrl-C, e.g. ending `tail -f`: the shell prompt on a new line
        print(file=sys.stderr)
        return 130


def _demo(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.workers < 3:
        parser.error("--workers must be at least 3")
    if args.key_prefix is not None and (not args.key_prefix or set("{}") & set(args.key_prefix)):
        parser.error("--key-prefix must be non-empty and contain no '{' or '}'")
    # Imported here so that `--help` stays fast and needs no Redis client.
    from redis_agent_sessions.demo import run_demo

    try:
        return run_demo(
            workers=args.workers, key_prefix=args.key_prefix, keep_server=args.keep_server
        )
    except KeyboardInterrupt:
        print(file=sys.stderr)  # past the ^C the terminal echoed
        say_error("interrupted")
        return 130


async def _operate(args: argparse.Namespace) -> int:
    try:
        from redis_agent_sessions.cli import _context, _options
    except ImportError as exc:  # rich is the [cli] extra
        return _fail(
            2,
            f"`{args.command}` needs the [cli] extra ({exc.name} is missing): "
            "pip install 'redis-agent-sessions[cli]'",
        )
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import RedisError, TimeoutError

    from redis_agent_sessions._redis.lost import lost_connection
    from redis_agent_sessions.errors import (
        CorruptDataError,
        InvalidInputError,
        PermissionDeniedError,
        RedisSessionsError,
    )
    from redis_agent_sessions.sessions._pages import PageTokenError

    module = importlib.import_module(f"redis_agent_sessions.cli.{_COMMANDS[args.command][0]}")
    ctx = None
    try:
        ctx = await _context.connect(args)
        code: int = await module.run(ctx, args)
        return code
    except _context.CliError as exc:
        return _fail(exc.code, str(exc))
    except (RedisConnectionError, TimeoutError) as exc:
        return _fail(2, f"lost the connection to Redis: {_context.first_line(exc)}")
    except PermissionDeniedError as exc:
        return _fail(2, _context.first_line(exc))
    except PageTokenError as exc:
        return _fail(2, f"{_options.PAGE_FLAG} {exc.reason}")
    except InvalidInputError as exc:
        return _fail(2, _context.first_line(exc))
    except CorruptDataError as exc:
        return _fail(1, f"cannot read stored data: {_context.first_line(exc)}")
    except (RedisSessionsError, RedisError) as exc:
        return _fail(1, _context.first_line(exc))
    except BrokenPipeError:
        raise  # stdout's reader is gone: main ends every command alike
    except Exception as exc:  # an operator gets one line, even for what nobody foresaw
        if lost_connection(exc) is not None:  # redis-py's, raised untyped: as above
            return _fail(2, f"lost the connection to Redis: {_context.first_line(exc)}")
        return _fail(1, f"{type(exc).__name__}: {_context.first_line(exc)}")
    finally:
        if ctx is not None:
            await ctx.client.aclose()


def _fail(code: int, message: str) -> int:
    say_error(message)
    return code
