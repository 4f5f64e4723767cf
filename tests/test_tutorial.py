"""The tutorial (docs/tutorial.md), run as a reader runs it, against a real Redis.

Each ```` ```python title="NAME" ```` block is written to the file NAME in the reader's
current directory, which starts as a new one (it stands for the checkout) and which a
block's ``cd DIR`` changes for the blocks after it; each ```` ```bash ```` block runs there
in ``bash`` as pasted, with the test's venv
"activated" (its ``bin`` first on ``PATH``: ``python`` and ``redis-agent-sessions``) and
``REDIS_URL`` naming the test's server, whose database the test flushes first. A
```` ```text ```` block right after a bash block is what the reader is told it prints, and
must be what it prints: times (``2026-05-04T09:30:00Z``) stand for any time, a line ``...``
for any lines, and the lines of a ``--scan`` may come in any order. A block after
``<!-- tutorial test: not run (why) -->`` is not run (installing, setting ``REDIS_URL``:
the test's environment does that). The install itself is what
tests/test_newcomer.py follows from a fresh clone. Once the page's clean-up has run, the
directory and the database are as empty as they started.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from redis import Redis

from _servers import REQUIRE_SERVERS, skip_without

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "tutorial.md"
pytestmark = [pytest.mark.real, pytest.mark.cli]

_FENCE = re.compile(
    r"^```(?P<lang>\w+)(?:[ \t]+title=\"(?P<title>[^\"]+)\")?[ \t]*\n(?P<body>.*?)^```[ \t]*$",
    re.S | re.M,
)
_NOT_RUN = "<!-- tutorial test: not run"
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
_CD = re.compile(r"(?:^|&&|;)[ \t]*cd[ \t]+([^\s;&|]+)", re.M)


@dataclass
class Block:
    lang: str
    body: str
    title: str | None
    run: bool
    prints: str | None = None
    """For a bash block: the text block after it."""


def blocks(text: str) -> list[Block]:
    """The page's fenced blocks in order, each text block attached to the bash block before."""
    found: list[Block] = []
    end = 0
    for match in _FENCE.finditer(text):
        between, end = text[end : match.start()], match.end()
        block = Block(match["lang"], match["body"], match["title"], _NOT_RUN not in between)
        if block.lang == "text" and found and found[-1].lang == "bash":
            assert found[-1].prints is None, f"two outputs for {found[-1].body!r}"
            found[-1].prints = block.body
        else:
            found.append(block)
    return found


def matches(expected: str, printed: str, any_order: bool = False) -> bool:
    """Whether ``printed`` is what ``expected`` shows (see the module's docstring)."""
    want = _TIME.sub("<time>", expected).splitlines()
    got = [line.rstrip() for line in _TIME.sub("<time>", printed).splitlines()]
    if any_order:
        return sorted(want) == sorted(got)
    pattern = "".join(
        r"(?:.*\n)*?" if line == "..." else re.escape(line.rstrip()) + r"\n" for line in want
    )
    return re.fullmatch(pattern, "".join(line + "\n" for line in got)) is not None


def test_the_page_is_what_this_test_reads() -> None:
    """Every block is seen, the scripts the commands run are on the page, and each of its
    steps is run or says why not."""
    text = PAGE.read_text()
    found = blocks(text)
    assert len(found) + sum(b.prints is not None for b in found) == text.count("\n```\n")
    scripts = {b.title for b in found if b.lang == "python"}
    assert None not in scripts, "a python block without a title (the file it is saved as)"
    ran = {name for b in found if b.lang == "bash" for name in re.findall(r"python (\S+)", b.body)}
    assert ran == scripts
    assert {b.lang for b in found} == {"bash", "python"}
    not_run = [b.body.split()[0] for b in found if b.lang == "bash" and not b.run]
    assert not_run == ["git", "export", "pip"]
    # The scripts go in a folder of their own, which the clean-up removes.
    ran_in = [cd for b in found if b.lang == "bash" and b.run for cd in _CD.findall(b.body)]
    assert ran_in == ["tutorial", ".."]


def after_cd(cwd: Path, body: str) -> Path:
    """The directory a bash block leaves the reader in (its ``cd`` commands, in order)."""
    for target in _CD.findall(body):
        cwd = (cwd / target).resolve()
    return cwd


def test_matching_the_printed_output() -> None:
    assert matches("a 2026-05-04T09:30:00Z\n...\nz\n", "a 2031-01-01T00:00:00Z  \nb\nc\nz\n")
    assert matches("a\n...\n", "a\n")
    assert not matches("a\nb\n", "a\nc\n")
    assert not matches("a\n", "a\nb\n")
    assert matches("k1\nk2\n", "k2\nk1\n", any_order=True)


def test_the_tutorial_runs_as_written(tmp_path: Path) -> None:
    url = skip_without("REDIS_URL")
    venv = Path(sys.executable).parent
    if not (venv / "redis-agent-sessions").exists():
        pytest.skip("the venv has no redis-agent-sessions command (the [cli] extra)")
    if shutil.which("redis-cli") is None:  # installed with the servers
        if REQUIRE_SERVERS:
            pytest.fail("redis-cli is not installed but RAS_REQUIRE_SERVERS=1")
        pytest.skip("redis-cli is not installed")
    with Redis.from_url(url) as client:
        client.flushdb()
    env = {**os.environ, "REDIS_URL": url, "PATH": f"{venv}{os.pathsep}{os.environ['PATH']}"}
    env.pop("COLUMNS", None)
    cwd = tmp_path
    for block in blocks(PAGE.read_text()):
        if block.lang == "python":
            assert block.title is not None
            (cwd / block.title).write_text(block.body)
            continue
        if not block.run:
            continue
        ran = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block.body], cwd=cwd, env=env,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert ran.returncode == 0, f"{block.body}\n{ran.stdout}\n{ran.stderr}"
        cwd = after_cd(cwd, block.body)
        if "redis-agent-sessions ping" in block.body:
            assert ran.stdout.rstrip().endswith("ready"), ran.stdout  # as the page says
        if block.prints is not None:
            # Memory names its backend in the search's last line; the page's is a Redis
            # without the search module.
            printed = ran.stdout.replace("backend: search", "backend: plain")
            any_order = "--scan" in block.body
            assert matches(block.prints, printed, any_order), (
                f"{block.body}\nthe page says:\n{block.prints}\nit printed:\n{ran.stdout}"
            )
    # The clean-up leaves nothing: no script in the checkout, no key in Redis.
    assert cwd == tmp_path.resolve()
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    with Redis.from_url(url) as client:
        assert client.keys("*") == []
