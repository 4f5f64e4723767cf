"""Semantic memory: the vector index's recall, hybrid search latency, ingestion with vectors.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.semantic [--quick] [--json PATH]

Throwaway servers on free ports: Redis 8.2 + RediSearch (search backend), then Redis 7
(plain). Seeded synthetic 384-dim vectors: an entry is one of 300 random unit centres plus
isotropic Gaussian noise as long as the centre, normalised; a query, an entry plus half as
much noise. Texts: 12 Zipf words and an id token; the embedder looks texts up in a dict (a
pair of neighbours, which the library embeds too, is the sum of the two), so embedding
costs nothing (the library still checks, normalises, sums and packs each vector).

1. Recall@10 of the library's HNSW KNN (the index's EF_RUNTIME; 10 and 200 for context) for
   one user of 100,000 entries (``--quick``: 10,000) next to 20 other users', against the
   exact top 10 of a FLAT index the benchmark adds over the same hashes.
2. ``search_memory`` there with the embedder (hybrid) and without (keyword only), in turn.
3. Ingestion with vectors against keyword only: the same entries into two fresh prefixes.
4. Plain backend (Redis 7): hybrid and keyword ``search_memory`` at 1k and 10k entries.
"""

from __future__ import annotations

import asyncio
import math
import random
import struct
import time
from array import array
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis

from benchmarks.harness import report, servers, timing
from benchmarks.harness.workloads import memory_words, unique_prefix
from redis_agent_sessions import Content, Event, Part, RedisMemoryService, SessionServiceConfig
from redis_agent_sessions.keys import KeySpace

progress = report.Progress("semantic")

DIM = 384
CENTRES = 300
ENTRY_NOISE = 1.0  # expected length of an entry's noise vector (the centres are unit length)
QUERY_NOISE = 0.5  # of a query's, added to a (unit) entry
K = 10
APP = "bench"
TARGETS = {"recall": 0.95, "p50_ms": 10.0, "p99_ms": 30.0}
EFS: dict[str, int | None] = {"index default": None, "EF_RUNTIME 10": 10, "EF_RUNTIME 200": 200}
Vec = array  # array("f"): 1.5 kB a vector, where a list of floats would take 12 kB


class Synthetic:
    """Seeded synthetic embeddings around ``CENTRES`` random unit centres, and the embedder
    that looks texts up among them (embedding time is left out of every figure)."""

    name = "bench-precomputed"
    dimensions = DIM

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.vectors: dict[str, Vec[float]] = {}
        self.texts: dict[str, str] = {}
        """An entry's id token -> its text."""
        self.centres = [self.near([0.0] * DIM, math.sqrt(DIM)) for _ in range(CENTRES)]

    async def embed(self, texts: Sequence[str]) -> list[Vec[float]]:
        return [self.vectors.get(t) or self.pair(t) for t in texts]

    def pair(self, text: str) -> Vec[float]:
        """A turn and its neighbour, as the library embeds them together (the two texts
        joined): the sum of their vectors, normalised."""
        parts = [self.vectors[self.texts[w]] for w in text.split() if w in self.texts]
        total = [math.fsum(xs) for xs in zip(*parts, strict=True)]
        norm = math.sqrt(math.fsum(x * x for x in total))
        return array("f", [x / norm for x in total])

    def near(self, point: Sequence[float], noise: float) -> Vec[float]:
        """``point`` plus Gaussian noise of expected length ``noise``, normalised."""
        gauss, sigma = self.rng.gauss, noise / math.sqrt(DIM)
        moved = [x + gauss(0.0, sigma) for x in point]
        norm = math.sqrt(math.fsum(x * x for x in moved))
        return array("f", [x / norm for x in moved])

    def entries(self, prefix: str, start: int, count: int) -> tuple[list[Event], list[Vec[float]]]:
        """Events ``prefix<i>`` of 12 Zipf words and their id, and their vectors."""
        events, vectors = [], []
        for i in range(start, start + count):
            text = f"{' '.join(memory_words(self.rng, 12))} {prefix}{i}"
            centre = self.centres[self.rng.randrange(CENTRES)]
            vectors.append(vector := self.near(centre, ENTRY_NOISE))
            self.vectors[text], self.texts[f"{prefix}{i}"] = vector, text
            content = Content(parts=[Part(text=text)])
            events.append(Event(id=f"{prefix}{i}", timestamp=1_700_000_000 + i, content=content))
        return events, vectors

    def queries(self, mine: Sequence[Vec[float]], count: int) -> tuple[list[str], dict[str, str]]:
        """Queries of 1-4 Zipf words, each embedding to a perturbed entry of ``mine``; and
        the entry (id ``e<i>``) each query text was last made from."""
        texts, source = [], {}
        for _ in range(count):
            text = " ".join(memory_words(self.rng, self.rng.randint(1, 4)))
            i = self.rng.randrange(len(mine))
            self.vectors[text], source[text] = self.near(mine[i], QUERY_NOISE), f"e{i}"
            texts.append(text)
        return texts, source


async def ingest(memory: RedisMemoryService, user: str, events: Sequence[Event]) -> float:
    t0 = time.perf_counter()
    for i in range(0, len(events), 1000):
        await memory.add_events_to_memory(
            app_name=APP, user_id=user, events=events[i : i + 1000], session_id="s"
        )
    return len(events) / (time.perf_counter() - t0)


def _s(value: Any) -> Any:
    """A reply (RESP2 lists or RESP3 maps) with bytes decoded."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, dict):
        return {_s(k): _s(v) for k, v in value.items()}
    return [_s(v) for v in value] if isinstance(value, list) else value


def _fields(reply: Any) -> dict[str, Any]:
    reply = _s(reply)
    return reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2], strict=True))


def _docs(reply: Any) -> tuple[list[tuple[str, dict[str, Any]]], list[Any]]:
    """(key, returned fields) of each document, and the reply's warnings (RESP3 only)."""
    reply = _s(reply)
    if isinstance(reply, dict):
        docs = [(r["id"], _fields(r.get("extra_attributes", {}))) for r in reply["results"]]
        return docs, list(reply.get("warning", []))
    return [(key, _fields(f)) for key, f in zip(reply[1::2], reply[2::2], strict=True)], []


async def wait_indexed(client: Any, index: str, timeout: float = 1800.0) -> float:
    """Seconds until FT.INFO says ``index`` is done indexing (``indexing`` 0, 100 %)."""
    t0 = time.perf_counter()
    while True:
        info = _fields(await client.execute_command("FT.INFO", index))
        if int(info["indexing"]) == 0 and float(info["percent_indexed"]) >= 1.0:
            return time.perf_counter() - t0
        if time.perf_counter() - t0 > timeout:
            raise RuntimeError(f"{index} still indexing after {timeout:.0f}s: {info}")
        await asyncio.sleep(0.05)


def knn(index: str, scope: str, blob: bytes, ef: int | None, *extra: Any) -> tuple[Any, ...]:
    """The library's KNN query (``knn_command``, memory/_vectors.py), EF_RUNTIME where given."""
    ef_arg = "" if ef is None else f" EF_RUNTIME {ef}"
    return (
        "FT.SEARCH", index, f"({scope})=>[KNN {K} @vec $blob{ef_arg} AS dist]",
        "PARAMS", 2, "blob", blob, "RETURN", 3, "dist", "ts", "id",
        "SORTBY", "dist", "ASC", "LIMIT", 0, K, "DIALECT", 2, *extra,
    )  # fmt: skip


def _summary(lat: Sequence[float]) -> dict[str, float]:
    return {"p50_ms": timing.percentile(lat, 50), "p99_ms": timing.percentile(lat, 99)}


async def recall(
    client: Any, keys: KeySpace, flat: str, data: Synthetic, mine: Sequence[Vec[float]], n: int
) -> dict[str, Any]:
    """Recall@10 of the HNSW index's KNN (per EF_RUNTIME) against the FLAT index's; the FLAT
    query without a timeout (RediSearch's default policy returns partial results)."""
    app, user = await client.hmget(keys.memory_entry(APP, "me", "e0"), "app", "user")
    scope = f"@app:{{{_s(app)}}} @user:{{{_s(user)}}}"
    found = dict.fromkeys(EFS, 0.0)
    lat: dict[str, list[float]] = {label: [] for label in [*EFS, "FLAT (exact)"]}
    first, tenth, short, warnings = [], [], 0, set[str]()
    for _ in range(n):
        point = mine[data.rng.randrange(len(mine))]
        blob = struct.pack(f"<{DIM}f", *data.near(point, QUERY_NOISE))
        exact: set[str] = set()
        for label, index, ef, extra in [
            ("FLAT (exact)", flat, None, ("TIMEOUT", 0)),
            *((label, keys.memory_vector_index(), ef, ()) for label, ef in EFS.items()),
        ]:
            t = time.perf_counter()
            docs, warned = _docs(await client.execute_command(*knn(index, scope, blob, ef, *extra)))
            lat[label].append((time.perf_counter() - t) * 1000)
            warnings.update(map(str, warned))
            if index == flat:
                exact = {key for key, _ in docs}
                short += len(exact) < K
                first.append(1 - float(docs[0][1]["dist"]))
                tenth.append(1 - float(docs[-1][1]["dist"]))
            else:
                found[label] += len(exact & {key for key, _ in docs}) / K
    return {"queries": n, "recall_at_10": {label: hits / n for label, hits in found.items()},
            "knn_ms": {label: _summary(v) for label, v in lat.items()},
            "exact_similarity_mean": {"1st": sum(first) / n, "10th": sum(tenth) / n},
            "exact_results_short": short, "warnings": sorted(warnings)}  # fmt: skip


async def latency(
    hybrid: RedisMemoryService, keyword: RedisMemoryService, texts: Sequence[str], source: Any
) -> dict[str, Any]:
    """Hybrid and keyword-only ``search_memory`` of the same queries, in turn (the order
    alternating), after a warm-up; and how often hybrid returns the query's source entry."""
    services = {"hybrid": hybrid, "keyword": keyword}
    lat: dict[str, list[float]] = {name: [] for name in services}
    kept, by_vector, results = 0, 0, 0
    for text in texts[:10]:
        for svc in services.values():
            await svc.search_memory(app_name=APP, user_id="me", query=text)
    with timing.settled_gc():
        for i, text in enumerate(texts):
            for name in list(services)[:: 1 if i % 2 else -1]:
                t = time.perf_counter()
                found = await services[name].search_memory(app_name=APP, user_id="me", query=text)
                lat[name].append((time.perf_counter() - t) * 1000)
                if name == "hybrid":
                    kept += source[text] in [m.id for m in found.memories]
                    results += len(found.memories)
                    by_vector += sum(map(_by_vector, found.memories))
    out: dict[str, Any] = {name: _summary(v) for name, v in lat.items()}
    for n in (50, 99):
        out[f"ratio_p{n}"] = out["hybrid"][f"p{n}_ms"] / out["keyword"][f"p{n}_ms"]
    out["source_entry_returned"] = kept / len(texts)
    return out | {"results_by_vector_share": by_vector / max(1, results)}


def _by_vector(entry: Any) -> bool:
    return "vector" in (entry.custom_metadata or {}).get("redis_agent_sessions", {})["found_by"]


async def ingestion(client: Any, data: Synthetic, count: int) -> dict[str, Any]:
    """The same entries with vectors and keyword-only into two fresh prefixes, in turn; also
    the server's time (INFO commandstats) each spent."""
    events, _ = data.entries("i", 0, count)
    keys = {name: KeySpace(unique_prefix(f"sem-{name}")) for name in ("vectors", "keyword")}
    services = {name: RedisMemoryService(client, config=SessionServiceConfig(key_prefix=ks.prefix),
                backend="search", embedder=data if name == "vectors" else None)
                for name, ks in keys.items()}  # fmt: skip
    spent, server_us = dict.fromkeys(services, 0.0), dict.fromkeys(services, 0)
    for svc in services.values():
        await svc.backend()  # the indexes made before timing
    for b, start in enumerate(range(0, count, 1000)):
        for name in list(services)[:: 1 if b % 2 else -1]:
            before, t = await servers.command_stats(client), time.perf_counter()
            await ingest(services[name], "me", events[start : start + 1000])
            spent[name] += time.perf_counter() - t
            delta = servers.stats_delta(before, await servers.command_stats(client))
            server_us[name] += sum(us for cmd, (_, us) in delta.items() if cmd != "info")
    settle = await wait_indexed(client, keys["vectors"].memory_vector_index())
    for ks in keys.values():
        await client.execute_command("FT.DROPINDEX", ks.memory_index())
        await servers.delete_prefix(client, ks.prefix)
    await client.execute_command("FT.DROPINDEX", keys["vectors"].memory_vector_index())
    rate = {name: count / s for name, s in spent.items()}
    return {"entries": count, "per_s": rate, "ratio": rate["vectors"] / rate["keyword"],
            "server_ms_per_1000": {name: us / count for name, us in server_us.items()},
            "settle_s": settle}  # fmt: skip


async def run_search(url: str, sizes: dict[str, Any]) -> dict[str, Any]:
    client: Any = Redis.from_url(url)
    data = Synthetic(1)
    try:
        version = await servers.server_version(client)
        modules = map(_fields, _s(await client.execute_command("MODULE", "LIST")))
        config = {"search": next(m["ver"] for m in modules if m["name"] == "search")}
        for name in ("TIMEOUT", "ON_TIMEOUT", "WORKERS"):  # WORKERS None: not in this build
            got = _s(await client.execute_command("FT.CONFIG", "GET", name))
            config[name] = (got if isinstance(got, dict) else dict(map(tuple, got))).get(name)
        ingested = await ingestion(client, data, sizes["ingest"])
        progress(f"[search] ingestion: {ingested['per_s']} entries/s")
        keys = KeySpace(unique_prefix("sem"))
        cfg = SessionServiceConfig(key_prefix=keys.prefix)
        hybrid = RedisMemoryService(client, config=cfg, backend="search", embedder=data)
        for u in range(20):
            await ingest(hybrid, f"other{u}", data.entries(f"o{u}-", 0, sizes["others"])[0])
        events, mine = data.entries("e", 0, sizes["entries"])
        fill_rate = await ingest(hybrid, "me", events)
        fill_settle = await wait_indexed(client, keys.memory_vector_index())
        progress(f"[search] filled at {fill_rate:,.0f} entries/s; +{fill_settle:.1f}s indexing")
        flat, t0 = f"{keys.prefix}:mem:bench-flat", time.perf_counter()
        await client.execute_command(
            "FT.CREATE", flat, "ON", "HASH", "PREFIX", 1, keys.memory_index_prefix(),
            "SCHEMA", "app", "TAG", "user", "TAG",
            "vec", "VECTOR", "FLAT", 6, "TYPE", "FLOAT32", "DIM", DIM, "DISTANCE_METRIC", "COSINE",
        )  # fmt: skip
        flat_s = await wait_indexed(client, flat) + time.perf_counter() - t0
        indexes = {}
        for name, index in (("HNSW", keys.memory_vector_index()), ("FLAT", flat)):
            info = _fields(await client.execute_command("FT.INFO", index))
            indexes[name] = {k: info.get(k) for k in ("num_docs", "vector_index_sz_mb")}
        progress(f"[search] FLAT index built in {flat_s:.1f}s ({indexes}); recall")
        rec = await recall(client, keys, flat, data, mine, sizes["recall_queries"])
        texts, source = data.queries(mine, sizes["queries"])
        keyword = RedisMemoryService(client, config=cfg, backend="search")
        lat = await latency(hybrid, keyword, texts, source)
        progress(f"[search] hybrid {lat['hybrid']}  keyword {lat['keyword']}")
    finally:
        await client.aclose()
    return {"redis": version, "search_config": config, "indexes": indexes,
            "fill_per_s": fill_rate, "fill_settle_s": fill_settle, "flat_build_s": flat_s,
            "recall": rec, "latency": lat, "ingestion": ingested}  # fmt: skip


async def run_plain(url: str, sizes: dict[str, Any]) -> dict[str, Any]:
    client = Redis.from_url(url)
    data = Synthetic(2)
    try:
        version = await servers.server_version(client)
        cfg = SessionServiceConfig(key_prefix=unique_prefix("sem-plain"))
        hybrid = RedisMemoryService(client, config=cfg, backend="plain", embedder=data)
        keyword = RedisMemoryService(client, config=cfg, backend="plain")
        for u in range(20):
            await ingest(hybrid, f"other{u}", data.entries(f"o{u}-", 0, 100)[0])
        rows, mine = [], list[Any]()
        for size in sizes["plain_sizes"]:
            events, vectors = data.entries("e", len(mine), size - len(mine))
            rate = await ingest(hybrid, "me", events)
            mine += vectors
            texts, source = data.queries(mine, sizes["queries"])
            row = {"entries": size, "ingest_per_s": rate}
            rows.append(row | await latency(hybrid, keyword, texts, source))
            progress(f"[plain] {size:,}: hybrid {rows[-1]['hybrid']} keyword {rows[-1]['keyword']}")
    finally:
        await client.aclose()
    return {"redis": version, "rows": rows}


def verdict(value: float, target: float, *, at_least: bool = False) -> str:
    met = report.verdict(value, target, at_least=at_least)
    return f"{'>=' if at_least else '<='} {target:g}: {met}"


def render(result: dict[str, Any]) -> str:
    env, s, p = result["environment"], result["search"], result["plain"]
    rec, lat, ing = s["recall"], s["latency"], s["ingestion"]
    sim, h, k = rec["exact_similarity_mean"], lat["hybrid"], lat["keyword"]
    recall_table = report.Table(("KNN query", "recall@10", "p50 ms", "p99 ms", "target"))
    for label, t in rec["knn_ms"].items():
        value = rec["recall_at_10"].get(label, 1.0)
        aim = verdict(value, TARGETS["recall"], at_least=True) if label == "index default" else ""
        recall_table.add(label, f"{value:.3f}", f"{t['p50_ms']:.2f}", f"{t['p99_ms']:.2f}", aim)
    search_table = report.Table(("search_memory", "p50 ms", "p99 ms", "target p50", "target p99"))
    aims = [verdict(h[f"p{n}_ms"], TARGETS[f"p{n}_ms"]) for n in (50, 99)]
    search_table.add("hybrid (HNSW)", f"{h['p50_ms']:.2f}", f"{h['p99_ms']:.2f}", *aims)
    search_table.add("keyword only", f"{k['p50_ms']:.2f}", f"{k['p99_ms']:.2f}", "", "")
    search_table.add("hybrid/keyword", f"{lat['ratio_p50']:.2f}", f"{lat['ratio_p99']:.2f}", "", "")
    plain_table = report.Table(("entries", "hybrid p50", "p99", "keyword p50", "p99", "ratio p50"))
    for r in p["rows"]:
        cells = [f"{r[path][f'p{n}_ms']:.2f}" for path in ("hybrid", "keyword") for n in (50, 99)]
        plain_table.add(f"{r['entries']:,}", *cells, f"{r['ratio_p50']:.2f}")
    per_s, server = ing["per_s"], ing["server_ms_per_1000"]
    return "\n".join([
        *report.environment_lines("redis-agent-sessions semantic memory benchmark", env),
        f"data: {DIM}-dim vectors, {CENTRES} centres, entry / query noise {ENTRY_NOISE} / "
        f"{QUERY_NOISE} (seeded); whole run {result['elapsed_s']:.0f}s",
        f"[search] {s['search_config']}; user 'me': {env['entries']:,} entries next to 20 x "
        f"{env['others']} others' (HNSW filled at {s['fill_per_s']:,.0f} entries/s, "
        f"+{s['fill_settle_s']:.1f}s to settle; FLAT built in {s['flat_build_s']:.1f}s); "
        f"indexes {s['indexes']}",
        "",
        f"1. recall@10, HNSW KNN against FLAT (exact), {rec['queries']} queries; exact 1st / "
        f"10th neighbour similarity {sim['1st']:.3f} / {sim['10th']:.3f}; exact results short "
        f"of 10: {rec['exact_results_short']}; warnings: {rec['warnings'] or 'none'}",
        recall_table.render(),
        "",
        f"2. search_memory at {env['entries']:,} entries, {env['queries']} queries of 1-4 words, "
        f"embedding excluded; hybrid returned the query's source entry for "
        f"{lat['source_entry_returned']:.0%}, {lat['results_by_vector_share']:.0%} of its "
        "results found by vector",
        search_table.render(),
        "",
        f"3. ingestion of {ing['entries']:,} entries (batches of 1,000, in turn): with vectors "
        f"{per_s['vectors']:,.0f}/s, keyword only {per_s['keyword']:,.0f}/s, ratio "
        f"{ing['ratio']:.2f}; server time per 1,000 entries {server['vectors']:.0f} ms vs "
        f"{server['keyword']:.0f} ms; {ing['settle_s']:.1f}s of indexing left after",
        "",
        f"4. plain backend (Redis {p['redis']}), {env['queries']} queries per size",
        plain_table.render(),
    ])  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = report.parser(__doc__)
    report.add_flags(parser, quick="10,000 entries, fewer queries")
    args = parser.parse_args(argv)
    quick = args.quick
    sizes: dict[str, Any] = {
        "entries": 10_000 if quick else 100_000, "others": 100 if quick else 500,
        "recall_queries": 50 if quick else 200, "queries": 200 if quick else 500,
        "ingest": 5_000 if quick else 20_000, "plain_sizes": [1_000, 10_000],
    }  # fmt: skip
    t0 = time.perf_counter()
    with servers.redis8(search=True, name="sem-search") as node:
        search = asyncio.run(run_search(node.url, sizes))
    with servers.redis7(name="sem-plain") as node:
        plain = asyncio.run(run_plain(node.url, sizes))
    data = {"dimensions": DIM, "centres": CENTRES, "noise": [ENTRY_NOISE, QUERY_NOISE]}
    env = report.environment({"search": search["redis"], "plain": plain["redis"]}, **data)
    result = {"environment": env | sizes, "targets": TARGETS, "search": search, "plain": plain,
              "elapsed_s": time.perf_counter() - t0}  # fmt: skip
    report.emit(result, render, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
