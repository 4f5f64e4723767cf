"""Benchmark (not a test): several writers appending to ONE session under the reject policy.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.contention            # ~3 minutes
    .venv/bin/python -m benchmarks.contention --quick    # smoke run
    .venv/bin/python -m benchmarks.contention --json out.json
    .venv/bin/python -m benchmarks.contention --url redis://127.0.0.1:6379/0

For 2, 4 and 8 concurrent writers (asyncio tasks of one process, one client, as in a worker
serving several requests), each writer holds a session copy and appends realistic events
(text content, a state delta) for a fixed time. When an append raises StaleSessionError
the writer catches up and retries, at most 10 tries per event (then it gives up on that
event). Ways of catching up, each on a session that already holds ``--history`` events:

- ``reload``: ``get_session`` again (what a Runner-based worker does): reads the whole,
  growing history on every retry;
- ``reload+cache``: the same with the verified read cache on (``read_cache_bytes``), when the
  installed version has it;
- ``refresh``: ``refresh(session)``: reads only the events the copy lacks (on a single node,
  nothing: the refusal carried it);
- ``adk`` and ``adk+cache``: the way ADK's users retry (issue 26): on StaleSessionError a new
  ``get_session``, a new event (another id), append again, at most 20 tries; neither the
  session object nor the event of the retry is the one refused.

The baseline is the same writers appending to distinct sessions (no contention). The target:
same-session appends/s with ``refresh`` >= 50% of the distinct-session figure, no writer
giving up, nothing lost (every acknowledged event is stored, once, and the count of stored
events adds up). Each figure is a ratio of two measured in the same round of one run;
each mode runs once per round (``--rounds``), and the median of the rounds is reported.

Targets of the ``adk`` modes (issue 26): no append given up after 20 tries at 2, 4 and 8
writers, with the cache off and on; with the cache on, appends/s >= 50% of one writer alone.

Also measured: one writer alone appending back to back to one session. Under the reject
policy each append to a session must follow the one before it (a writer must have seen
it), so no number of writers can take a session faster than one writer alone: that rate,
as a share of the distinct-session figure, is the ceiling for the same-session ratio.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from redis.asyncio import Redis

from benchmarks.harness import report, servers
from benchmarks.harness.timing import median_of
from benchmarks.harness.workloads import make_event
from redis_agent_sessions import (
    RedisSessionService,
    Session,
    SessionServiceConfig,
    StaleSessionError,
)

APP = "contention_app"
WRITERS = (2, 4, 8)
MAX_TRIES = 10
ADK_TRIES = 20
TARGET_SHARE = 0.5
TARGET_ADK_VS_ALONE = 0.5


@dataclass
class Run:
    mode: str
    writers: int
    seconds: float
    appended: int
    stale: int
    gave_up: int
    per_second: float
    lost: int
    round: int = 0


async def _writer(
    service: RedisSessionService,
    session: Session,
    mode: str,
    deadline: float,
    acked: list[str],
    counts: dict[str, int],
) -> None:
    turn = len(session.events)
    invocation = str(uuid.uuid4())
    adk_style = mode == "adk"
    while time.perf_counter() < deadline:
        for attempt in range(ADK_TRIES if adk_style else MAX_TRIES):
            if attempt == 0 or adk_style:  # ADK-style: a new event (new id) every try
                event = make_event(turn, invocation)
            try:
                await service.append_event(session, event)
            except StaleSessionError:
                counts["stale"] += 1
                if mode == "refresh":
                    await service.refresh(session)
                else:
                    fresh = await service.get_session(
                        app_name=APP, user_id=session.user_id, session_id=session.id
                    )
                    assert fresh is not None
                    session = fresh
                continue
            acked.append(event.id)
            break
        else:
            counts["gave_up"] += 1
        turn += 1


async def _history(service: RedisSessionService, user: str, events: int) -> Session:
    session = await service.create_session(app_name=APP, user_id=user, state={"turn": 0})
    invocation = str(uuid.uuid4())
    for turn in range(events):
        await service.append_event(session, make_event(turn, invocation))
    return session


async def run_case(
    client: Redis, prefix: str, mode: str, writers: int, seconds: float, history: int
) -> Run:
    cache = mode.endswith("+cache")
    fields: dict[str, Any] = {"key_prefix": f"{prefix}-{mode}-{writers}".replace("+", "-")}
    if cache:
        fields["read_cache_bytes"] = 256 << 20
    service = RedisSessionService(client, config=SessionServiceConfig(**fields))
    distinct = mode == "distinct"
    sessions = [
        await _history(service, f"user-{i}", history) for i in range(writers if distinct else 1)
    ]
    copies = []
    for i in range(writers):
        base = sessions[i if distinct else 0]
        copy = await service.get_session(app_name=APP, user_id=base.user_id, session_id=base.id)
        assert copy is not None
        copies.append(copy)
    acked: list[str] = []
    counts = {"stale": 0, "gave_up": 0}
    started = time.perf_counter()
    deadline = started + seconds
    catch_up = "refresh" if mode in ("refresh", "distinct") else "reload"
    if mode.startswith("adk"):
        catch_up = "adk"
    await asyncio.gather(*(_writer(service, c, catch_up, deadline, acked, counts) for c in copies))
    elapsed = time.perf_counter() - started
    lost = 0
    stored_ids: list[str] = []
    for s in sessions:
        got = await service.get_session(app_name=APP, user_id=s.user_id, session_id=s.id)
        assert got is not None
        stored_ids += [e.id for e in got.events[history:]]
    if sorted(stored_ids) != sorted(acked) or len(set(stored_ids)) != len(stored_ids):
        lost = len(set(acked) - set(stored_ids)) or abs(len(stored_ids) - len(acked))
    return Run(
        mode,
        writers,
        round(elapsed, 2),
        len(acked),
        counts["stale"],
        counts["gave_up"],
        round(len(acked) / elapsed, 1),
        lost,
    )


def has_cache() -> bool:
    return "read_cache_bytes" in SessionServiceConfig.model_fields


async def bench(url: str, seconds: float, history: int, rounds: int) -> dict[str, Any]:
    """Per writer count, ``rounds`` rounds of every mode (one writer alone first), so that
    the machine's drift, which moves figures by tens of percent within minutes here, hits
    all modes of a round alike; ratios are taken within a round."""
    client = Redis.from_url(url)
    prefix = f"ras-contention-{uuid.uuid4().hex[:8]}"
    modes = [
        "distinct",
        "reload",
        *(["reload+cache"] if has_cache() else []),
        "refresh",
        "adk",
        "adk+cache",
    ]
    runs: list[Run] = []
    try:
        env = await report.server_environment(
            client,
            seconds_per_run=seconds,
            rounds=rounds,
            history=history,
        )
        for writers in WRITERS:
            for round_ in range(rounds):
                for mode in ["alone", *modes]:
                    alone = mode == "alone"
                    run = await run_case(
                        client,
                        prefix,
                        "distinct" if alone else mode,
                        1 if alone else writers,
                        seconds,
                        history,
                    )
                    run = replace(run, mode=mode, writers=writers, round=round_)
                    runs.append(run)
                    print(f"  round {round_ + 1} {mode:>13} x{writers}: {run.per_second:8.1f} "
                          f"appends/s, {run.stale} stale, {run.gave_up} gave up, {run.lost} lost",
                          file=sys.stderr)  # fmt: skip
    finally:
        await servers.delete_prefix(client, prefix)
        await client.aclose()
    return {"environment": env, "runs": [asdict(r) for r in runs], "ratios": ratios(runs)}


def ratios(runs: list[Run]) -> dict[str, dict[str, list[float]]]:
    """Per writer count and mode: the median over rounds of the same-session appends/s /
    distinct sessions of the same round, then the lowest and highest of the rounds.
    ``alone`` is the ceiling (one writer alone / distinct); ``refresh/alone`` the share of
    that ceiling the writers reach."""
    out: dict[str, dict[str, list[float]]] = {}
    for writers in sorted({r.writers for r in runs}):
        per_mode: dict[str, list[float]] = {}
        for round_ in sorted({r.round for r in runs if r.writers == writers}):
            of_round = {r.mode: r for r in runs if r.writers == writers and r.round == round_}
            base = of_round["distinct"].per_second
            for mode, run in of_round.items():
                if mode != "distinct":
                    per_mode.setdefault(mode, []).append(run.per_second / base)
            per_mode.setdefault("refresh/alone", []).append(
                of_round["refresh"].per_second / of_round["alone"].per_second
            )
            for mode in ("adk", "adk+cache"):
                if mode in of_round:
                    per_mode.setdefault(f"{mode}/alone", []).append(
                        of_round[mode].per_second / of_round["alone"].per_second
                    )
        out[str(writers)] = {
            mode: [round(median_of(xs), 3), round(min(xs), 3), round(max(xs), 3)]
            for mode, xs in per_mode.items()
        }
    return out


def _failures(
    result: dict[str, Any], writers: str, mode: str
) -> tuple[list[dict[str, Any]], int, int]:
    """The runs of ``mode`` with ``writers`` writers, and the appends they gave up and lost."""
    runs = [r for r in result["runs"] if r["writers"] == int(writers) and r["mode"] == mode]
    return runs, sum(r["gave_up"] for r in runs), sum(r["lost"] for r in runs)


def render(result: dict[str, Any]) -> str:
    env = result["environment"]
    history, rounds, seconds = env["history"], env["rounds"], env["seconds_per_run"]
    out = [
        *report.environment_lines("redis-agent-sessions contention benchmark", env),
        "",
        f"Same session vs distinct sessions, {history} events of history, {rounds} rounds "
        f"of {seconds:.0f} s per mode (appends/s ratio, median of the rounds (lowest-highest); "
        f"target refresh >= {TARGET_SHARE:.0%}; alone = one writer alone, the ceiling):",
    ]
    for writers, by_mode in result["ratios"].items():
        line = ", ".join(
            f"{mode} {mid:.0%} ({low:.0%}-{high:.0%})" for mode, (mid, low, high) in by_mode.items()
        )
        ok = by_mode["refresh"][0] >= TARGET_SHARE
        _, gave_up, lost = _failures(result, writers, "refresh")
        verdict = "met" if ok and not gave_up and not lost else "MISSED"
        out.append(f"  {writers} writers: {line} -> {verdict} (gave up {gave_up}, lost {lost})")
    out.append(
        f"ADK-style retries (new get_session, new event, <= {ADK_TRIES} tries): given up / lost "
        f"(target none), adk+cache appends/s vs one writer alone (target >= "
        f"{TARGET_ADK_VS_ALONE:.0%}):"
    )
    for writers, by_mode in result["ratios"].items():
        cells = []
        for mode in ("adk", "adk+cache"):
            runs, gave_up, lost = _failures(result, writers, mode)
            rate = median_of([r["per_second"] for r in runs]) if runs else 0.0
            cells.append(f"{mode} {rate:.0f}/s gave up {gave_up} lost {lost}")
            if gave_up or lost:
                cells[-1] += " MISSED"
        share = by_mode.get("adk+cache/alone", [0.0, 0.0, 0.0])
        verdict = report.verdict(share[0], TARGET_ADK_VS_ALONE, at_least=True)
        cells.append(f"adk+cache/alone {share[0]:.0%} ({share[1]:.0%}-{share[2]:.0%}) {verdict}")
        out.append(f"  {writers} writers: " + "; ".join(cells))
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = report.parser(__doc__)
    report.add_flags(parser, url=True, quick="short runs (smoke test)")
    parser.add_argument("--history", type=int, default=None, help="events already stored")
    parser.add_argument("--rounds", type=int, default=None, help="rounds of every mode")
    args = parser.parse_args(argv)
    seconds = 1.0 if args.quick else 2.0
    rounds = args.rounds or (1 if args.quick else 3)
    history = args.history if args.history is not None else (200 if args.quick else 1000)
    with servers.redis_url(args.url) as (url, _owned):
        result = asyncio.run(bench(url, seconds, history, rounds))
    report.emit(result, render, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
