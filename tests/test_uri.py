"""Settings in a Redis URL, and ADK's service registry building our services from one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from _servers import skip_without
from redis_agent_sessions import (
    InvalidInputError,
    RedisMemoryService,
    RedisSessionService,
    SessionServiceConfig,
)
from redis_agent_sessions._redis.uri import parse_service_url


def test_settings_come_out_of_the_query_and_redis_py_keeps_its_own() -> None:
    parsed = parse_service_url(
        "redis://:pw@host:6380/2?key_prefix=prod&ttl_seconds=86400&socket_timeout=2"
        "&stale_policy=merge&cluster=false&memory_backend=plain"
    )
    assert parsed.redis_url == "redis://:pw@host:6380/2?socket_timeout=2"
    assert parsed.settings == {
        "key_prefix": "prod",
        "ttl_seconds": 86400,
        "stale_policy": "merge",
        "cluster": False,
    }
    assert parsed.memory_backend == "plain"
    assert parsed.config(None) == SessionServiceConfig(
        key_prefix="prod", ttl_seconds=86400, stale_policy="merge", cluster=False
    )
    assert parse_service_url("unix:///tmp/redis.sock?db=3").redis_url == (
        "unix:///tmp/redis.sock?db=3"
    )


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://h/0?bogus=1", "unknown URL parameter 'bogus'.*key_prefix.*socket_timeout"),
        ("redis://h/0?ttl=60", "unknown URL parameter 'ttl'"),
        ("http://h/0", "scheme must be one of redis, rediss, unix"),
        ("postgresql://u:secret@h/db", r"postgresql://u:\*\*\*@h/db"),
        ("redis://h/0?ttl_seconds=-5", "ttl_seconds: Input should be greater than 0"),
        ("redis://h/0?stale_policy=maybe", "stale_policy"),
        ("redis://h/0?cluster=perhaps", "cluster must be true or false"),
        ("redis://h/0?key_prefix=a&key_prefix=b", "'key_prefix' is given twice"),
        ("redis://h/0?memory_backend=elastic", "memory_backend must be auto, search or plain"),
        ("redis://h/0?key_prefix={x}", "key_prefix"),
    ],
)
def test_bad_urls_are_refused_with_the_reason(url: str, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        RedisSessionService.from_url(url)
    with pytest.raises(InvalidInputError, match=message):
        RedisMemoryService.from_url(url)


def test_the_url_and_a_config_must_agree() -> None:
    same = SessionServiceConfig(key_prefix="p")
    assert RedisSessionService.from_url("redis://h/0?key_prefix=p", config=same).config is same
    with pytest.raises(InvalidInputError, match="sets key_prefix differently"):
        RedisSessionService.from_url("redis://h/0?key_prefix=q", config=same)
    with pytest.raises(InvalidInputError, match="memory_backend=plain but backend='search'"):
        RedisMemoryService.from_url("redis://h/0?memory_backend=plain", backend="search")


async def test_a_service_from_a_url_with_settings_works_and_closes_its_client() -> None:
    url = skip_without("REDIS_URL")
    joiner = "&" if "?" in url else "?"
    async with RedisSessionService.from_url(f"{url}{joiner}key_prefix=urltest&ttl_seconds=90") as s:
        assert s.config.key_prefix == "urltest"
        created = await s.create_session(app_name="a", user_id="u", session_id="x")
        assert await s._client.ttl("urltest:{a:u}:session:x") > 80
        await s.delete_session(app_name="a", user_id="u", session_id=created.id)
    async with RedisMemoryService.from_url(f"{url}{joiner}memory_backend=plain") as memory:
        assert await memory.backend() == "plain"
        await memory._client.delete("ras:mem:backend")


@pytest.mark.adk
def test_register_makes_adk_build_our_services_from_redis_uris() -> None:
    from google.adk.cli.service_registry import ServiceRegistry

    from redis_agent_sessions import adk

    registry = ServiceRegistry()
    adk.register(registry)
    for scheme in ("redis", "rediss", "unix"):
        uri = f"{scheme}://h/0?key_prefix=viaadk" if scheme != "unix" else "unix:///s?db=0"
        session = registry.create_session_service(uri, agents_dir="/agents")
        memory = registry.create_memory_service(uri, agents_dir="/agents")
        assert isinstance(session, adk.RedisSessionService)
        assert isinstance(memory, adk.RedisMemoryService)
        assert session._owns_client
        assert memory._owns_client
    assert session.config.key_prefix == "ras"
    built = registry.create_session_service("redis://h/0?key_prefix=p&ttl_seconds=5")
    assert isinstance(built, adk.RedisSessionService)
    assert built.config == SessionServiceConfig(key_prefix="p", ttl_seconds=5)
    with pytest.raises(InvalidInputError, match="unknown URL parameter 'prefix'"):
        registry.create_session_service("redis://h/0?prefix=p")
    with pytest.raises(InvalidInputError, match="a client or a uri"):
        adk.RedisSessionService()


@pytest.mark.adk
def test_a_services_yaml_in_the_agents_dir_is_the_one_file_recipe(tmp_path: Path) -> None:
    from google.adk.cli.service_registry import get_service_registry, load_services_module

    from redis_agent_sessions import adk

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    yaml_text = readme.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert "redis_agent_sessions.adk.RedisSessionService" in yaml_text
    (tmp_path / "services.yaml").write_text(yaml_text)
    load_services_module(str(tmp_path))
    registry = get_service_registry()
    built: Any = registry.create_session_service(
        "redis://h/0?key_prefix=yaml", agents_dir=str(tmp_path)
    )
    assert isinstance(built, adk.RedisSessionService)
    assert built.config.key_prefix == "yaml"
    memory: Any = registry.create_memory_service(
        "redis://h/0?memory_backend=plain", agents_dir=str(tmp_path)
    )
    assert isinstance(memory, adk.RedisMemoryService)
    assert memory._memory._backend == "plain"
