"""Where the tests find real Redis servers."""

from __future__ import annotations

import os

import pytest

# CI sets this so that a missing server fails the run instead of skipping half of it.
REQUIRE_SERVERS = os.environ.get("RAS_REQUIRE_SERVERS") == "1"


def skip_without(variable: str) -> str:
    """The server URL in env ``variable``; skips the test without it (fails it in CI)."""
    url = os.environ.get(variable)
    if not url:
        if REQUIRE_SERVERS:
            pytest.fail(f"{variable} is not set but RAS_REQUIRE_SERVERS=1")
        pytest.skip(f"{variable} is not set")
    return url
