"""Tenants: apps that share one Redis, each with a Redis user limited to its own keys
(docs/security.md#tenants). An operator, with an admin connection, provisions an app
(``provision_tenant``: its search indexes, its registry entry, the user's ACL rules),
checks a tenant's user as an attacker would (``check_tenant``) and removes an app
(``drop_tenant``); ``redis-agent-sessions tenant`` runs the same steps."""

from __future__ import annotations

from redis_agent_sessions.tenants._check import TenantProbe, check_tenant
from redis_agent_sessions.tenants._provision import (
    TenantReport,
    drop_tenant,
    provision_tenant,
    tenant_config,
)
from redis_agent_sessions.tenants._rules import acl_setuser_lines, tenant_acl_rules

__all__ = [
    "TenantProbe",
    "TenantReport",
    "acl_setuser_lines",
    "check_tenant",
    "drop_tenant",
    "provision_tenant",
    "tenant_acl_rules",
    "tenant_config",
]
