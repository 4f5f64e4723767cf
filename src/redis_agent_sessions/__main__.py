"""``python -m redis_agent_sessions`` runs the ``redis-agent-sessions`` command."""

from __future__ import annotations

import sys

from redis_agent_sessions.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
