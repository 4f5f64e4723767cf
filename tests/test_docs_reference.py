"""The reference pages name everything the code defines, so they fail here when they drift.

- docs/errors.md has a section for every exported ``RedisSessionsError`` subclass;
- docs/cli.md has a section for every command of the CLI's parser, naming its options;
- docs/settings.md names every ``SessionServiceConfig`` field, every argument of the memory
  service and field of ``FactSettings``, and every URL parameter the URI parser accepts;
- the generated Python reference renders: docstrings are Markdown (mkdocstrings reads them
  in Google style), never Sphinx markup that would show raw, and the ``docs`` extra can
  format signatures.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib.util
import inspect
import re
from pathlib import Path
from types import ModuleType

import pytest
import redis

import redis_agent_sessions
from redis_agent_sessions import FactSettings, RedisMemoryService, SessionServiceConfig, errors
from redis_agent_sessions._redis import params, uri
from redis_agent_sessions.cli import _parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def section(page: str, heading: str) -> str:
    """The text of ``page`` under ``heading`` (a whole heading line), up to the next heading
    of the same or a higher level."""
    text = (DOCS / page).read_text()
    level = heading.split(" ", 1)[0]
    start = text.find(f"\n{heading}\n")
    assert start >= 0, f"{page} has no heading {heading!r}"
    body = text[start + len(heading) + 2 :]
    ends = re.compile(rf"^#{{1,{len(level)}}} ", re.M).search(body)
    return body[: ends.start()] if ends else body


def test_errors_page_has_a_section_for_every_error() -> None:
    exported = {
        name
        for name in (*errors.__all__, *redis_agent_sessions.__all__)
        if isinstance(obj := getattr(errors, name, None), type)
        and issubclass(obj, errors.RedisSessionsError)
    }
    assert len(exported) >= 15
    page = (DOCS / "errors.md").read_text()
    for name in exported - {"RedisSessionsError"}:
        body = section("errors.md", f"### `{name}`")
        for part in ("**When.**", "**Data after.**", "**What to do.**"):
            assert part in body, f"errors.md: {name} says nothing under {part}"
    family = section("errors.md", "## The family")
    missing = [n for n in sorted(exported) if f"| `{n}` |" not in family]
    assert not missing, f"errors.md's table lacks {missing}"
    assert "RedisSessionsError" in page


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = _parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


CONNECTION = {"--url", "--key-prefix", "--cluster"}


def test_cli_page_has_a_section_for_every_command_naming_its_options() -> None:
    commands = _commands()
    assert {"demo", "ls", "ping", "sweep"} <= commands.keys()
    glance = section("cli.md", "## Commands at a glance")
    for name, parser in commands.items():
        anchor = name.replace(" ", "-")  # `facts worker`: #facts-worker
        assert f"[`{name}`](#{anchor})" in glance, f"cli.md's table lacks {name}"
        body = section("cli.md", f"## `{name}`")
        assert "```console" in body, f"cli.md: {name} has no example"
        for action in parser._actions:
            flags = [f for f in action.option_strings if f.startswith("--")]
            if not flags or flags[0] == "--help" or flags[0] in CONNECTION:
                continue
            assert any(f in body for f in flags), f"cli.md: {name} does not name {flags[0]}"
    shared = section("cli.md", "### Connection options")
    for flag in CONNECTION:
        assert f"`{flag}" in shared, f"cli.md's connection options lack {flag}"


def _parsers(
    parser: argparse.ArgumentParser, name: str = ""
) -> list[tuple[str, argparse.ArgumentParser]]:
    """The parser and every command's and subcommand's, with the command line naming it."""
    found = [(name, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub, subparser in action.choices.items():
                found += _parsers(subparser, f"{name} {sub}".strip())
    return found


def test_every_positional_argument_says_what_it_is_in_help() -> None:
    """``show --help`` explains APP, USER and SESSION as it explains its options."""
    silent = [
        f"{name} {action.metavar or action.dest}"
        for name, parser in _parsers(_parser())
        for action in parser._actions
        if not action.option_strings
        and not isinstance(action, argparse._SubParsersAction)
        and not action.help
    ]
    assert not silent, f"positional arguments without help: {silent}"
    assert len(_parsers(_parser())) > 20


def test_settings_page_names_every_setting() -> None:
    config = section("settings.md", "## Session service: `SessionServiceConfig`")
    for field in SessionServiceConfig.model_fields:
        assert f"| `{field}` |" in config, f"settings.md lacks SessionServiceConfig.{field}"
    memory = section("settings.md", "## Memory service")
    arguments = inspect.signature(RedisMemoryService.__init__).parameters
    for argument in arguments:
        if argument not in ("self", "client"):
            assert f"| `{argument}` |" in memory, f"settings.md lacks the argument {argument}"
    for field in dataclasses.fields(FactSettings):
        assert f"| `{field.name}` |" in memory, f"settings.md lacks FactSettings.{field.name}"


def test_settings_page_names_every_url_parameter_of_the_library() -> None:
    urls = section("settings.md", "## Connection URLs")
    ours = [*uri._CONFIG_FIELDS, *uri._MEMORY]
    assert "memory_backend" in ours
    assert "key_prefix" in ours
    missing = [name for name in ours if f"| `{name}` |" not in urls]
    assert not missing, f"settings.md#connection-urls lacks {missing}"


def test_settings_page_names_every_url_parameter_of_redis_py() -> None:
    urls = section("settings.md", "## Connection URLs")
    documented = re.search(r"With redis-py (\d+\.\d+)", urls)
    assert documented, "settings.md#connection-urls does not say which redis-py it lists"
    if not redis.__version__.startswith(f"{documented[1]}."):
        pytest.skip(f"the page lists redis-py {documented[1]}'s, this is {redis.__version__}")
    accepted = {
        name
        for scheme in uri.SCHEMES
        for cluster in (False, True)
        for name in params.accepted(scheme, cluster)
    }
    missing = sorted(name for name in accepted if f"`{name}`" not in urls)
    assert not missing, f"settings.md#connection-urls lacks redis-py's {missing}"


def _slugs(page: Path) -> set[str]:
    """The anchors MkDocs gives the page's headings (its toc slugify, ASCII)."""
    headings = re.findall(r"^#{1,6} (.+)$", page.read_text(), re.M)

    def slug(heading: str) -> str:
        return re.sub(r"[\s-]+", "-", re.sub(r"[^\w\s-]", "", heading.strip().lower()))

    return {slug(h) for h in headings}


def test_every_docs_pointer_in_the_code_names_a_page_and_heading_that_exist() -> None:
    """Error messages and docstrings send users to ``docs/<page>.md#<anchor>``: a page
    renamed or a heading reworded must not leave them pointing at nothing."""
    src = Path(redis_agent_sessions.__file__).parent
    pointers = {
        (m[1], m[2] or "")
        for path in src.rglob("*.py")
        for m in re.finditer(r"docs/([\w-]+\.md)(?:#([\w-]+))?", path.read_text())
    }
    assert ("settings.md", "connection-urls") in pointers  # the pattern reads the code
    for page, anchor in sorted(pointers):
        assert (DOCS / page).is_file(), f"the code points at docs/{page}, which does not exist"
        if anchor:
            assert anchor in _slugs(DOCS / page), f"docs/{page} has no heading #{anchor}"


def _docs_check() -> ModuleType:
    """scripts/docs-check.py as a module (its name has a dash)."""
    spec = importlib.util.spec_from_file_location("docs_check", ROOT / "scripts" / "docs-check.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_check_fails_on_sphinx_markup_shown_raw_and_only_outside_code() -> None:
    raw_markup = _docs_check().raw_markup
    shown = (
        "<p>as an :class: <code>Embedder</code>.</p><p>left open by :py:meth: x</p>"
        "<p>and the like::</p><pre><code>x = 1</code></pre><li>see ``register``</li>"
    )
    found = raw_markup(shown)
    assert len(found) == 4, found
    for markup in (":class:", ":py:meth:", "like::", "``register``"):
        assert any(markup in f for f in found), (markup, found)
    fine = (
        "<p>as an <a><code>Embedder</code></a>; at 09:30: done, ::1 is loopback</p>"
        "<pre><code>a = b[::2]  # :class:`X` ``y``\nclass C::</code></pre>"
        "<p><code>``x``</code> <kbd>:q</kbd></p><script>x = ':class:'</script>"
    )
    assert raw_markup(fine) == []


_SPHINX = re.compile(r":(?:py:)?(?:class|meth|func|attr|mod|exc|data|obj|ref):`|\w::$", re.M)


def _docstrings(path: Path) -> list[tuple[int, str]]:
    """Every string statement of a module (docstrings, attribute docstrings), with its line."""
    return [
        (node.lineno, node.value.value)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    ]


def test_docstrings_are_the_markdown_the_reference_renders() -> None:
    """mkdocstrings (mkdocs.yml: Google style, Markdown) shows a Sphinx role or a ``::``
    literal-block marker as typed: code is in backticks, a link is ``[`Name`][]``, an
    example is a fenced block."""
    config = (ROOT / "mkdocs.yml").read_text()
    assert "docstring_style: google" in config
    src = Path(redis_agent_sessions.__file__).parent
    found = [
        f"{path.relative_to(src)}:{line}: {match[0]}"
        for path in sorted(src.rglob("*.py"))
        for line, text in _docstrings(path)
        for match in _SPHINX.finditer(text)
    ]
    assert not found, "Sphinx markup in docstrings:\n" + "\n".join(found)


def test_the_docs_extra_formats_signatures() -> None:
    """mkdocstrings formats the reference's signatures with Ruff or Black, and without
    either prints each one as a single line the page cuts off: the README's docs build
    (``pip install -e '.[docs]'``) must bring one."""
    # A regex rather than tomllib: this runs on 3.10 too, which has none.
    text = (ROOT / "pyproject.toml").read_text()
    docs = re.search(r"^docs = \[(.*?)\]$", text, re.M | re.S)
    assert docs, "pyproject.toml has no docs extra"
    assert re.search(r'"(ruff|black)[<>=!~ ]', docs[1]), f"the docs extra is {docs[1]}"


def test_the_performance_page_says_which_version_each_chart_measured() -> None:
    """A chart's caption names the version it measured (benchmarks/plots.py writes the one
    imported); the page's text for it must say that version, so a chart left from an
    earlier release is not read as the current one's."""
    page = (DOCS / "performance.md").read_text()
    charts = re.findall(r"!\[([^\]]*)\]\((img/[\w-]+\.svg)\)", page)
    measured = {
        image: found[1]
        for _, image in charts
        if (found := re.search(r"redis-agent-sessions (\d+\.\d+\.\d+)", (DOCS / image).read_text()))
    }
    assert {"img/append-latency.svg", "img/read-latency.svg"} <= measured.keys()
    for alt, image in charts:
        if image in measured:
            assert f"version {measured[image]}" in alt, f"performance.md: {image} is {alt!r}"
