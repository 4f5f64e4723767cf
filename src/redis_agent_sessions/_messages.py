"""What the ``redis-agent-sessions`` command says, in one style for the demo and the operator
commands alike: counts with their nouns in the right number, and error lines prefixed with
the command's name.

Here rather than in ``cli/`` because the demo, a lower layer that needs no extra, prints
them too; it imports nothing, so ``--help`` stays fast.
"""

from __future__ import annotations

import sys

__all__ = ["PROG", "plural", "say_error", "size"]

PROG = "redis-agent-sessions"


def plural(n: int, one: str, many: str | None = None, *, at_least: bool = False) -> str:
    """``1 session``, ``2 sessions``, ``1 entry`` (with ``many="entries"``), ``1,000 users``;
    ``at_least`` marks a lower bound: ``5+ writes`` (always the plural, as ``1+`` may be more).
    """
    word = one if n == 1 and not at_least else (many or one + "s")
    return f"{n:,}{'+' if at_least else ''} {word}"


def size(n: float) -> str:
    """Bytes in binary units: ``512 B``, ``1.5 KiB``, ``12.0 MiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def say_error(message: str) -> None:
    """One line on stderr, ``redis-agent-sessions: <message>``."""
    print(f"{PROG}: {message}", file=sys.stderr)
