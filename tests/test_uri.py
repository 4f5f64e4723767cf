"""Settings in a Redis URL, and ADK's service registry building our services from one."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster

from _servers import skip_without
from redis_agent_sessions import (
    Event,
    EventActions,
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
    assert parsed.redis_url == "redis://:pw@host:6380/2"
    assert parsed.redis_params == {"socket_timeout": "2"}
    assert parsed.client_kwargs(False) == {"socket_timeout": 2.0}
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
    unix = parse_service_url("unix:///tmp/redis.sock?db=3")
    assert (unix.redis_url, unix.client_kwargs(False)) == ("unix:///tmp/redis.sock", {"db": 3})


def connection_kwargs(service: Any) -> dict[str, Any]:
    kwargs: dict[str, Any] = service._client.connection_pool.connection_kwargs
    return kwargs


def test_every_connection_parameter_redis_py_takes_reaches_the_connection_typed(
    tmp_path: Path,
) -> None:
    # The TLS parameters a private CA needs, which a hand-kept list once lacked. The files
    # must exist: a missing one is refused when the client is made.
    files = {name: tmp_path / name for name in ("ca.crt", "c.crt", "c.key")}
    for path in files.values():
        path.write_text("not read before the first connection")
    url = (
        f"rediss://h:6380/1?ssl_ca_certs={files['ca.crt']}&ssl_certfile={files['c.crt']}"
        f"&ssl_keyfile={files['c.key']}"
        "&ssl_cert_reqs=required&ssl_check_hostname=false&socket_timeout=2.5"
        "&health_check_interval=3&retry_on_timeout=yes&client_name=w1&key_prefix=p"
    )
    service = RedisSessionService.from_url(url)
    kwargs = connection_kwargs(service)
    assert {k: kwargs[k] for k in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")} == {
        "ssl_ca_certs": str(files["ca.crt"]),
        "ssl_certfile": str(files["c.crt"]),
        "ssl_keyfile": str(files["c.key"]),
    }
    assert kwargs["ssl_check_hostname"] is False
    assert kwargs["retry_on_timeout"] is True
    assert (kwargs["socket_timeout"], kwargs["health_check_interval"]) == (2.5, 3)
    assert (kwargs["client_name"], kwargs["db"], service.config.key_prefix) == ("w1", 1, "p")
    # an empty value is no value, as redis-py reads it
    assert "ssl_ca_certs" not in connection_kwargs(
        RedisSessionService.from_url("rediss://h?ssl_ca_certs=")
    )
    cluster = parse_service_url("redis://h?read_from_replicas=true&cluster=true")
    assert cluster.client_kwargs(True) == {"read_from_replicas": True}


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("rediss://h/0?ssl_ca_cert=/x", "unknown URL parameter 'ssl_ca_cert'.*ssl_ca_certs"),
        ("redis://h/0?ssl_ca_certs=/x", "'ssl_ca_certs' is not one redis-py takes for redis://"),
        ("redis://h/0?socket_timeout=abc", "bad value for URL parameter socket_timeout: 'abc'"),
        ("rediss://h/0?ssl_check_hostname=maybe", "ssl_check_hostname: 'maybe'"),
        ("redis://h/0?db=x", "bad value for URL parameter db"),
        ("redis://h/0?retry=3", "unknown URL parameter 'retry'"),
        ("redis://h/0?read_from_replicas=true", "not one redis-py takes for redis://"),
        ("redis://h/0?socket_timeout=1&socket_timeout=2", "'socket_timeout' is given twice"),
    ],
)
def test_redis_py_parameters_it_does_not_take_are_refused(url: str, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        RedisSessionService.from_url(url)


def test_a_parameter_in_the_url_and_as_an_argument_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="socket_timeout given both in the URL"):
        RedisSessionService.from_url("redis://h/0?socket_timeout=1", socket_timeout=2)
    assert (
        connection_kwargs(RedisSessionService.from_url("redis://h/0", socket_timeout=2))[
            "socket_timeout"
        ]
        == 2
    )


def test_a_cluster_config_makes_a_cluster_client() -> None:
    # The cluster layout with a single-node client would meet MOVED replies it cannot follow.
    config = SessionServiceConfig(cluster=True)
    for service in (
        RedisSessionService.from_url("redis://h:7000", config=config),
        RedisSessionService.from_url("redis://h:7000?cluster=true"),
        RedisSessionService.from_url("redis://h:7000", cluster=True),
        RedisMemoryService.from_url("redis://h:7000", config=config),
    ):
        assert isinstance(service._client, RedisCluster)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://h/0?bogus=1", "unknown URL parameter 'bogus'.*key_prefix"),
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


def test_an_unknown_parameter_lists_the_settings_and_points_to_the_docs() -> None:
    # redis-py's ~60 constructor parameters, internals among them, would bury the settings.
    with pytest.raises(InvalidInputError) as raised:
        parse_service_url("redis://h/0?bogus=1")
    message = str(raised.value)
    for setting in ("key_prefix", "ttl_seconds", "cluster", "memory_backend", "embedder"):
        assert setting in message
    assert "docs/settings.md#connection-urls" in message
    for internal in ("maintenance_notification_hash", "orig_host_address", "socket_timeout"):
        assert internal not in message
    # A near miss is named, whoever's it is.
    for typo, meant in (("ssl_ca_cert", "ssl_ca_certs"), ("ttl_second", "ttl_seconds")):
        with pytest.raises(InvalidInputError, match=re.escape(f"did you mean {meant}?")):
            parse_service_url(f"rediss://h/0?{typo}=1")
    # One for another kind of URL says which, without the list either.
    with pytest.raises(InvalidInputError) as other:
        RedisSessionService.from_url("redis://h/0?ssl_ca_certs=/x")
    assert "rediss://" in str(other.value)
    assert "orig_host_address" not in str(other.value)
    assert "docs/settings.md#connection-urls" in str(other.value)


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
    # The extra's read cache is on unless the URL says otherwise.
    assert built.config == SessionServiceConfig(
        key_prefix="p", ttl_seconds=5, read_cache_bytes=128 << 20
    )
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
    assert memory._memory.ctx.wanted == "plain"


async def test_a_cluster_config_with_from_url_writes_on_a_real_cluster() -> None:
    url = skip_without("REDIS_CLUSTER_URL")
    config = SessionServiceConfig(cluster=True, key_prefix="urlcluster")
    async with RedisSessionService.from_url(url, config=config) as service:
        # users on many slots, and an app: write, which takes the second step
        for n in range(8):
            session = await service.create_session(app_name="a", user_id=f"u{n}")
            delta = {"k": n, "user:k": n, "app:k": n}
            await service.append_event(
                session, Event(author="a", actions=EventActions(state_delta=delta))
            )
            await service.delete_session(app_name="a", user_id=f"u{n}", session_id=session.id)
        assert await service.get_app_state(app_name="a") == {"k": 7}


def test_semantic_memory_settings_by_url() -> None:
    from _embedders import SynonymEmbedder

    memory = RedisMemoryService.from_url(
        "redis://h/0?embedder=import:_embedders:SynonymEmbedder&vector_index=flat"
        "&min_similarity=0.25&memory_backend=plain"
    )
    assert isinstance(memory.embedder, SynonymEmbedder)
    semantic = memory._memory.semantic
    assert semantic is not None
    assert (semantic.index, semantic.min_similarity) == ("FLAT", 0.25)
    # The session service takes the same URL and leaves the memory's settings alone.
    RedisSessionService.from_url("redis://h/0?embedder=import:_embedders:SynonymEmbedder")
    same = "redis://h/0?embedder=import:_embedders:SynonymEmbedder&embedder_dimensions=512"
    assert RedisMemoryService.from_url(same).embedder is not None
    for url, message in [
        ("redis://h/0?embedder=openai:x", "must be 'google:<model>' or 'import:"),
        ("redis://h/0?embedder=import:no_such_module:x", "cannot be imported"),
        ("redis://h/0?embedder=import:_embedders:SYNONYMS", "async 'embed"),
        (f"{same[:-3]}256", "512-dimensional vectors, not embedder_dimensions=256"),
        (f"{same[:-3]}abc", "embedder_dimensions must be an int"),
        ("redis://h/0?embedder_dimensions=5", "needs embedder= in the URL"),
        ("redis://h/0?vector_index=FLAT", "need an embedder"),
        (f"{same}&min_similarity=high", "min_similarity must be a number"),
        (f"{same}&vector_index=IVF", "vector_index must be"),
        (f"{same}&embedder=import:_embedders:SynonymEmbedder", "given twice"),
    ]:
        with pytest.raises(InvalidInputError, match=re.escape(message)):
            RedisMemoryService.from_url(url)
    with pytest.raises(InvalidInputError, match="give it in one place"):
        RedisMemoryService.from_url(same, embedder=SynonymEmbedder())
    with pytest.raises(InvalidInputError, match="give it in one place"):
        RedisMemoryService.from_url(f"{same}&vector_index=FLAT", vector_index="SVS-VAMANA")


@pytest.mark.adk
def test_adk_servers_get_google_embeddings_from_the_memory_uri() -> None:
    from google.adk.cli.service_registry import ServiceRegistry

    from redis_agent_sessions import GoogleEmbedder, adk

    registry = ServiceRegistry()
    adk.register(registry)
    memory: Any = registry.create_memory_service(
        "redis://h/0?embedder=google:text-embedding-005", agents_dir="/agents"
    )
    assert isinstance(memory.embedder, GoogleEmbedder)
    assert memory.embedder.name == "google:text-embedding-005:768"
    sized: Any = registry.create_memory_service(
        "redis://h/0?embedder=google:gemini-embedding-001&embedder_dimensions=768"
    )
    assert sized.embedder.dimensions == 768


async def test_an_embedder_made_from_the_url_is_closed_with_the_service() -> None:
    from _embedders import ClosableEmbedder

    made = RedisMemoryService.from_url("redis://h/0?embedder=import:_embedders:ClosableEmbedder")
    await made.aclose()
    assert made.embedder.closed  # type: ignore[union-attr]
    passed = ClosableEmbedder()
    async with RedisMemoryService.from_url("redis://h/0", embedder=passed):
        pass
    assert not passed.closed  # its owner's to close


@pytest.mark.adk
async def test_the_adk_memory_service_closes_the_embedder_its_uri_made() -> None:
    pytest.importorskip("google.adk")
    from redis_agent_sessions import adk

    made = adk.RedisMemoryService(uri="redis://h/0?embedder=import:_embedders:ClosableEmbedder")
    await made.close()
    assert made.embedder.closed  # type: ignore[union-attr]
