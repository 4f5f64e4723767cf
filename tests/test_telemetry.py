"""OpenTelemetry (``SessionServiceConfig.telemetry``): spans, the duration histogram and the
counters, read back with the SDK's in-memory exporters; and nothing at all when it is off."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
from typing import Any

import fakeredis
import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoPermissionError

from _servers import skip_without
from _slots import SlotCheckedRedis, cluster_layout
from redis_agent_sessions import (
    CallableGenerator,
    Content,
    Event,
    EventActions,
    FactJobs,
    FactSettings,
    FactWorker,
    GenerationRequest,
    InvalidInputError,
    MemoryEntry,
    MemoryOperation,
    Part,
    RedisMemoryService,
    RedisSessionService,
    Session,
    SessionServiceConfig,
    StaleSessionError,
    WriteConcernError,
)

NS = "redis_agent_sessions."
ON = SessionServiceConfig(telemetry=True)


class Exported:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.reader = InMemoryMetricReader()

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def points(self, name: str) -> list[Any]:
        """The data points of metric ``name`` (cumulative since the process started)."""
        data = self.reader.get_metrics_data()
        found = []
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        found += list(metric.data.data_points)
        return found

    def total(self, name: str, **attributes: str) -> int:
        wanted = {NS + k: v for k, v in attributes.items()}
        return sum(
            int(p.value)
            for p in self.points(NS + name)
            if wanted.items() <= dict(p.attributes).items()
        )


_PROVIDERS: Exported | None = None


@pytest.fixture
def exported() -> Exported:
    """The SDK as an application would set it up, once per process (OpenTelemetry's global
    providers can be set only once), with in-memory exporters cleared for each test."""
    global _PROVIDERS
    if _PROVIDERS is None:
        _PROVIDERS = Exported()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(_PROVIDERS.spans))
        trace.set_tracer_provider(tracer_provider)
        metrics.set_meter_provider(MeterProvider(metric_readers=[_PROVIDERS.reader]))
    _PROVIDERS.spans.clear()
    return _PROVIDERS


def client() -> Any:
    return fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())


def delta(**values: Any) -> Event:
    return Event(author="a", actions=EventActions(state_delta=values))


async def test_each_public_call_is_one_client_span_by_the_database_conventions(
    exported: Exported,
) -> None:
    service = RedisSessionService(client(), config=ON)
    session = await service.create_session(app_name="shop", user_id="alice", session_id="s1")
    await service.append_event(session, delta(k=1))
    await service.get_session(app_name="shop", user_id="alice", session_id="s1")
    await service.list_sessions(app_name="shop", user_id="alice")
    await service.get_app_state(app_name="shop")
    spans = exported.finished()
    assert [s.name for s in spans] == [
        "create_session",
        "append_event",
        "get_session",
        "list_sessions",
        "get_app_state",
    ]
    for span in spans:
        assert span.kind == SpanKind.CLIENT
        assert span.status.status_code == StatusCode.UNSET
        attributes = dict(span.attributes or {})
        assert attributes["db.system.name"] == "redis"
        assert attributes["db.operation.name"] == span.name
        assert attributes["db.namespace"] == "0"
        assert attributes[NS + "app_name"] == "shop"
        assert NS + "user_id" not in attributes  # personal data: only when opted in
        assert NS + "server.name" not in attributes  # fakeredis has no INFO: none, no error
        assert span.instrumentation_scope is not None
        assert span.instrumentation_scope.name == "redis_agent_sessions"
    # The session id is ADK's conversation id, wherever the call names it.
    assert [dict(s.attributes or {}).get("gen_ai.conversation.id") for s in spans] == [
        "s1",
        "s1",
        "s1",
        None,
        None,
    ]


async def test_user_ids_are_recorded_only_when_the_operator_opts_in(exported: Exported) -> None:
    config = SessionServiceConfig(telemetry=True, telemetry_user_ids=True)
    service = RedisSessionService(client(), config=config)
    session = await service.create_session(app_name="shop", user_id="alice")
    await service.append_event(session=session, event=delta(k=1))  # as ADK's Runner calls it
    assert [dict(s.attributes or {})[NS + "user_id"] for s in exported.finished()] == [
        "alice",
        "alice",
    ]


async def test_spans_are_children_of_the_callers_span(exported: Exported) -> None:
    service = RedisSessionService(client(), config=ON)
    tracer = trace.get_tracer("an agent")
    with tracer.start_as_current_span("invocation") as parent:
        session = await service.create_session(app_name="shop", user_id="alice")
        await service.append_event(session, delta(k=1))
    ours = [s for s in exported.finished() if s.name != "invocation"]
    assert len(ours) == 2
    for span in ours:
        assert span.parent is not None
        assert span.parent.span_id == parent.get_span_context().span_id
        assert span.context is not None
        assert span.context.trace_id == parent.get_span_context().trace_id


class TracedClient(fakeredis.FakeAsyncRedis):
    """A client instrumented as an application might instrument redis-py: a span per
    command, started in whatever context is current."""

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        with trace.get_tracer("a redis instrumentation").start_as_current_span(str(args[0])):
            return await super().execute_command(*args, **options)


async def test_spans_inside_a_call_are_its_children_and_the_callers_span_is_current_after(
    exported: Exported,
) -> None:
    service = RedisSessionService(TracedClient(server=fakeredis.FakeServer()), config=ON)
    tracer = trace.get_tracer("an agent")
    with tracer.start_as_current_span("invocation") as parent:
        session = await service.create_session(app_name="shop", user_id="alice")
        exported.spans.clear()
        await service.append_event(session, delta(k=1))
        assert trace.get_current_span() is parent
    spans = exported.finished()
    (ours,) = [s for s in spans if s.name == "append_event"]
    inside = [s for s in spans if s.instrumentation_scope.name == "a redis instrumentation"]
    assert inside, "the append sent no command through the client"
    assert ours.context is not None
    for span in inside:
        assert span.parent is not None
        assert span.parent.span_id == ours.context.span_id


async def test_a_failed_call_is_an_error_span_and_an_error_measurement(
    exported: Exported,
) -> None:
    service = RedisSessionService(client(), config=ON)
    before = sum(
        p.count
        for p in exported.points("db.client.operation.duration")
        if dict(p.attributes).get("error.type") == "redis_agent_sessions.errors.InvalidInputError"
    )
    with pytest.raises(InvalidInputError):
        await service.get_session(app_name="", user_id="u", session_id="s")
    [span] = exported.finished()
    assert span.status.status_code == StatusCode.ERROR
    assert "InvalidInputError" in (span.status.description or "")
    attributes = dict(span.attributes or {})
    assert attributes["error.type"] == "redis_agent_sessions.errors.InvalidInputError"
    assert [e.name for e in span.events] == ["exception"]
    after = sum(
        p.count
        for p in exported.points("db.client.operation.duration")
        if dict(p.attributes).get("error.type") == "redis_agent_sessions.errors.InvalidInputError"
        and dict(p.attributes).get("db.operation.name") == "get_session"
    )
    assert after == before + 1


async def test_the_duration_histogram_times_each_operation(exported: Exported) -> None:
    def count(operation: str) -> int:
        return sum(
            p.count
            for p in exported.points("db.client.operation.duration")
            if dict(p.attributes).get("db.operation.name") == operation
            and "error.type" not in dict(p.attributes)
        )

    service = RedisSessionService(client(), config=ON)
    before = count("append_event")
    session = await service.create_session(app_name="shop", user_id="alice")
    for i in range(3):
        await service.append_event(session, delta(i=i))
    assert count("append_event") == before + 3
    # One series per operation and endpoint, in seconds: metrics stay low-cardinality.
    for point in exported.points("db.client.operation.duration"):
        attributes = dict(point.attributes)
        assert set(attributes) <= {
            "db.system.name",
            "db.operation.name",
            "db.namespace",
            "server.address",
            "server.port",
            "error.type",
            NS + "server.name",
            NS + "server.version",
        }, attributes
        assert 0 < point.sum / point.count < 5


async def test_the_counters_only_this_library_sees(exported: Exported) -> None:
    shared = client()
    reject = RedisSessionService(shared, config=ON)
    session = await reject.create_session(app_name="shop", user_id="alice", session_id="s")
    stale = await reject.get_session(app_name="shop", user_id="alice", session_id="s")
    assert stale is not None
    await reject.append_event(session, delta(k=1))
    refusals = exported.total("stale_refusals")
    with pytest.raises(StaleSessionError):
        await reject.append_event(stale, delta(k=2))
    assert exported.total("stale_refusals") == refusals + 1

    merges = exported.total("merges")
    merge = RedisSessionService(
        shared, config=SessionServiceConfig(telemetry=True, stale_policy="merge")
    )
    await merge.append_event(stale, delta(k=3))
    assert exported.total("merges") == merges + 1

    cached = RedisSessionService(
        shared, config=SessionServiceConfig(telemetry=True, read_cache_bytes=1 << 20)
    )
    hits, misses = exported.total("read_cache.hits"), exported.total("read_cache.misses")
    for _ in range(3):
        await cached.get_session(app_name="shop", user_id="alice", session_id="s")
    assert (exported.total("read_cache.hits"), exported.total("read_cache.misses")) == (
        hits + 2,
        misses + 1,
    )


@pytest.mark.adk
async def test_full_reads_forced_by_a_compaction_reason_are_counted(exported: Exported) -> None:
    from google.adk.events import Event as AdkEvent

    from redis_agent_sessions.adk import CompactedReads
    from redis_agent_sessions.adk import RedisSessionService as AdkService

    service = AdkService(client=client(), config=ON)
    session = await service.create_session(app_name="shop", user_id="alice", session_id="s")
    now = time.time()
    await service.append_event(session, AdkEvent(author="user", timestamp=now))
    await service.append_event(session, AdkEvent(author="user", timestamp=now - 60))  # clock
    before = exported.total("compaction.full_reads", reason="clock")
    read = await service.get_session(
        app_name="shop", user_id="alice", session_id="s", config=CompactedReads(compaction=None)
    )
    assert read is not None
    assert len(read.events) == 2
    assert exported.total("compaction.full_reads", reason="clock") == before + 1
    names = [s.name for s in exported.finished()]
    assert names == ["create_session", "append_event", "append_event", "get_session"]


@pytest.mark.real
async def test_spans_name_the_server_and_write_concern_shortfalls_are_counted(
    exported: Exported,
) -> None:
    url = skip_without("REDIS_URL")
    skip_without("REDIS_REPLICA_URL")
    config = SessionServiceConfig(
        telemetry=True, write_concern="replicas", min_replicas=2, write_timeout_ms=50
    )
    async with RedisSessionService.from_url(url, config=config) as service:
        shortfalls = exported.total("write_concern.shortfalls")
        with pytest.raises(WriteConcernError):
            await service.create_session(app_name="shop", user_id="alice")
        assert exported.total("write_concern.shortfalls") == shortfalls + 1
    [span] = exported.finished()
    attributes = dict(span.attributes or {})
    host, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
    assert (attributes["server.address"], attributes["server.port"]) == (host, int(port))
    assert attributes["error.type"] == "redis_agent_sessions.errors.WriteConcernError"


async def test_the_memory_service_traces_its_calls(exported: Exported) -> None:
    memory = RedisMemoryService(client(), config=ON, backend="plain")
    entry = MemoryEntry(content=Content(parts=[Part(text="likes trains")]))
    await memory.add_memory(app_name="shop", user_id="alice", memories=[entry])
    found = await memory.search_memory(app_name="shop", user_id="alice", query="trains")
    assert len(found.memories) == 1
    spans = exported.finished()
    assert [s.name for s in spans] == ["add_memory", "search_memory"]
    assert all(dict(s.attributes or {})[NS + "app_name"] == "shop" for s in spans)


async def test_the_generation_has_a_span_of_its_own(exported: Exported) -> None:
    """Learned facts: the model's time is a child span of add_session_to_memory, whose own
    span also holds the Redis work; each generation is counted by its outcome."""

    async def slow_model(request: GenerationRequest) -> list[MemoryOperation]:
        await asyncio.sleep(0.01)
        return [MemoryOperation(action="add", fact="The user likes trains.")]

    memory = RedisMemoryService(client(), config=ON, generator=CallableGenerator(slow_model))
    before = exported.total("facts.generations", outcome="applied")
    event = Event(author="user", content=Content(parts=[Part(text="I like trains")]))
    await memory.add_session_to_memory(
        Session(id="s1", app_name="shop", user_id="alice", events=[event])
    )
    generate, add = exported.finished()
    assert (generate.name, add.name) == ("generate_memories", "add_session_to_memory")
    assert generate.kind == SpanKind.INTERNAL
    assert generate.parent is not None
    assert generate.parent.span_id == add.context.span_id
    assert dict(generate.attributes or {}) == {
        NS + "generator": "callable",
        NS + "generator.events": 1,
        NS + "generator.facts_shown": 0,
        NS + "generator.operations": 1,
    }
    # The model's time is inside the operation's, and the Redis work is outside the model's.
    assert add.start_time <= generate.start_time <= generate.end_time <= add.end_time
    assert exported.total("facts.generations", outcome="applied") == before + 1


async def test_a_background_jobs_span_links_to_the_trace_that_queued_it(
    exported: Exported,
) -> None:
    """Background generation: the worker's job is a trace of its own (kind CONSUMER), linked
    to the span of the request that queued it; the model's span is inside it; the job's
    outcome is counted and its wait measured."""

    async def model(request: GenerationRequest) -> list[MemoryOperation]:
        return [MemoryOperation(action="add", fact="The user likes trains.")]

    redis = client()
    sessions = RedisSessionService(redis)
    facts = FactSettings(mode="background")
    memory = RedisMemoryService(redis, config=ON, generator=CallableGenerator(model), facts=facts)
    session = await sessions.create_session(app_name="shop", user_id="alice")
    await sessions.append_event(
        session, Event(author="user", content=Content(parts=[Part(text="I like trains")]))
    )
    before = exported.total("facts.jobs", outcome="done")
    with trace.get_tracer("test").start_as_current_span("agent turn") as turn:
        await memory.add_session_to_memory(session)
    async with FactWorker(memory, poll_interval=0.01):
        await memory.wait_for_generation(
            app_name="shop", user_id="alice", session_id=session.id, timeout=30
        )
    spans = {s.name: s for s in exported.finished()}
    job, generate = spans["facts_job"], spans["generate_memories"]
    assert job.kind == SpanKind.CONSUMER
    assert job.parent is None  # a trace of its own
    [link] = job.links
    assert link.context.trace_id == turn.get_span_context().trace_id
    assert link.context.span_id == spans["add_session_to_memory"].context.span_id
    assert generate.parent is not None
    assert generate.parent.span_id == job.context.span_id
    assert dict(job.attributes or {})[NS + "job.kind"] == "s"
    assert exported.total("facts.jobs", outcome="done") == before + 1
    assert sum(p.count for p in exported.points(NS + "facts.job.lag")) >= 1


async def test_a_worker_exports_its_apps_backlog_and_oldest_wait_as_gauges(
    exported: Exported,
) -> None:
    """``facts.jobs.backlog`` (by app, shard and state) and ``facts.jobs.oldest_age`` (by
    app and shard) are what the worker last read of its apps' queues, as ``FactJobs`` reads
    them; once it stops, they are gone (no count of a queue nobody watches)."""
    release = asyncio.Event()

    async def model(request: GenerationRequest) -> list[MemoryOperation]:
        await release.wait()
        return [MemoryOperation(action="add", fact="The user likes trains.")]

    redis = client()
    sessions = RedisSessionService(redis)
    facts = FactSettings(mode="background")
    memory = RedisMemoryService(redis, config=ON, generator=CallableGenerator(model), facts=facts)
    users = ("alice", "bob", "carol", "dan")
    for user in users:
        session = await sessions.create_session(app_name="gauges", user_id=user)
        await sessions.append_event(
            session, Event(author="user", content=Content(parts=[Part(text="I like trains")]))
        )
        await memory.add_session_to_memory(session)

    def gauges() -> tuple[dict[tuple[int, str], int], dict[int, float]]:
        mine = [NS + "app_name", "gauges"]
        backlog = {
            (p.attributes[NS + "job.shard"], p.attributes[NS + "job.state"]): p.value
            for p in exported.points(NS + "facts.jobs.backlog")
            if [NS + "app_name", p.attributes[NS + "app_name"]] == mine
        }
        oldest = {
            p.attributes[NS + "job.shard"]: p.value
            for p in exported.points(NS + "facts.jobs.oldest_age")
            if [NS + "app_name", p.attributes[NS + "app_name"]] == mine
        }
        return backlog, oldest

    async def until(check: Any) -> Any:
        for _ in range(3000):  # a wait, bounded: a worker that never reads fails here
            if found := await check():
                return found
            await asyncio.sleep(0.01)
        raise AssertionError("the gauges never showed the queue")

    async def read_as(shards: list[Any]) -> bool:
        backlog, oldest = gauges()
        expected = {
            (s.shard, state): getattr(s, state)
            for s in shards
            for state in ("queued", "deferred", "active")
        }
        return backlog == expected and oldest.keys() == {s.shard for s in shards if s.queued}

    jobs = FactJobs(memory)
    assert gauges() == ({}, {})  # no worker yet
    with pytest.raises(InvalidInputError, match="backlog_interval must be positive"):
        FactWorker(memory, backlog_interval=0)
    worker = FactWorker(memory, concurrency=1, poll_interval=0.01, backlog_interval=0.01)
    async with worker:

        async def one_running() -> list[Any] | None:
            shards = await jobs.backlog("gauges")
            return shards if sum(s.active for s in shards) == 1 else None

        # One job held by the model, the others queued: the queue stays as it is.
        held = await until(one_running)
        assert sum(s.queued for s in held) == len(users) - 1
        await until(lambda: read_as(held))
        assert all(age >= 0 for age in gauges()[1].values())
        release.set()
        for user in users:
            await memory.wait_for_generation(app_name="gauges", user_id=user, timeout=30)
        ended = await jobs.backlog("gauges")
        assert not any(s.queued or s.active or s.deferred for s in ended)
        await until(lambda: read_as(ended))
    assert gauges() == ({}, {})


def test_off_nothing_is_imported_and_no_method_is_wrapped() -> None:
    # redis-py 8.1 imports OpenTelemetry itself where it is installed (its observability
    # module): what counts is that this library adds nothing to what redis-py loaded.
    code = (
        "import sys, fakeredis, redis.asyncio\n"
        "def otel(): return {n for n in sys.modules if n.split('.')[0] == 'opentelemetry'}\n"
        "before = otel()\n"
        "from redis_agent_sessions import RedisSessionService, RedisMemoryService\n"
        "s = RedisSessionService(fakeredis.FakeAsyncRedis())\n"
        "m = RedisMemoryService(fakeredis.FakeAsyncRedis())\n"
        "assert 'append_event' not in vars(s) and 'search_memory' not in vars(m)\n"
        "assert 'redis_agent_sessions._telemetry' not in sys.modules\n"
        "print(sorted(otel() - before))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_on_without_opentelemetry_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with pytest.raises(InvalidInputError, match=r"redis-agent-sessions\[otel\]"):
        RedisSessionService(client(), config=ON)
    with pytest.raises(InvalidInputError, match=r"redis-agent-sessions\[otel\]"):
        RedisMemoryService(client(), config=ON)


@pytest.mark.parametrize(
    "url",
    [
        "redis://admin:SECRETPW@127.0.0.1:1/0?telemetry=true",
        "redis://127.0.0.1:1/0?telemetry=true&username=admin&password=SECRETPW",
    ],
)
async def test_no_span_or_log_line_shows_the_urls_password(
    exported: Exported, caplog: pytest.LogCaptureFixture, url: str
) -> None:
    """A call that fails to connect (port 1: refused at once) records where it went, never
    with what password."""
    caplog.set_level(logging.DEBUG)
    async with RedisSessionService.from_url(url) as service:
        with pytest.raises(RedisConnectionError):
            await service.get_session(app_name="a", user_id="u", session_id="s")
    [span] = exported.finished()
    assert span.status.status_code == StatusCode.ERROR
    recorded = [
        span.name,
        span.status.description,
        dict(span.attributes or {}),
        [(e.name, dict(e.attributes or {})) for e in span.events],
    ]
    assert "127.0.0.1" in str(recorded)
    assert "SECRETPW" not in str(recorded)
    assert "SECRETPW" not in caplog.text


def test_the_url_turns_it_on() -> None:
    service = RedisSessionService.from_url("redis://h/0?telemetry=true")
    assert service.config.telemetry
    assert "append_event" in vars(service)


async def test_cluster_app_writes_applied_late_are_counted(
    exported: Exported, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster_layout(monkeypatch)
    shared = SlotCheckedRedis(server=fakeredis.FakeServer())
    writer = RedisSessionService(shared, config=ON)
    session = await writer.create_session(app_name="shop", user_id="alice", session_id="s")

    async def died(*args: Any, **kwargs: Any) -> Any:
        raise RedisConnectionError("the worker died between the two steps")

    layout: Any = writer._engine.layout
    layout.settle = died  # its app step never runs
    with pytest.raises(RedisConnectionError):
        await writer.append_event(session, delta(**{"app:k": 1, "app:j": 2}))
    before = exported.total("cluster.app_writes_applied_late")
    reader = RedisSessionService(shared, config=ON)
    found = await reader.get_session(app_name="shop", user_id="alice", session_id="s")
    assert found is not None
    assert found.state["app:k"] == 1
    # One outbox entry (the append's), applied by a reader, not by its writer.
    assert exported.total("cluster.app_writes_applied_late") == before + 1
    await reader.get_session(app_name="shop", user_id="alice", session_id="s")
    assert exported.total("cluster.app_writes_applied_late") == before + 1


VALKEY_INFO = {"redis_version": "7.2.4", "server_name": "valkey", "valkey_version": "9.1.2"}


class InfoCounted(fakeredis.FakeAsyncRedis):
    """fakeredis (which has no INFO) answering ``INFO server`` with ``info`` (None: refused
    as a managed service refuses it), counting how often it is asked."""

    info: dict[str, Any] | None = VALKEY_INFO
    asked = 0
    drops = 0
    """How many INFO calls lose the connection first."""

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        if [str(a).upper() for a in args] == ["INFO", "SERVER"]:
            self.asked += 1
            if self.drops:
                self.drops -= 1
                raise RedisConnectionError("the connection dropped")
            if self.info is None:
                raise NoPermissionError("this user has no permissions to run the 'info' command")
            return self.info
        return await super().execute_command(*args, **options)


def server_attributes(span: ReadableSpan) -> dict[str, Any]:
    return {k: v for k, v in (span.attributes or {}).items() if k.startswith(NS + "server.")}


async def test_spans_name_the_server_and_its_version_once_it_is_known(exported: Exported) -> None:
    """Valkey by its own version (it reports redis_version 7.2.4), read once, after the
    first call, outside it; db.system.name stays redis, as the conventions say."""
    client = InfoCounted(server=fakeredis.FakeServer())
    service = RedisSessionService(client, config=ON)
    session = await service.create_session(app_name="shop", user_id="alice")
    for i in range(3):
        await service.append_event(session, delta(i=i))
    memory = RedisMemoryService(client, config=ON, backend="plain")
    await memory.search_memory(app_name="shop", user_id="alice", query="trains")
    await memory.search_memory(app_name="shop", user_id="alice", query="trains")
    assert client.asked == 2  # once per service, never per call
    spans = exported.finished()
    valkey = {NS + "server.name": "valkey", NS + "server.version": "9.1.2"}
    assert [server_attributes(s) for s in spans] == [{}, valkey, valkey, valkey, {}, valkey]
    assert {dict(s.attributes or {})["db.system.name"] for s in spans} == {"redis"}
    measured = [
        dict(p.attributes)
        for p in exported.points("db.client.operation.duration")
        if dict(p.attributes).get("db.operation.name") == "append_event"
        and dict(p.attributes).get(NS + "server.name") == "valkey"
    ]
    assert measured, "the duration histogram does not carry the server"
    assert all(m[NS + "server.version"] == "9.1.2" for m in measured)


async def test_a_user_refused_info_gets_spans_without_the_server(exported: Exported) -> None:
    client = InfoCounted(server=fakeredis.FakeServer())
    client.info = None
    service = RedisSessionService(client, config=ON)
    session = await service.create_session(app_name="shop", user_id="alice")
    await service.append_event(session, delta(k=1))
    await service.get_session(app_name="shop", user_id="alice", session_id=session.id)
    spans = exported.finished()
    assert [s.name for s in spans] == ["create_session", "append_event", "get_session"]
    assert all(s.status.status_code == StatusCode.UNSET for s in spans)
    assert [server_attributes(s) for s in spans] == [{}, {}, {}]
    assert client.asked == 1  # refused once: not asked again


@pytest.mark.real
async def test_spans_name_a_real_redis_by_its_version(exported: Exported) -> None:
    from redis.asyncio import Redis

    url = skip_without("REDIS_URL")
    async with Redis.from_url(url) as admin:
        version = str((await admin.info("server"))["redis_version"])
    async with RedisSessionService.from_url(url, config=ON) as service:
        session = await service.create_session(app_name="shop", user_id="alice")
        await service.delete_session(app_name="shop", user_id="alice", session_id=session.id)
    spans = exported.finished()
    assert [server_attributes(s) for s in spans] == [
        {},
        {NS + "server.name": "redis", NS + "server.version": version},
    ]


@pytest.mark.real
@pytest.mark.acl
async def test_the_documented_acl_user_gets_spans_without_the_server(exported: Exported) -> None:
    """The least-privilege user of docs/security.md may not run INFO."""
    from redis.asyncio import Redis

    from _acl import acl_user
    from _servers import ACL_DB, on_db

    async with (
        Redis.from_url(on_db(skip_without("REDIS_URL"), ACL_DB)) as admin,
        acl_user(admin) as worker,
    ):
        service = RedisSessionService(worker, config=ON)
        session = await service.create_session(app_name="shop", user_id="alice")
        await service.append_event(session, delta(k=1))
        await service.delete_session(app_name="shop", user_id="alice", session_id=session.id)
    spans = exported.finished()
    assert [s.name for s in spans] == ["create_session", "append_event", "delete_session"]
    assert all(s.status.status_code == StatusCode.UNSET for s in spans)
    assert [server_attributes(s) for s in spans] == [{}, {}, {}]


async def test_the_server_is_asked_again_after_a_dropped_link_not_after_a_probe(
    exported: Exported,
) -> None:
    """check_ready succeeds with Redis down (it reports, never raises): no reason to ask.
    A link lost during INFO is no refusal: asked again after the next call, a few times at
    most, never failing the call."""
    client = InfoCounted(server=fakeredis.FakeServer())
    client.drops = 1
    service = RedisSessionService(client, config=ON)
    assert await service.check_ready()
    assert client.asked == 0
    session = await service.create_session(app_name="shop", user_id="alice")
    assert client.asked == 1
    for i in range(3):
        await service.append_event(session, delta(i=i))
    assert client.asked == 2
    spans = exported.finished()
    valkey = {NS + "server.name": "valkey", NS + "server.version": "9.1.2"}
    assert [server_attributes(s) for s in spans] == [{}, {}, {}, valkey, valkey]

    client = InfoCounted(server=fakeredis.FakeServer())
    client.drops = 100
    service = RedisSessionService(client, config=ON)
    session = await service.create_session(app_name="shop", user_id="alice")
    for i in range(5):
        await service.append_event(session, delta(i=i))
    assert client.asked == 3
