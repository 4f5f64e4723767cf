"""Command line: ``python -m redis_agent_sessions demo`` (or ``redis-agent-sessions demo``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from redis_agent_sessions._version import __version__

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="redis-agent-sessions",
        description="Shared, durable sessions for AI agent workers, stored in Redis.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="run worker processes sharing flight-booking sessions through Redis",
        description=(
            "Runs worker processes that serve interleaved turns of a scripted flight-booking "
            "conversation for several users, shows a stale writer being rejected, checks the "
            "result and prints the redis-cli commands to inspect it. Uses REDIS_URL when set "
            "(keys under a fresh ras-demo-<random> prefix, nothing else touched); otherwise "
            "starts and finally stops a throwaway local redis-server."
        ),
    )
    demo.add_argument(
        "--workers", type=int, default=3, help="worker processes to start (at least 3; default 3)"
    )
    demo.add_argument(
        "--key-prefix",
        help="key prefix for the demo's data (default: ras-demo, or ras-demo-<random> "
        "with REDIS_URL); must not hold an earlier demo run",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        if args.workers < 3:
            parser.error("--workers must be at least 3")
        if args.key_prefix is not None and (
            not args.key_prefix or set("{}") & set(args.key_prefix)
        ):
            parser.error("--key-prefix must be non-empty and contain no '{' or '}'")
        # Imported here so that `--help` stays fast and needs no Redis client.
        from redis_agent_sessions.demo import run_demo

        try:
            return run_demo(workers=args.workers, key_prefix=args.key_prefix)
        except KeyboardInterrupt:
            print("\ninterrupted", file=sys.stderr)
            return 130
    parser.error(f"unknown command {args.command!r}")
    return 2  # not reached: parser.error exits


if __name__ == "__main__":
    sys.exit(main())
