"""The 3.11 run of .ci/run in shards (``RAS_SHARD=k/n``, applied in conftest.py): each shard
runs on its own servers, side by side, so one shard's waits (TTLs, quiet sockets, processes
starting) overlap another's work on the other core. A module stays whole in one shard (its
module-scoped servers and fixtures are made once); modules are dealt, heaviest first, to the
shard with the least so far.

WEIGHTS are the seconds each module took in one whole run (``pytest --junitxml=run.xml``,
then ``python tests/_shards.py run.xml [more.xml ...]`` prints the table anew). A module
missing here weighs one second: it still runs, in the shard dealt it. Only their ratios
count: the modules outside WAITING weigh what they took in the two ``rest`` shards of
2026-11-29, run side by side on a quiet machine after the CLI and helper processes were
forked with their imports frozen; those in WAITING (which ``rest`` never deals) keep the
weights of CI's run of 2026-11-28.

WAITING are the modules whose tests mostly wait (TTLs running out, quiets longer than a
socket timeout, failovers, lock and lease timeouts): in one clean CI run they took 276 s
and about 62 CPU-seconds. ``RAS_SHARD=waiting`` runs only them and ``RAS_SHARD=rest:k/n``
deals the others, so .ci/run gives the waits a run of their own, beside the two shards
that keep both cores busy, instead of leaving a core idle while a shard waits."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter

__all__ = ["WAITING", "WEIGHTS", "parse_shard", "selected", "shard_of"]

WEIGHTS = {
    "test_acl": 14,
    "test_adk_compacted_reads": 30,
    "test_adk_facts": 1,
    "test_adk_facts_background": 1,
    "test_adk_memory": 2,
    "test_adk_memory_tools": 1,
    "test_adk_memory_upstream": 2,
    "test_adk_parity": 12,
    "test_adk_rewind_compaction": 7,
    "test_adk_runner": 8,
    "test_adk_servers": 8,
    "test_app_sweep": 18,
    "test_architecture": 1,
    "test_bad_input": 6,
    "test_cli": 19,
    "test_cli_facts": 5,
    "test_cli_facts_jobs": 10,
    "test_cli_migrate": 7,
    "test_cli_output": 9,
    "test_cli_prefixes": 2,
    "test_cli_reembed": 1,
    "test_cli_tail_restart": 8,
    "test_cli_tail_tmux": 2,
    "test_cli_terminal": 4,
    "test_cluster": 4,
    "test_cluster_failover": 14,
    "test_cluster_kill": 18,
    "test_concurrency": 5,
    "test_contention": 12,
    "test_demo": 18,
    "test_docs_examples": 1,
    "test_docs_reference": 1,
    "test_embedders_google": 2,
    "test_environments": 2,
    "test_event_stream": 9,
    "test_expiry": 76,
    "test_facts_background": 26,
    "test_facts_background_chaos": 5,
    "test_facts_options": 7,
    "test_facts_processes": 7,
    "test_hostile_input": 6,
    "test_hostile_urls": 2,
    "test_import_hostile": 10,
    "test_keys_and_state": 1,
    "test_layout_spec": 1,
    "test_layout_vectors": 2,
    "test_layout_version": 1,
    "test_lost_connections": 1,
    "test_lua_calls": 1,
    "test_managed": 28,
    "test_mcp": 12,
    "test_memory": 28,
    "test_memory_batches": 4,
    "test_memory_candidates": 6,
    "test_memory_context": 1,
    "test_memory_facts": 10,
    "test_memory_filters": 2,
    "test_memory_limits": 34,
    "test_memory_pressure": 12,
    "test_memory_reindex": 1,
    "test_memory_text": 1,
    "test_mixed_language": 8,
    "test_model_based": 2,
    "test_models": 1,
    "test_newcomer": 17,
    "test_operations": 4,
    "test_prebuilt": 1,
    "test_read_cache": 5,
    "test_readiness": 5,
    "test_refresh": 4,
    "test_semantic_memory": 6,
    "test_session_pages": 2,
    "test_sessions": 6,
    "test_telemetry": 1,
    "test_tenants": 2,
    "test_tls": 2,
    "test_trusted_decode": 13,
    "test_tutorial": 3,
    "test_typescript": 4,
    "test_uri": 1,
    "test_watch_default_clients": 30,
    "test_watch_processes": 11,
    "test_watch_quiet": 10,
    "test_write_concern": 3,
}


WAITING = frozenset(
    {
        "test_acl",
        "test_app_sweep",
        "test_cluster_failover",
        "test_cluster_kill",
        "test_contention",
        "test_expiry",
        "test_facts_background",
        "test_managed",
        "test_watch_default_clients",
        "test_watch_quiet",
    }
)


def parse_shard(value: str) -> tuple[int, int]:
    """``k/n`` as (k, n), 1 <= k <= n; else ValueError naming what is expected."""
    k, _, n = value.partition("/")
    if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise ValueError(f"RAS_SHARD must be k/n, rest:k/n or waiting, with 1 <= k <= n: {value!r}")
    return int(k), int(n)


def selected(modules: set[str], value: str) -> set[str]:
    """The modules ``RAS_SHARD=value`` runs: ``k/n`` the k-th of n shards of them all,
    ``rest:k/n`` the k-th of n shards of those not in WAITING, ``waiting`` those in it."""
    if value == "waiting":
        return modules & WAITING
    rest = value.startswith("rest:")
    k, n = parse_shard(value.removeprefix("rest:"))
    dealt = shard_of(modules - WAITING if rest else modules, n)
    return {module for module, shard in dealt.items() if shard == k}


def shard_of(modules: set[str], count: int) -> dict[str, int]:
    """Each module's shard (1..count): heaviest first, to the least loaded shard, ties by
    name, so every shard of one run deals alike."""
    load = [0] * count
    dealt: dict[str, int] = {}
    for module in sorted(modules, key=lambda m: (-WEIGHTS.get(m, 1), m)):
        lightest = min(range(count), key=lambda i: (load[i], i))
        load[lightest] += WEIGHTS.get(module, 1)
        dealt[module] = lightest + 1
    return dealt


if __name__ == "__main__":
    seconds: Counter[str] = Counter()
    for path in sys.argv[1:]:
        for case in ET.parse(path).iter("testcase"):
            seconds[case.get("classname", "").rsplit(".", 1)[-1]] += float(case.get("time", 0))
    for module, took in sorted(seconds.items()):
        print(f'    "{module}": {max(1, round(took))},')
