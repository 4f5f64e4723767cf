"""The cluster benchmark's tables and implications, and its result as JSON."""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from benchmarks.cluster import (
    APP,
    CPU_TASKS,
    CPU_USERS,
    GET_SESSION_EVENTS,
    KIND_LABELS,
    KINDS,
    RAW_LABELS,
    RAW_OPS,
    RECENT,
    TARGET_APPEND,
    TARGET_GET,
    TARGET_LABELS,
    TARGETS,
    Plan,
)
from benchmarks.cluster.cpu import CpuRun
from benchmarks.cluster.latency import Latency
from benchmarks.harness import report
from benchmarks.harness.report import Table, sign, us
from benchmarks.harness.timing import median_of, percentile


def latency_report(lat: Latency) -> list[str]:
    out: list[str] = []
    table = Table(("latency, one client, sequential", "n", "p50 us", "p99 us", "mean us"))
    for op in RAW_OPS:
        table.add(*report.latency_cells(RAW_LABELS[op], vars(lat.raw[op])))
    for kind in KINDS:
        for target in TARGETS:
            name = f"append_event, {KIND_LABELS[kind]}: {TARGET_LABELS[target]}"
            table.add(*report.latency_cells(name, vars(lat.appends[target, kind])))
    for mode, label in (("full", "full"), ("recent", f"last {RECENT}")):
        for target in TARGETS:
            name = f"get_session {GET_SESSION_EVENTS} events, {label}: {TARGET_LABELS[target]}"
            table.add(*report.latency_cells(name, vars(lat.gets[target, mode])))
    out += [table.render(), ""]

    work = Table(("server work per append (INFO commandstats)", "EVALSHAs", "script us"))
    inside = ["commands the scripts ran, per append"]
    for kind in KINDS:
        for target in TARGETS:
            n = lat.work_appends[target, kind]
            stats = lat.work[target, kind]
            evalsha = stats.get("evalsha", [0, 0])
            inner = sorted(
                ((c, v) for c, v in stats.items() if c != "evalsha"), key=lambda cv: -cv[1][0]
            )
            work.add(
                f"{KIND_LABELS[kind]}: {TARGET_LABELS[target]}",
                f"{evalsha[0] / n:.1f}",
                us(evalsha[1] / n),
            )
            inside.append(", ".join(f"{c} {v[0] / n:.1f}" for c, v in inner))
    rendered = [
        f"{line}   {more}" for line, more in zip(work.render().splitlines(), inside, strict=True)
    ]
    out += [*rendered, ""]

    header = ("p50 ratios, cluster / 1 node (same run)", "1 node us", "cluster us", "ratio")
    ratios = Table((*header, "per-round IQR", "target", "verdict"))

    def spread(series: str) -> str:
        values = lat.round_ratios[series]
        if len(values) < 2:
            return "-"
        q1, q3 = percentile(values, 25), percentile(values, 75)
        return f"{q1:.2f}-{q3:.2f}"

    for kind in KINDS:
        one, many = lat.appends["single", kind].p50_us, lat.appends["cluster", kind].p50_us
        goal = TARGET_APPEND[kind]
        ratio = many / one
        ratios.add(
            f"append_event, {KIND_LABELS[kind]}",
            us(one),
            us(many),
            f"{ratio:.2f}x",
            spread(f"append {kind}"),
            f"<= {goal}x",
            report.verdict(ratio, goal),
        )
    for mode, label in (("full", "full"), ("recent", f"last {RECENT}")):
        one, many = lat.gets["single", mode].p50_us, lat.gets["cluster", mode].p50_us
        ratio = many / one
        ratios.add(
            f"get_session {GET_SESSION_EVENTS} events, {label}",
            us(one),
            us(many),
            f"{ratio:.2f}x",
            spread(f"get {mode}"),
            f"<= {TARGET_GET}x",
            report.verdict(ratio, TARGET_GET),
        )
    out += [ratios.render(), ""]

    raw = {op: lat.raw[op].p50_us for op in RAW_OPS}
    series = {
        **{f"append {kind}": {t: lat.appends[t, kind].p50_us for t in TARGETS} for kind in KINDS},
        "get full": {t: lat.gets[t, "full"].p50_us for t in TARGETS},
        f"get last {RECENT}": {t: lat.gets[t, "recent"].p50_us for t in TARGETS},
    }
    split = Table(("where the cluster's extra time goes (p50 us)", *series))
    for name, first, second in (
        ("1 node, Redis client", "single", None),
        ("+ cluster layout (same node, same Redis client)", "layout", "single"),
        ("+ RedisCluster client, 3 nodes (vs layout on 1 node)", "cluster", "layout"),
        ("= cluster, RedisCluster client", "cluster", None),
    ):
        split.add(
            name,
            *(
                us(v[first]) if second is None else sign(v[first] - v[second])
                for v in series.values()
            ),
        )
    split.add(
        "append minus its client's raw EVALSHA: 1 node",
        *(us(series[f"append {k}"]["single"] - raw["single"]) for k in KINDS),
        "",
        "",
    )
    split.add(
        "append minus its client's raw EVALSHA: cluster",
        *(us(series[f"append {k}"]["cluster"] - raw["cluster"]) for k in KINDS),
        "",
        "",
    )
    out += [
        split.render(),
        f"Per call, raw p50: EVALSHA on 1 node {us(raw['single'])} us; on the cluster "
        f"{us(raw['cluster'])} us routed = {us(raw['cluster-node'])} us on the key's ClusterNode "
        f"+ {us(raw['cluster'] - raw['cluster-node'])} us RedisCluster.execute_command "
        "(slot from the keys, command policy lookup, metrics hooks, retry wrapper); node vs "
        f"1 node {sign(raw['cluster-node'] - raw['single'])} us. Pipeline HGETALL+HGET (what "
        f"the cluster layout's get_session adds, run alongside its script): 1 node "
        f"{us(raw['pipe-single'])} us, RedisCluster {us(raw['pipe-cluster'])} us. "
        "An app: append on the cluster makes two EVALSHAs (user slot, then app slot).",
        "",
    ]
    return out


def cpu_report(
    runs: list[CpuRun],
    idle: dict[tuple[str, int], float],
    nodes: dict[str, list[tuple[str, int]]],
    app_node: tuple[str, int],
    plan: Plan,
) -> list[str]:
    groups: dict[tuple[int, str, str], list[CpuRun]] = defaultdict(list)
    for run in runs:
        groups[run.processes, run.kind, run.target].append(run)

    def med(values: Sequence[float]) -> float:
        return median_of(values)

    shards = nodes["cluster"]
    names = {n: f"shard {i + 1}{'*' if n == app_node else ''}" for i, n in enumerate(shards)}
    header = ("throughput and CPU (median of runs)", "appends/s", "x 1 node", "server us")
    table = Table((*header, "in scripts", "other", "client us", "EVALSHAs"))

    def cpu_cells(group: list[CpuRun], node_list: Sequence[tuple[str, int]]) -> list[str]:
        server = sum(med([r.server_us[n] for r in group]) for n in node_list)
        script = sum(med([r.script_us[n] for r in group]) for n in node_list)
        return [us(server), us(script), us(server - script)]

    for k in plan.cpu_processes:
        for kind in plan.cpu_kinds:
            one = groups[k, kind, "single"]
            many = groups[k, kind, "cluster"]
            one_rate = med([r.per_second for r in one])
            many_rate = med([r.per_second for r in many])
            table.add(
                f"K={k}, {KIND_LABELS[kind]}: 1 node",
                f"{one_rate:,.0f}",
                "",
                *cpu_cells(one, nodes["single"]),
                us(med([r.client_us for r in one])),
                "",
            )
            table.add(
                f"K={k}, {KIND_LABELS[kind]}: cluster, all shards",
                f"{many_rate:,.0f}",
                f"{many_rate / one_rate:.2f}",
                *cpu_cells(many, shards),
                us(med([r.client_us for r in many])),
                "",
            )
            for n in shards:
                share = med([r.evalsha_share[n] for r in many])
                table.add(
                    f"    {names[n]} ({n[0]}:{n[1]})",
                    "",
                    "",
                    *cpu_cells(many, [n]),
                    "",
                    f"{share:.0%}",
                )
    runs_per = plan.cpu_rounds
    out = [
        table.render(),
        f"N={plan.cpu_appends:,} appends per run over {CPU_USERS} users, K client processes x "
        f"{CPU_TASKS} asyncio tasks, each case run {runs_per}x alternating 1 node / cluster. "
        "All CPU figures are us per append. server: INFO cpu (used_cpu_sys + used_cpu_user) "
        "delta / N, less the node's idle CPU over the run (idle: 1 node "
        f"{idle_text(idle, nodes['single'])}, shards {idle_text(idle, shards)} us/s); in "
        "scripts: INFO commandstats EVALSHA usec / N (wall time inside the scripts: it grows "
        "when the server is preempted, so on a busy machine it can overstate); other: the rest "
        "(reading, parsing and answering commands, event loop, cluster bus). client: the K "
        "processes' CPU time / N. EVALSHAs: the shard's share of them. * = the shard holding "
        f"the app's slot ({{{APP}}}: app state, app_apply.lua).",
        "",
        implication(groups, shards, app_node, plan),
    ]
    return out


def idle_text(idle: dict[tuple[str, int], float], nodes: Sequence[tuple[str, int]]) -> str:
    return "/".join(f"{idle.get(n, 0.0) * 1e6:,.0f}" for n in nodes)


def implication(
    groups: dict[tuple[int, str, str], list[CpuRun]],
    shards: list[tuple[str, int]],
    app_node: tuple[str, int],
    plan: Plan,
) -> str:
    k = max(plan.cpu_processes)
    lines = [f"What this implies for a real 3-machine cluster (K={k} figures):"]
    for kind in plan.cpu_kinds:
        one_runs, many_runs = groups[k, kind, "single"], groups[k, kind, "cluster"]
        one = median_of([sum(r.server_us.values()) for r in one_runs])
        one_script = median_of([sum(r.script_us.values()) for r in one_runs])
        shard = {n: median_of([r.server_us[n] for r in many_runs]) for n in shards}
        script = sum(median_of([r.script_us[n] for r in many_runs]) for n in shards)
        busiest = max(shard, key=lambda n: shard[n])
        total = sum(shard.values())
        client = median_of([r.client_us for r in many_runs])
        owner = " (the app's shard)" if kind == "app" and busiest == app_node else ""
        lines.append(
            f"- {KIND_LABELS[kind]}: 1 node uses {us(one)} us of server CPU per append, a "
            f"ceiling of ~{1e6 / one:,.0f} appends/s for its one main thread. The busiest shard"
            f"{owner} uses "
            f"{us(shard[busiest])} us, so with a machine per shard the servers top out at "
            f"~{1e6 / shard[busiest]:,.0f} appends/s ({one / shard[busiest]:.1f}x 1 node). "
            f"All shards together use {us(total)} us ({total / one:.2f}x 1 node): script time "
            f"{us(script)} vs {us(one_script)} us, the rest is per-command network and event-"
            "loop work, which a shard amortizes less when it gets a third of the commands from "
            f"the same clients. Clients use ~{us(client)} us of CPU per append (RedisCluster): "
            f"~{client / shard[busiest]:.0f} client cores per shard-sized ceiling."
        )
    lines.append(
        f"This machine has {os.cpu_count()} core(s) for all {len(shards)} shards, the single node "
        "and the client processes (and whatever else runs here), so appends/s measures this "
        "machine, not cluster scaling; CPU per append per shard is what carries over. Every "
        "app: write also runs app_apply.lua on the app's shard, so a workload heavy in app: "
        "writes is bounded by that one shard, however many shards there are."
    )
    return "\n".join(lines)


def latency_json(lat: Latency) -> dict[str, Any]:
    def flat(d: dict[Any, Any]) -> dict[str, Any]:
        return {(k if isinstance(k, str) else " ".join(k)): v for k, v in d.items()}

    return {
        "appends": flat({k: vars(v) for k, v in lat.appends.items()}),
        "raw": {k: vars(v) for k, v in lat.raw.items()},
        "gets": flat({k: vars(v) for k, v in lat.gets.items()}),
        "work": flat({k: dict(v) for k, v in lat.work.items()}),
        "work_appends": flat(lat.work_appends),
        "round_ratios": dict(lat.round_ratios),
    }


def cpu_run_json(run: CpuRun) -> dict[str, Any]:
    def by_node(d: dict[tuple[str, int], float]) -> dict[str, float]:
        return {f"{h}:{p}": v for (h, p), v in d.items()}

    return {
        "processes": run.processes,
        "kind": run.kind,
        "target": run.target,
        "appends": run.appends,
        "seconds": run.seconds,
        "per_second": run.per_second,
        "server_us": by_node(run.server_us),
        "evalsha_share": by_node(run.evalsha_share),
        "script_us": by_node(run.script_us),
        "client_us": run.client_us,
    }
