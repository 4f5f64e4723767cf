"""A newcomer follows the README from a fresh clone: its install line, run as written in a
new directory holding only the repository's tracked files, then each of its Python examples
saved as a script and run as pasted (``python example.py``) with the interpreter that line
installed, against a real Redis (``REDIS_URL``, which the examples read), then the command
line on what they wrote.

Slow (a pip install); where google-adk cannot be installed the README's line cannot be
followed, and the test says so.
"""

from __future__ import annotations

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


def install_lines(readme: str) -> list[str]:
    """The lines of the first bash block of the README's Install section."""
    section = readme.split("## Install", 1)[1]
    [block] = re.findall(r"```bash\n(.*?)\n```", section, re.S)[:1]
    return block.splitlines()


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
    clone_line, line = install_lines(readme)
    # The copy above is the clone; the install line runs as written.
    assert clone_line == "git clone <this repository> && cd redis-agent-sessions", clone_line
    assert line == "python3 -m venv .venv && .venv/bin/pip install -e '.[adk,cli]'", line
    # python3 here is the interpreter running the tests, as it is for a newcomer's shell.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)  # the clone's own install runs, not the tests' sources
    env["REDIS_URL"] = url
    setup = subprocess.run(
        ["bash", "-c", f"{line} -q"], cwd=clone, env=env, capture_output=True, text=True,
        timeout=900,
    )  # fmt: skip
    assert setup.returncode == 0, setup.stderr[-3000:]
    python = clone / ".venv" / "bin" / "python"
    blocks = examples(clone / "README.md")
    assert [kind for kind, _ in blocks] == ["example"] * 3, "pasteable: no setup blocks"
    printed = []
    for i, (_, source) in enumerate(blocks, 1):
        script = clone / f"readme_example_{i}.py"
        script.write_text(source)
        ran = subprocess.run(
            [str(python), script.name], cwd=clone, env=env, capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
        assert ran.returncode == 0, f"README example {i}:\n{source}\n{ran.stderr[-3000:]}"
        printed.append(ran.stdout.strip())
    # What the README says they print: the quickstart's stored state (no temp: key), the
    # ADK runner nothing, the memory search the remembered sentence.
    quickstart, runner, memory = printed
    for key in ("booking_step", "user:name", "user:total_bookings", "app:maintenance_mode"):
        assert f"'{key}'" in quickstart, quickstart
    assert "temp:" not in quickstart, quickstart
    assert runner == ""
    assert memory == "My favorite color is blue"
    cli = subprocess.run(
        [str(clone / ".venv" / "bin" / "redis-agent-sessions"), "ls", "booking_app"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    assert "user1" in cli.stdout  # what the quickstart and the memory example wrote
