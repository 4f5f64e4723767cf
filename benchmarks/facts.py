"""Learned facts: recall on LoCoMo through facts against raw events, and what one
consolidation step costs Redis against an append, plain and search backends, in one run.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.facts --locomo PATH              # 3 conversations: ~1 min
    .venv/bin/python -m benchmarks.facts --locomo PATH --quick      # 1, 5 questions a category
    .venv/bin/python -m benchmarks.facts --locomo PATH --json out.json

It starts a Redis 7 (plain backend) and a Redis 8.2 + RediSearch (search backend) and stops
them; on servers given (``--url``, ``--search-url``) it removes its keys and indexes after.

**Recall** (data and protocol as ``benchmarks.recall``, from ``benchmarks.harness.locomo``):
LoCoMo's ``session_N_observation`` facts (each names the turns it comes from) are what a
perfect extraction would give: an oracle generator returns, for the step of session N it is
given (a session is read 50 events a step), one ``add`` per observation whose first turn is
among the step's events, with ``source_event_ids`` = its turns among them. Three stores
per backend: ``events`` (no generator: every turn an entry, today's memory), ``facts``
(the oracle, ``keep_events=False``) and ``both`` (the oracle, ``keep_events=True``). A
result names the turns of its event id, or a fact's ``sources`` (``custom_metadata
["redis_agent_sessions"]["fact"]``); recall@k = the share of a question's evidence turns
named by the first k results, averaged over questions (for raw events: recall's figure).

**Cost of a consolidation step** (the model excluded): ``add_session_to_memory`` of a
session given one new turn since the last call, with a generator answering at once with
one ``add`` (or one ``update`` of the first fact it is shown, or nothing), against
``append_event`` of the session service, on the same server and client, calls taking turns
each iteration (``timing.alternate``); the events' texts are LoCoMo's turns. Each kind of
call goes round ``USERS`` users, each given ``SEED`` facts first (past 30, a step ranks the
stored facts to show); sessions of ``TURNS`` turns, then a new one.
Round trips (sends on a connection) and server commands (``INFO commandstats``, commands
run inside scripts included) are counted in a pass of their own, untimed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ResponseError

from benchmarks.harness import report, servers, timing
from benchmarks.harness.internals import FACT_EVENTS_PER_STEP
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
from redis_agent_sessions import (
    Content,
    Event,
    FactSettings,
    GenerationRequest,
    MemoryOperation,
    Part,
    RedisMemoryService,
    RedisSessionService,
    Session,
    SessionServiceConfig,
)
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.memory import Backend

MODES = ("events", "facts", "both")
RETRIEVAL_KEY = "redis_agent_sessions"  # a search result's custom_metadata key (documented)
SEED = 50  # facts a cost user holds before the timed steps
USERS = 10  # users of each kind of call, in turn
TURNS = 20  # turns of a cost session before the next one starts
COST_OPS = ("append_event", "step: nothing", "step: add", "step: update")
progress = report.Progress("facts")


# -- the oracle ---------------------------------------------------------------------------


class Oracle:
    """Extraction as LoCoMo's annotators did it: each observation an ``add``, from its turns."""

    def __init__(self, convs: Sequence[Conversation]) -> None:
        self.planned: dict[tuple[str, str], list[tuple[str, list[str]]]] = {}
        self.stats = {"observations": 0, "placed": 0, "unplaced": 0, "sources_cut": 0}
        self.named: set[tuple[str, str]] = set()  # (user, dia_id) some fact has as a source
        for conv in convs:
            for sid, observations in conv.observations.items():
                at = {t.dia_id: i for i, t in enumerate(conv.sessions[sid])}
                rows = []
                for o in observations:
                    self.stats["observations"] += 1
                    turns = sorted({at[d] for d in o.dia_ids if d in at})
                    if not turns:  # names no turn of its session
                        self.stats["unplaced"] += 1
                        continue
                    step = turns[0] // FACT_EVENTS_PER_STEP
                    kept = [i for i in turns if i // FACT_EVENTS_PER_STEP == step]
                    self.stats["sources_cut"] += len(turns) - len(kept)
                    self.stats["placed"] += 1
                    ids = [conv.sessions[sid][i].event_id for i in kept]
                    self.named |= {(conv.user, conv.sessions[sid][i].dia_id) for i in kept}
                    rows.append((o.text, ids))
                self.planned[(conv.user, sid)] = rows

    async def generate(self, request: GenerationRequest) -> Sequence[MemoryOperation]:
        given = {e.id for e in request.events}
        return [
            MemoryOperation(action="add", fact=text, source_event_ids=ids)
            for text, ids in self.planned.get((request.user_id, request.session_id), [])
            if ids[0] in given
        ]


# -- recall -------------------------------------------------------------------------------


@dataclass
class Store:
    mode: str
    backend: str
    memory: RedisMemoryService
    client: Redis
    prefix: str
    ingest_s: float = 0.0
    entries: int = 0
    facts: int = 0
    samples_ns: list[int] = field(default_factory=list)
    found: list[list[set[str]]] = field(default_factory=list)  # per question, per result
    fact_results: int = 0  # results that are facts, every question's top 10


def stores(client: Redis, backend: Backend, oracle: Oracle) -> list[Store]:
    out = []
    for mode in MODES:
        prefix = unique_prefix(f"facts-{backend}-{mode}")
        config = SessionServiceConfig(key_prefix=prefix)
        learned: dict[str, Any] = {}
        if mode != "events":
            learned = {"generator": oracle, "facts": FactSettings(keep_events=mode == "both")}
        memory = RedisMemoryService(client, config=config, backend=backend, **learned)
        out.append(Store(mode, backend, memory, client, prefix))
    return out


async def drop(client: Redis, prefix: str, backend: str) -> None:  # indexes and keys
    if backend == "search":
        keys = KeySpace(prefix)
        for index in (keys.memory_index(), keys.memory_vector_index()):
            with contextlib.suppress(ResponseError):
                await client.execute_command("FT.DROPINDEX", index)  # type: ignore[no-untyped-call]
    await servers.delete_prefix(client, f"{prefix}:")


def fact_of(entry: Any) -> dict[str, Any] | None:
    return ((entry.custom_metadata or {}).get(RETRIEVAL_KEY) or {}).get("fact")


def named_turns(entry: Any, dia_ids: dict[str, str]) -> set[str]:
    """The dia_ids a result names: a fact's sources, or an event entry's own turn."""
    if (fact := fact_of(entry)) is not None:
        return {dia_ids.get(e, "?") for s in fact.get("sources", []) for e in s["event_ids"]}
    return {dia_ids.get(str((entry.custom_metadata or {}).get("event_id") or entry.id), "?")}


async def ingest(s: Store, convs: Sequence[Conversation]) -> None:
    started = time.perf_counter()
    for conv in convs:
        for sid in conv.sessions:
            await s.memory.add_session_to_memory(session(conv, sid, adk=False))
    s.ingest_s = time.perf_counter() - started
    keys = KeySpace(s.prefix)
    for conv in convs:
        s.entries += int(await s.client.zcard(keys.memory_entries(APP, conv.user)))
        s.facts += int(await s.client.zcard(keys.memory_facts(APP, conv.user)))
    progress(f"{s.backend} {s.mode}: {s.facts} facts, {s.entries - s.facts} raw entries, "
             f"every session added in {s.ingest_s:.1f} s")  # fmt: skip


async def search_all(
    every: list[Store], questions: list[Question], convs: dict[str, Conversation]
) -> None:
    async def search(s: Store, q: Question) -> Any:
        return await s.memory.search_memory(app_name=APP, user_id=q.user, query=q.text)

    def record(s: Store, q: Question, response: Any) -> None:
        dia_ids = convs[q.user].dia_ids
        s.found.append([named_turns(m, dia_ids) for m in response.memories])
        s.fact_results += sum(fact_of(m) is not None for m in response.memories)

    await timed_searches(every, questions, search, record)


def summary(s: Store, questions: list[Question]) -> dict[str, Any]:
    stats = timing.summarize(s.samples_ns)
    return {
        "mode": s.mode, "backend": s.backend, "facts": s.facts, "raw_entries": s.entries - s.facts,
        **recall_summary(s.found, questions), "ingest_s": s.ingest_s,
        "fact_results_per_search": s.fact_results / max(len(questions), 1),
        "search_ms": {"n": stats.n, "p50": stats.p50_us / 1e3, "p99": stats.p99_us / 1e3},
    }  # fmt: skip


# -- the cost of a step -------------------------------------------------------------------


class Instant:
    """A generator answering at once (``mode``): one ``add`` of the newest event's text, one
    ``update`` of the first fact it is shown, nothing, or ``SEED`` adds (a user's start)."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.mode = "seed"
        self.texts = texts
        self.count = 0

    def fact(self, said: str) -> str:
        self.count += 1
        return f"The user said: {said} ({self.count})"

    async def generate(self, request: GenerationRequest) -> Sequence[MemoryOperation]:
        text = request.events[-1].content.text if request.events[-1].content else ""
        if self.mode == "seed":
            texts = (self.texts[(self.count + i) % len(self.texts)] for i in range(SEED))
            return [MemoryOperation(action="add", fact=self.fact(t)) for t in texts]
        if self.mode == "add":
            return [MemoryOperation(action="add", fact=self.fact(text))]
        if self.mode == "update" and request.facts:
            fact = request.facts[0]
            return [MemoryOperation(action="update", fact_id=fact.id, fact=self.fact(text))]
        return []


class Caller:
    """One kind of call, each on the next of its users' sessions given one new turn."""

    def __init__(self, op: str, texts: Sequence[str], sessions: RedisSessionService,
                 memory: RedisMemoryService | None) -> None:  # fmt: skip
        self.op, self.texts, self.sessions, self.memory = op, texts, sessions, memory
        self.current: dict[str, Session] = {}
        self.turn = 0

    def user(self, i: int) -> str:
        return f"{self.op.split()[-1]}-{i % USERS}"

    async def __call__(self) -> Any:
        user = self.user(self.turn)
        text = self.texts[self.turn % len(self.texts)]
        self.turn += 1
        s = self.current.get(user)
        if s is None or len(s.events) >= TURNS:
            if self.memory is None:
                s = await self.sessions.create_session(app_name="bench", user_id=user)
            else:
                s = Session(id=uuid.uuid4().hex, app_name="bench", user_id=user, events=[])
            self.current[user] = s
        event = Event(author="user", content=Content(role="user", parts=[Part(text=text)]))
        if self.memory is None:
            return await self.sessions.append_event(s, event)
        s.events.append(event)
        return await self.memory.add_session_to_memory(s)


async def counted(client: Redis, call: Caller, n: int = 50) -> dict[str, Any]:
    """Round trips (sends on a connection: a pipeline or a script call is one) and server
    commands (INFO commandstats) of one call, untimed."""
    sent, send = [0], AbstractConnection.send_packed_command

    async def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        sent[0] += 1
        return await send(self, *args, **kwargs)

    before = await servers.command_stats(client)
    with timing.patched(AbstractConnection, "send_packed_command", counting):
        for _ in range(n):
            await call()
    delta = servers.stats_delta(before, await servers.command_stats(client))
    each = {cmd: c / n for cmd, (c, _) in delta.items() if cmd != "info"}
    return {"round_trips": sent[0] / n, "server_commands": sum(each.values()), "commands": each}


async def cost(
    client: Redis, backend: Backend, texts: Sequence[str], iterations: int, warmup: int
) -> dict[str, Any]:
    prefix = unique_prefix(f"facts-cost-{backend}")
    config = SessionServiceConfig(key_prefix=prefix)
    sessions = RedisSessionService(client, config=config)
    generators = {op: Instant(texts) for op in COST_OPS[1:]}
    calls = {COST_OPS[0]: Caller(COST_OPS[0], texts, sessions, None)} | {
        op: Caller(op, texts, sessions, RedisMemoryService(
            client, config=config, backend=backend, generator=gen, facts=FactSettings()))
        for op, gen in generators.items()
    }  # fmt: skip
    keys = KeySpace(prefix)

    async def held(op: str) -> list[int]:
        found = [keys.memory_facts("bench", calls[op].user(i)) for i in range(USERS)]
        return [int(await client.zcard(key)) for key in found]

    try:
        for op, gen in generators.items():  # every user starts with SEED facts
            for _ in range(USERS):
                await calls[op]()
            gen.mode = op.split()[-1]
        start = {op: await held(op) for op in generators}
        for i in range(warmup):
            for op in timing.alternate(COST_OPS, i):
                await calls[op]()
        samples: dict[str, list[int]] = {op: [] for op in COST_OPS}
        clock = time.perf_counter_ns
        with timing.settled_gc():
            for i in range(iterations):
                for op in timing.alternate(COST_OPS, i):
                    start_ns = clock()
                    await calls[op]()
                    samples[op].append(clock() - start_ns)
        counts = {op: await counted(client, calls[op]) for op in COST_OPS}
        end = {op: await held(op) for op in generators}
    finally:
        await drop(client, prefix, backend)
    stats = {op: timing.summarize(samples[op]) for op in COST_OPS}
    base = stats["append_event"].p50_us
    rows = [
        {"op": op, "n": st.n, "p50_us": st.p50_us, "p99_us": st.p99_us, "mean_us": st.mean_us,
         "vs_append_p50": st.p50_us / base, **counts[op],
         "facts_per_user": None if op not in start else
             {"start": [min(start[op]), max(start[op])], "end": [min(end[op]), max(end[op])]}}
        for op, st in stats.items()
    ]  # fmt: skip
    progress(f"{backend}: step cost measured ({iterations} iterations)")
    return {"backend": backend, "users": USERS, "seed_facts": SEED, "session_turns": TURNS,
            "rows": rows}  # fmt: skip


# -- the run ------------------------------------------------------------------------------


async def measure(
    convs: list[Conversation], questions: list[Question], urls: dict[Backend, str],
    iterations: int, warmup: int,
) -> dict[str, Any]:  # fmt: skip
    clients = {b: Redis.from_url(u) for b, u in urls.items()}
    oracle = Oracle(convs)
    every: list[Store] = []
    for backend, client in clients.items():
        every += stores(client, backend, oracle)
    try:
        versions = {str(b): await servers.server_version(c) for b, c in clients.items()}
        for s in every:
            await ingest(s, convs)
        progress(f"{len(questions)} questions x {len(every)} stores")
        await search_all(every, questions, {c.user: c for c in convs})
        # Turns with a letter: a step on words-less events (";)") for a user holding over 30
        # facts fails on the search backend (HMGET of no field), a library bug reported.
        turns = (t.text for c in convs for ts in c.sessions.values() for t in ts)
        texts = [t for t in turns if any(ch.isalpha() for ch in t)]
        costs = [await cost(c, b, texts, iterations, warmup) for b, c in clients.items()]
    finally:
        for s in every:
            await drop(s.client, s.prefix, s.backend)
        for client in clients.values():
            await client.aclose()
    named = [[(q.user, e) in oracle.named for e in q.evidence] for q in questions]
    ceiling = sum(sum(n) / len(n) for n in named) / max(len(named), 1)
    evidence = {"evidence_named": sum(map(sum, named)), "facts_recall_ceiling": ceiling}
    return {
        "environment": report.environment(versions, iterations=iterations),
        "oracle": oracle.stats | evidence,
        "stores": [summary(s, questions) for s in every],
        "cost": costs,
    }


def held(facts: dict[str, list[int]] | None) -> str:
    if facts is None:
        return "-"
    (a, b), (c, d) = facts["start"], facts["end"]  # min-max over the users
    return f"{a}-{b} at start, {c}-{d} at end" if (a, b) != (c, d) else f"{a}-{b}"


def text(result: dict[str, Any]) -> str:
    data, oracle = result["data"], result["oracle"]
    lines = report.environment_lines("learned facts on LoCoMo", result["environment"])
    lines += [
        f"data: {data['path']}{' (--quick)' if data['quick'] else ''}: "
        f"{len(data['conversations'])} conversations, {data['sessions']} sessions, "
        f"{data['turns']:,} turns; {data['questions']} questions; evidence ids "
        f"{data['evidence_ids']} ({data['evidence_not_found']} name no turn)",
        f"oracle: {oracle['observations']} observations, {oracle['placed']} added as facts, "
        f"{oracle['unplaced']} naming no turn of their session, {oracle['sources_cut']} "
        f"source turns cut by a {FACT_EVENTS_PER_STEP}-event step; {oracle['evidence_named']} "
        f"of the {data['evidence_ids']} evidence turns are a fact's source (recall through "
        f"facts can reach {oracle['facts_recall_ceiling']:.3f} at most)",
        "",
        "| store | backend | facts | raw entries | R@5 | R@10 | "
        + " | ".join(f"{n} R@10" for n in CATEGORIES.values())
        + " | facts in top 10 | search p50 ms | ingest s |",
        "|---|---|---:|---:|---:|---:|" + "---:|" * len(CATEGORIES) + "---:|---:|---:|",
    ]

    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    for s in result["stores"]:
        cats = " | ".join(cell(s["by_category"][str(k)]["recall_at_10"]) for k in CATEGORIES)
        lines.append(
            f"| {s['mode']} | {s['backend']} | {s['facts']:,} | {s['raw_entries']:,} | "
            f"{cell(s['recall_at_5'])} | {cell(s['recall_at_10'])} | {cats} | "
            f"{s['fact_results_per_search']:.1f} | {s['search_ms']['p50']:.2f} | "
            f"{s['ingest_s']:.1f} |"
        )
    iterations = result["environment"]["iterations"]
    lines += [
        "",
        "R@k: share of a question's evidence turns named by the first k results (an event's "
        "own turn, a fact's source turns), averaged over questions",
        "",
        f"one consolidation step (model excluded) against an append, {iterations:,} "
        f"iterations, calls taking turns; LoCoMo turns as the events:",
        "",
        "| backend | call | p50 us | p99 us | p50 / append's | round trips | server commands "
        "| facts a user holds |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for c in result["cost"]:
        for r in c["rows"]:
            lines.append(
                f"| {c['backend']} | {r['op']} | {r['p50_us']:,.0f} | {r['p99_us']:,.0f} | "
                f"{r['vs_append_p50']:.2f} | {r['round_trips']:.1f} | "
                f"{r['server_commands']:.1f} | {held(r['facts_per_user'])} |"
            )
    lines.append(
        "\nserver commands: INFO commandstats per call, commands run inside scripts included"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = report.parser(__doc__)
    add = parser.add_argument
    add("--locomo", required=True, type=Path, help="a folder of LoCoMo conversation files")
    add("--search-url", help="use this Redis with RediSearch for the search backend")
    add("--iterations", type=int, help="timed consolidation steps of each kind (default 2000)")
    report.add_flags(parser, url=True, quick="one conversation, 5 questions a category")
    args = parser.parse_args(argv)
    if not args.locomo.exists():
        parser.error(f"--locomo {args.locomo}: no such file or folder")
    convs = load_locomo(args.locomo)[: 1 if args.quick else None]
    questions = [q for c in convs for q in c.questions]
    if args.quick:
        questions = [q for k in CATEGORIES for q in [q for q in questions if q.category == k][:5]]
    iterations = args.iterations or (200 if args.quick else 2000)
    warmup = 20 if args.quick else 200
    data = data_summary(args.locomo, convs, questions) | {"quick": bool(args.quick)}
    progress(f"{len(convs)} conversations, {data['turns']:,} turns, {len(questions)} questions")
    with contextlib.ExitStack() as stack:
        plain_url, _ = stack.enter_context(servers.redis_url(args.url))
        if not (search_url := args.search_url):
            search_url = stack.enter_context(servers.redis8(search=True, name="facts-search")).url
        urls: dict[Backend, str] = {"plain": plain_url, "search": search_url}
        result = asyncio.run(measure(convs, questions, urls, iterations, warmup))
    report.emit({"data": data, **result}, text, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
