"""The architecture's rules that import-linter does not check (it checks layers and cycles
of the package, `lint-imports`): module size (the benchmarks' too), where the topology is
decided, and benchmarks that share a harness instead of importing each other."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "redis_agent_sessions"
BENCHMARKS = ROOT / "benchmarks"


def _modules(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def test_every_module_of_the_package_reads_in_one_sitting() -> None:
    """Its Lua scripts and libraries too (``_redis/lua/``)."""
    lua = sorted((PACKAGE / "_redis" / "lua").glob("*.lua"))
    assert lua
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in _modules(PACKAGE) + lua
        if (n := len(p.read_text().splitlines())) >= 500
    }
    assert long == {}


def test_only_the_topology_module_asks_what_the_client_talks_to() -> None:
    """Sessions and memory get the answer from _redis/topology.py (and the layouts it
    chooses); they never test the client's class themselves."""
    asking = set()
    for path in _modules(PACKAGE / "sessions") + _modules(PACKAGE / "memory"):
        source = path.read_text()
        if (
            "RedisCluster" in source.replace("``RedisCluster``", "")
            or "is_cluster_client" in source
        ):
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.Name) and node.id in ("RedisCluster", "is_cluster_client"):
                    asking.add(str(path.relative_to(PACKAGE)))
    assert asking == set()


LAYOUT_MODULES = {"_layout.py", "_cluster.py", "_single_node.py"}
TOPOLOGY_ANSWERS = ("cluster", "_cluster_client")


def test_each_capability_decides_the_topology_in_one_place() -> None:
    """Outside the layout modules, sessions/ and memory/ each read ``Topology.cluster``
    (the one answer to "single node or cluster?") once, and pass the choice on."""
    places: dict[str, list[str]] = {"sessions": [], "memory": []}
    for capability, found in places.items():
        for path in _modules(PACKAGE / capability):
            if path.name in LAYOUT_MODULES:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                # config.cluster is what the user asked for, handed to Topology to decide.
                asks = isinstance(node, ast.Attribute) and node.attr in TOPOLOGY_ANSWERS
                if asks and not (isinstance(node.value, ast.Name) and node.value.id == "config"):
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert {c: len(found) for c, found in places.items()} == {"sessions": 1, "memory": 1}, places


def test_every_benchmark_file_reads_in_one_sitting() -> None:
    """Benchmarks stay lean as the package does: a benchmark that outgrows one module becomes
    a package of them, and what several share goes to the harness."""
    long = {
        str(p.relative_to(BENCHMARKS)): n
        for p in _modules(BENCHMARKS)
        if (n := len(p.read_text().splitlines())) >= 500
    }
    assert long == {}


def test_benchmarks_import_the_harness_never_each_other() -> None:
    """A benchmark is a module of benchmarks/ or a package there (whose modules import one
    another); the harness is the one package they all share."""
    packages = {p.parent.name for p in BENCHMARKS.glob("*/__init__.py")} - {"harness"}
    benchmarks = {p.stem for p in BENCHMARKS.glob("*.py") if p.stem != "__init__"} | packages
    assert benchmarks, "benchmarks/ holds the benchmarks"
    crossing = []
    for path in _modules(BENCHMARKS):
        inside = path.relative_to(BENCHMARKS).parts
        own = inside[0] if len(inside) > 1 else path.stem
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                parts = name.split(".")
                other = parts[1] if parts[0] == "benchmarks" and len(parts) > 1 else None
                if other in benchmarks and other != own:
                    crossing.append(f"{path.relative_to(ROOT)} imports {name}")
    assert crossing == []


def test_the_adk_session_facade_keeps_only_what_is_adks() -> None:
    """The service is defined once (sessions/_service.py); the ADK module adds its errors,
    id normalisation, CompactedReads and the URI constructor, and stays short."""
    assert len((PACKAGE / "adk" / "__init__.py").read_text().splitlines()) < 250
