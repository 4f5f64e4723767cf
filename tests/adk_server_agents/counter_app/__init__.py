from __future__ import annotations

from . import agent

__all__ = ["agent"]
