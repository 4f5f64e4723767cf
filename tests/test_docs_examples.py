"""Every Python example of the README and the documentation runs, as written, on fakeredis.

The examples of one page run in order in one namespace (a page builds on its earlier
examples), with top-level ``await`` allowed. What a page's examples take as given (a client,
a session, an agent) comes from an invisible setup block just before them, an HTML comment
the reader never sees::

    <!-- setup
    redis = fake_redis()
    -->

A page whose examples need google-adk runs where the ``[adk]`` extra is installed. An example
that defines ``async def`` functions without calling them is called by its page's setup or
by the next block, so nothing is only compiled.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import textwrap
from pathlib import Path
from typing import Any

import fakeredis
import pytest

# ADK marks its compaction summarizer experimental, with a warning the suite turns into errors.
pytestmark = pytest.mark.filterwarnings("ignore:.*EXPERIMENTAL.*:UserWarning")
ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(
    r"<!-- setup\n(?P<setup>.*?)-->|^(?P<indent>[ \t]*)```python\n(?P<code>.*?)^[ \t]*```",
    re.S | re.M,
)


def examples(page: Path) -> list[tuple[str, str]]:
    """(kind, source) of the page's setup blocks and examples, in order."""
    found = []
    for match in _BLOCK.finditer(page.read_text()):
        if match["setup"] is not None:
            found.append(("setup", textwrap.dedent(match["setup"])))
        else:
            indent = len(match["indent"])
            lines = [line[indent:] for line in match["code"].splitlines()]
            found.append(("example", "\n".join(lines) + "\n"))
    return found


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package ("google") is missing
        return False


def fake_redis() -> Any:
    return fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())


async def run(source: str, namespace: dict[str, Any], where: str) -> None:
    code = compile(source, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(code, namespace)  # the documentation's own examples
    if result is not None:  # top-level await makes the block a coroutine
        await result


@pytest.mark.parametrize(
    "page", [p for p in PAGES if examples(p)], ids=lambda p: str(p.relative_to(ROOT))
)
async def test_examples_run(page: Path) -> None:
    blocks = examples(page)
    text = "".join(source for _, source in blocks)
    if ("google.adk" in text or "GoogleEmbedder" in text) and not installed("google.adk"):
        pytest.skip("needs the [adk] extra (google.adk is not installed)")
    namespace: dict[str, Any] = {"fake_redis": fake_redis, "__name__": "docs_example"}
    for i, (kind, source) in enumerate(blocks, 1):
        await run(source, namespace, f"{page.name} block {i} ({kind})")


def test_every_example_is_found() -> None:
    """The pattern above sees each ```python fence of the pages (none is silently skipped)."""
    for page in PAGES:
        fences = len(re.findall(r"^[ \t]*```python$", page.read_text(), re.M))
        assert fences == sum(kind == "example" for kind, _ in examples(page)), page
