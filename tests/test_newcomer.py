"""A newcomer follows the README from a fresh clone: its install line, run as written in a
new directory holding only the repository's tracked files, then its examples with the
interpreter that line installed, against a real Redis (REDIS_URL).

The examples are the README's Python blocks with their invisible setup blocks, as
tests/test_docs_examples.py's ``examples`` reads them, run in the new interpreter, where
``fake_redis()`` gives a client of the real server instead. Slow (a pip install); where
google-adk cannot be installed the README's line cannot be followed, and the test says so.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from _servers import skip_without
from test_docs_examples import examples, installed

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

RUNNER = """
import ast, asyncio, json, sys
from redis.asyncio import Redis

async def main(blocks, url):
    namespace = {"fake_redis": lambda: Redis.from_url(url), "__name__": "readme"}
    for i, source in enumerate(json.loads(open(blocks).read()), 1):
        flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        result = eval(compile(source, f"README.md block {i}", "exec", flags=flags), namespace)
        if result is not None:
            await result
    print("README examples ran")

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def install_line(readme: str) -> str:
    section = readme.split("## Install", 1)[1]
    [line] = re.findall(r"```bash\n(.*?)\n```", section, re.S)[:1]
    return line


def test_the_readme_install_line_and_examples_work_from_a_fresh_clone(tmp_path: Path) -> None:
    url = skip_without("REDIS_URL")
    if not installed("google.adk"):
        pytest.skip("needs the [adk] extra (the README installs it; google-adk needs >= 3.11)")
    clone = tmp_path / "clone"
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, tracked.split("\0")):
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in this checkout is not there
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, clone / name)
    readme = (clone / "README.md").read_text()
    line = install_line(readme)
    assert line == "python3 -m venv .venv && .venv/bin/pip install -e '.[adk,cli]'", line
    # python3 here is the interpreter running the tests, as it is for a newcomer's shell.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("VIRTUAL_ENV", None)
    setup = subprocess.run(
        ["bash", "-c", f"{line} -q"], cwd=clone, env=env, capture_output=True, text=True,
        timeout=900,
    )  # fmt: skip
    assert setup.returncode == 0, setup.stderr[-3000:]
    python = clone / ".venv" / "bin" / "python"
    (clone / "run_readme.py").write_text(RUNNER)
    blocks = [source for _, source in examples(clone / "README.md")]
    (clone / "readme_blocks.json").write_text(json.dumps(blocks))
    # The README's ADK setup block builds its agent from the tests' scripted app (no LLM).
    env["PYTHONPATH"] = str(clone / "tests")
    ran = subprocess.run(
        [str(python), "run_readme.py", "readme_blocks.json", url], cwd=clone, env=env,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "README examples ran" in ran.stdout
    cli = subprocess.run(
        [str(clone / ".venv" / "bin" / "redis-agent-sessions"), "ls", "--url", url],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    assert "booking_app" in cli.stdout  # what the quickstart wrote
