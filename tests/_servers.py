"""Where the tests find real Redis servers."""

from __future__ import annotations

import os

import pytest

# CI sets this so that a missing server fails the run instead of skipping half of it.
REQUIRE_SERVERS = os.environ.get("RAS_REQUIRE_SERVERS") == "1"


ACL_DB = 3
"""The database the least-privilege suites use: any but 0 needs the user to run SELECT."""


def on_db(url: str, db: int) -> str:
    """``url`` (``redis://host:port[/n]``) naming database ``db`` instead."""
    scheme, rest = url.split("://", 1)
    address = rest.split("?", 1)[0].split("/", 1)[0]
    return f"{scheme}://{address}/{db}"


def skip_without(variable: str) -> str:
    """The server URL in env ``variable``; skips the test without it (fails it in CI)."""
    url = os.environ.get(variable)
    if not url:
        if REQUIRE_SERVERS:
            pytest.fail(f"{variable} is not set but RAS_REQUIRE_SERVERS=1")
        pytest.skip(f"{variable} is not set")
    return url
