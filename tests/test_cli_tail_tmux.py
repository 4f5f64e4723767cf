"""``tail -f`` in a real terminal: scripts/tail_in_tmux.sh, run as a user runs it.

The script starts ``tail APP USER SESSION -f`` in a detached tmux pane (a tmux server of its
own), appends three events from other processes, checks that each shows up in the pane in
order, ends the tail with Ctrl-C and prints the pane. It runs against database 3 of
REDIS_URL (other tests flush the database REDIS_URL names) under a unique key prefix, which
the script deletes; nothing is flushed.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis

from _servers import REQUIRE_SERVERS, skip_without

pytestmark = pytest.mark.cli

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "tail_in_tmux.sh"
APPENDED = (
    "user: first follow: Zürich → Lisboa, 2 adults ✈",
    "booking_agent: second follow: 東京 hotel, 3 nights — naïve café ok",
    "user: third follow: paid €129.50, ref K7QX2M ✓",
)


def _db3(url: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/3"))


def _require_tmux() -> None:
    if shutil.which("tmux") is None:
        # As with a missing server: CI must not pass by skipping this.
        if REQUIRE_SERVERS:
            pytest.fail("tmux is not installed but RAS_REQUIRE_SERVERS=1 (apt-get install tmux)")
        pytest.skip("tmux is not installed")


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
        check=False,
    )


@pytest.mark.real
@pytest.mark.slow
def test_tail_follow_shows_appends_in_a_tmux_pane_and_stops_on_ctrl_c() -> None:
    url = _db3(skip_without("REDIS_URL"))
    _require_tmux()
    prefix = f"ras-tail-test-{secrets.token_hex(4)}"
    # The interpreter running the tests, which has this checkout installed.
    env = {**os.environ, "REDIS_URL": url, "PY": sys.executable}
    try:
        proc = _run(env, prefix)
        report = f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        assert proc.returncode == 0, report
        pane = proc.stdout.split("---- tmux pane", 1)[1].split("\n----", 1)[0]
        assert "opening: find me a flight from Lisbon to Zürich" in pane, report
        positions = [pane.find(text) for text in APPENDED]
        assert all(p >= 0 for p in positions), report
        assert positions == sorted(positions), report
        assert "[tail exited with status 130]" in pane, report
        assert "Traceback" not in pane, report
        assert "OK: 3 appended events appeared in order" in proc.stdout, report
        with redis.Redis.from_url(url) as client:
            assert not list(client.scan_iter(match=f"{prefix}:*")), "the script left keys"
    finally:
        with redis.Redis.from_url(url) as client:
            leftover = list(client.scan_iter(match=f"{prefix}:*"))
            if leftover:
                client.unlink(*leftover)


def test_tail_in_tmux_needs_redis_url() -> None:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    proc = _run(env)
    assert proc.returncode == 2
    assert "REDIS_URL is not set" in proc.stderr
    assert proc.stdout == ""
