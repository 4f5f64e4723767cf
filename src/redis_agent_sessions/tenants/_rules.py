"""The ACL rules of Redis users, as docs/security.md shows them (a test holds the page to
these lists): a worker's, and a tenant's (one app's keys, and no command that can reach
another app's, see ``tenant_acl_rules``)."""

from __future__ import annotations

from redis_agent_sessions.keys import KeySpace

__all__ = [
    "BACKGROUND_COMMANDS",
    "CLUSTER_COMMANDS",
    "FACTS_COMMANDS",
    "SEARCH_READ_COMMANDS",
    "WORKER_COMMANDS",
    "WORKER_SEARCH_COMMANDS",
    "acl_setuser_lines",
    "tenant_acl_rules",
]

WORKER_COMMANDS = (
    "+evalsha", "+script|load", "+multi", "+exec", "+select",
    "+hgetall", "+hget", "+hmget", "+hset", "+hdel", "+hincrby",
    "+xadd", "+xrange", "+xrevrange", "+xtrim", "+xread",
    "+zadd", "+zrem", "+zrange", "+zrevrange", "+zscore", "+zcard",
    "+sadd", "+srem", "+sismember", "+smembers", "+sdiff",
    "+get", "+set", "+type", "+exists", "+del", "+expire",
)  # fmt: skip
"""Sessions and the plain memory backend (the least-privilege line)."""

SEARCH_READ_COMMANDS = ("+module|list", "+ft.info", "+ft.search")
"""The search backend's queries: what a tenant gets for it."""

WORKER_SEARCH_COMMANDS = (*SEARCH_READ_COMMANDS, "+ft.create")
"""A worker of a whole prefix also makes the shared (or per-user) indexes."""

FACTS_COMMANDS = ("+lpush", "+ltrim", "+lrange")
"""Learned facts: each fact's history is a list."""

BACKGROUND_COMMANDS = (
    "+xreadgroup", "+xack", "+xdel", "+xclaim", "+xautoclaim", "+xpending", "+xlen",
    "+xgroup|create", "+xgroup|delconsumer",
)  # fmt: skip
"""Background generation's workers: the job streams' consumer group (an app's queue is in
its own key space, so a tenant runs its own workers)."""

CLUSTER_COMMANDS = ("+cluster|slots", "+command")
"""redis-py's cluster client learns the topology and the commands' keys."""


def tenant_acl_rules(
    keys: KeySpace, app_name: str, *, search: bool, cluster: bool, facts: bool = True
) -> list[str]:
    """The rules (after ``reset``, ``on`` and a password) of a Redis user limited to one
    app: the worker's commands, the search backend's queries but no command that makes,
    alters, drops or aliases an index (creating one can name any key prefix, and the search
    module checks key patterns against the index name only: an operator makes the app's
    indexes, ``redis-agent-sessions tenant create``), and the app's key rules
    (``KeySpace.app_acl_keys``), no channels."""
    rules = ["resetchannels", "-@all", *WORKER_COMMANDS]
    rules += SEARCH_READ_COMMANDS if search else ()
    rules += (*FACTS_COMMANDS, *BACKGROUND_COMMANDS) if facts else ()
    rules += CLUSTER_COMMANDS if cluster else ()
    return [*rules, "resetkeys", *keys.app_acl_keys(app_name)]


def acl_setuser_lines(user: str, rules: list[str], *, width: int = 78) -> list[str]:
    """``ACL SETUSER`` lines, as redis-cli takes them, that together give ``user`` exactly
    ``rules`` (``reset`` and ``on`` first: each line adds to the ones before it); a
    password rule (``>...``) is the caller's to add."""
    lines: list[str] = []
    line = f"ACL SETUSER {user} reset on"
    for rule in rules:
        if rule == "resetkeys" or len(line) + 1 + len(rule) > width:
            lines.append(line)
            line = f"ACL SETUSER {user}"
        line += f" {_quoted(rule)}"
    return [*lines, line]


def _quoted(rule: str) -> str:
    # redis-cli splits on spaces and reads quotes and backslashes: a rule with any of them
    # (an app name of the key rules) is quoted.
    if any(c in rule for c in " \"'\\"):
        return '"' + rule.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return rule
