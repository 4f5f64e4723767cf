"""The 3.11 run of .ci/run in shards (``RAS_SHARD=k/n``, applied in conftest.py): each shard
runs on its own servers, side by side, so one shard's waits (TTLs, quiet sockets, processes
starting) overlap another's work on the other core. A module stays whole in one shard (its
module-scoped servers and fixtures are made once); modules are dealt, heaviest first, to the
shard with the least so far.

WEIGHTS are the seconds each module took in one whole run (``pytest --junitxml=run.xml``,
then ``python tests/_shards.py run.xml`` prints the table anew). A module missing here
weighs one second: it still runs, in the shard dealt it. Only their ratios count: the table
now is CI's two shards of 2026-11-28 (a loaded machine), scaled to the total of the one
before, with test_adk_parity and test_expiry, sped up after it, scaled by their CPU times.

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
    "test_adk_compacted_reads": 55,
    "test_adk_facts": 2,
    "test_adk_facts_background": 1,
    "test_adk_memory": 9,
    "test_adk_memory_tools": 1,
    "test_adk_memory_upstream": 10,
    "test_adk_parity": 49,
    "test_adk_rewind_compaction": 48,
    "test_adk_runner": 42,
    "test_adk_servers": 12,
    "test_app_sweep": 18,
    "test_architecture": 1,
    "test_bad_input": 14,
    "test_cli": 99,
    "test_cli_facts": 23,
    "test_cli_facts_jobs": 18,
    "test_cli_migrate": 28,
    "test_cli_output": 61,
    "test_cli_prefixes": 15,
    "test_cli_reembed": 3,
    "test_cli_tail_restart": 7,
    "test_cli_tail_tmux": 10,
    "test_cli_terminal": 15,
    "test_cluster": 8,
    "test_cluster_failover": 14,
    "test_cluster_kill": 18,
    "test_concurrency": 7,
    "test_contention": 12,
    "test_demo": 53,
    "test_docs_examples": 1,
    "test_docs_reference": 1,
    "test_embedders_google": 4,
    "test_environments": 4,
    "test_event_stream": 14,
    "test_expiry": 76,
    "test_facts_background": 26,
    "test_facts_background_chaos": 9,
    "test_facts_options": 13,
    "test_facts_processes": 14,
    "test_hostile_input": 12,
    "test_hostile_urls": 9,
    "test_import_hostile": 78,
    "test_keys_and_state": 3,
    "test_layout_spec": 1,
    "test_layout_vectors": 3,
    "test_layout_version": 1,
    "test_lost_connections": 1,
    "test_lua_calls": 1,
    "test_managed": 28,
    "test_mcp": 22,
    "test_memory": 52,
    "test_memory_candidates": 12,
    "test_memory_context": 3,
    "test_memory_facts": 14,
    "test_memory_filters": 3,
    "test_memory_limits": 65,
    "test_memory_pressure": 21,
    "test_memory_reindex": 3,
    "test_memory_text": 1,
    "test_mixed_language": 17,
    "test_model_based": 3,
    "test_models": 1,
    "test_newcomer": 31,
    "test_operations": 6,
    "test_prebuilt": 1,
    "test_read_cache": 21,
    "test_readiness": 10,
    "test_refresh": 6,
    "test_semantic_memory": 11,
    "test_session_pages": 3,
    "test_sessions": 10,
    "test_telemetry": 3,
    "test_tenants": 5,
    "test_tls": 5,
    "test_trusted_decode": 16,
    "test_tutorial": 9,
    "test_typescript": 6,
    "test_uri": 1,
    "test_watch_default_clients": 30,
    "test_watch_processes": 8,
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
    for case in ET.parse(sys.argv[1]).iter("testcase"):
        seconds[case.get("classname", "").rsplit(".", 1)[-1]] += float(case.get("time", 0))
    for module, took in sorted(seconds.items()):
        print(f'    "{module}": {max(1, round(took))},')
