"""Every Python example of the README and the documentation runs, as written, on fakeredis.

The examples of one page run in order in one namespace (a page builds on its earlier
examples), with top-level ``await`` allowed. An example may be a whole script, as a reader
pastes it: a top-level ``asyncio.run(main())`` statement runs as ``await main()`` in the
test's own event loop. A client an example makes from a URL (a service's ``from_url``, or
redis-py's ``Redis.from_url``, such as ``from_url(os.environ.get("REDIS_URL", ...))``) is a
fakeredis client, all of one page's on one fake server, so that the examples two workers
run see each other's writes. What a page's examples take as given (a client, a session, an
agent) comes from an invisible setup block just before them, an HTML comment the reader
never sees::

    <!-- setup
    redis = fake_redis()
    -->

where ``fake_redis()`` gives a client of a fake server of its own. A fence may carry
attributes (```` ```python title="worker_a.py" ````). A page whose examples need google-adk
runs where the ``[adk]`` extra is installed. An example that defines ``async def`` functions
without calling them is called by its page's setup or by the next block, so nothing is only
compiled.
"""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import re
import textwrap
from pathlib import Path
from typing import Any

import fakeredis
import pytest
from redis.asyncio import Redis

# ADK marks its compaction summarizer experimental, with a warning the suite turns into errors.
pytestmark = pytest.mark.filterwarnings("ignore:.*EXPERIMENTAL.*:UserWarning")
ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(
    r"<!-- setup\n(?P<setup>.*?)-->"
    r"|^(?P<indent>[ \t]*)```python(?:[ \t]+[^\n]*)?\n(?P<code>.*?)^[ \t]*```",
    re.S | re.M,
)
_FENCE = re.compile(r"^[ \t]*```python(?:[ \t]+[^\n]*)?$", re.M)


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


class _AwaitAsyncioRun(ast.NodeTransformer):
    """``asyncio.run(X)`` as a top-level statement becomes ``await X``: the loop that
    runs the example is already running, and ``asyncio.run`` cannot nest in it."""

    def visit_Module(self, node: ast.Module) -> ast.Module:
        node.body = [self._rewrite(statement) for statement in node.body]
        return node

    @staticmethod
    def _rewrite(statement: ast.stmt) -> ast.stmt:
        call = statement.value if isinstance(statement, ast.Expr) else None
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and isinstance(call.func.value, ast.Name)
            and (call.func.value.id, call.func.attr) == ("asyncio", "run")
            and len(call.args) == 1
            and not call.keywords
        ):
            return ast.copy_location(ast.Expr(ast.Await(call.args[0])), statement)
        return statement


def compiled(source: str, where: str) -> Any:
    """``source`` compiled as the tests run it (top-level ``asyncio.run`` awaited)."""
    tree = _AwaitAsyncioRun().visit(ast.parse(source, where))
    ast.fix_missing_locations(tree)
    return compile(tree, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


async def run(source: str, namespace: dict[str, Any], where: str) -> None:
    result = eval(compiled(source, where), namespace)  # the documentation's own examples
    if result is not None:  # top-level await makes the block a coroutine
        await result


@pytest.fixture
def urls_on_fakeredis(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients made from (single-node) URLs are fakeredis clients of one fake server."""
    server = fakeredis.FakeServer()

    def from_url(cls: type, url: str, **kwargs: Any) -> Any:
        decode = bool(kwargs.get("decode_responses", False))
        return fakeredis.FakeAsyncRedis(server=server, decode_responses=decode)

    monkeypatch.setattr(Redis, "from_url", classmethod(from_url))


@pytest.mark.usefixtures("urls_on_fakeredis")
@pytest.mark.parametrize(
    "page", [p for p in PAGES if examples(p)], ids=lambda p: str(p.relative_to(ROOT))
)
async def test_examples_run(page: Path) -> None:
    blocks = examples(page)
    text = "".join(source for _, source in blocks)
    if ("google.adk" in text or "GoogleEmbedder" in text) and not installed("google.adk"):
        pytest.skip("needs the [adk] extra (google.adk is not installed)")
    if "redis_agent_sessions.mcp" in text and not installed("mcp"):
        pytest.skip("needs the [mcp] extra (mcp is not installed)")
    namespace: dict[str, Any] = {"fake_redis": fake_redis, "__name__": "docs_example"}
    for i, (kind, source) in enumerate(blocks, 1):
        await run(source, namespace, f"{page.name} block {i} ({kind})")


def test_every_example_is_found() -> None:
    """The pattern above sees each ```python fence of the pages (none is silently skipped)."""
    for page in PAGES:
        fences = len(_FENCE.findall(page.read_text()))
        assert fences == sum(kind == "example" for kind, _ in examples(page)), page


async def test_a_top_level_asyncio_run_is_awaited_in_the_running_loop() -> None:
    source = (
        "import asyncio\n"
        "async def main():\n"
        "    global loop\n"
        "    loop = asyncio.get_running_loop()\n"
        "asyncio.run(main())\n"
        "def later():\n"
        "    asyncio.run(main())\n"
    )
    namespace: dict[str, Any] = {}
    await run(source, namespace, "example")
    assert namespace["loop"] is asyncio.get_running_loop()
    rewritten = ast.unparse(_AwaitAsyncioRun().visit(ast.parse(source)))
    assert "\nawait main()\n" in rewritten  # the top-level call
    assert "    asyncio.run(main())" in rewritten  # one inside a function: as written
