"""What the ``redis-agent-sessions`` command says, in one style for the demo and the operator
commands alike: counts with their nouns in the right number, error lines prefixed with the
command's name, and stored text made safe to print on a terminal.

Here rather than in ``cli/`` because the demo, a lower layer that needs no extra, prints
them too; it imports nothing, so ``--help`` stays fast.
"""

from __future__ import annotations

import sys

__all__ = ["PROG", "plural", "say_error", "size", "visible"]

PROG = "redis-agent-sessions"

_CONTROLS = {code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F, *range(0x80, 0xA0))} | {
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}
"""C0, DEL and C1 controls as ``\\xNN``, the two Unicode line separators as ``\\uNNNN``: a
terminal obeys ESC and CSI (U+009B) sequences in printed text (it retitles its window,
clears the screen, hides links: "ESC]8;;url"), and rich strips only BEL, BS, CR, VT and FF,
which leaves the sequences in, unterminated."""


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


def visible(text: str) -> str:
    """``text`` with every control character shown as its escape (ESC as ``\\x1b``, U+009B
    as ``\\x9b``, a newline as ``\\x0a``): what human-readable output prints of stored
    data, which anyone who could write to the store chose. ``--json`` output is escaped by
    its encoder instead, exactly."""
    return text.translate(_CONTROLS)


def say_error(message: str) -> None:
    """One line on stderr, ``redis-agent-sessions: <message>``, its control characters
    shown (a message may quote stored data)."""
    print(f"{PROG}: {visible(message)}", file=sys.stderr)
