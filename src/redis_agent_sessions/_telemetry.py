"""OpenTelemetry for the services, opt-in (``SessionServiceConfig.telemetry``, ``[otel]``).

One span (kind CLIENT) per call of a public operation, following OpenTelemetry's database
client conventions (``db.system.name``, ``db.operation.name``, ``db.namespace``,
``server.address``/``server.port``, ``error.type`` and an error status), with the session id
as ``gen_ai.conversation.id`` (the attribute ADK's own spans carry, so a trace joins the
agent's spans to ours) and app and user ids in this library's namespace (user ids only when
the operator opts in: they may be personal data). The ``db.client.operation.duration``
histogram times every call; counters record what only this library sees.

The conventions name the system ``redis`` whatever server answers (``db.system.name`` is the
product the client speaks to, as the instrumentation knows it, and lists no ``valkey``), and
have no attribute for a server's product or version: ``redis_agent_sessions.server.name``
(``redis`` or ``valkey``) and ``.server.version`` say which, read once by ``INFO server``
after the first call that succeeds (a user refused INFO gets neither attribute).

The services wrap their operations on the instance when telemetry is on, so with it off
nothing here is imported and no call pays for it. Providers are OpenTelemetry's global ones:
an application configures the SDK and its exporters; a library only asks for a tracer.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from contextlib import AbstractContextManager
from typing import Any, TypeVar

from redis_agent_sessions._version import __version__
from redis_agent_sessions.config import SessionServiceConfig
from redis_agent_sessions.errors import InvalidInputError, StaleSessionError, WriteConcernError

__all__ = ["COUNTERS", "GAUGES", "Telemetry", "instrument"]

_SCOPE = "redis_agent_sessions"
_NS = "redis_agent_sessions."
# The conventions' advice for db.client.operation.duration, in seconds.
_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)

COUNTERS = {
    "stale_refusals": ("{append}", "appends refused because the writer's copy was stale"),
    "merges": ("{append}", "appends from a stale copy applied under stale_policy='merge'"),
    "read_cache.hits": ("{read}", "full reads served from the verified read cache"),
    "read_cache.misses": ("{read}", "full reads the read cache could not serve"),
    "compaction.full_reads": (
        "{read}",
        "compaction-aware reads that read everything for a recorded reason (attribute reason)",
    ),
    "cluster.app_writes_applied_late": (
        "{entry}",
        "cluster app: outbox entries applied by an operation other than the one that wrote them",
    ),
    "write_concern.shortfalls": ("{write}", "writes the replicas or the AOF did not confirm"),
    "facts.generations": ("{generation}", "learned facts: generator calls (attribute outcome)"),
    "facts.jobs": ("{job}", "background generation: jobs a worker ended (attribute outcome)"),
}
"""The counters (``redis_agent_sessions.<name>``): unit and description."""

GAUGES = {
    "facts.jobs.backlog": (
        "{job}",
        "background generation: jobs not ended, by app, shard and state (queued, deferred, "
        "active), as a worker last read them",
    ),
    "facts.jobs.oldest_age": (
        "s",
        "background generation: how long the oldest queued job has waited, by app and shard "
        "(none queued: no measurement), as a worker last read it",
    ),
}
"""The observable gauges (``redis_agent_sessions.<name>``): unit and description."""

R = TypeVar("R")

_NOT_A_CONTACT = frozenset({"check_ready"})
"""Operations that succeed with Redis unreachable (a probe reports it, never raises): no
sign that the server can be asked who it is."""
_IDENTIFY_ATTEMPTS = 3

Identify = Callable[[], Awaitable["tuple[str, str] | None"]]
"""Reads the server's (name, version) by ``INFO server``; None when INFO is refused."""


class Telemetry:
    """The tracer, meter and instruments of one service, and its constant attributes."""

    def __init__(
        self,
        config: SessionServiceConfig,
        endpoint: Mapping[str, Any],
        identify: Identify | None = None,
    ) -> None:
        try:
            from opentelemetry import context, metrics, trace
        except ImportError:
            raise InvalidInputError(
                "telemetry=True needs OpenTelemetry's API: pip install 'redis-agent-sessions[otel]'"
            ) from None
        self._trace = trace
        self._context = context
        self._tracer = trace.get_tracer(_SCOPE, __version__)
        meter = metrics.get_meter(_SCOPE, __version__)
        self._duration = meter.create_histogram(
            "db.client.operation.duration",
            unit="s",
            description="Duration of the service's operations",
            explicit_bucket_boundaries_advisory=list(_BUCKETS),
        )
        self._counters = {
            name: meter.create_counter(_NS + name, unit=unit, description=description)
            for name, (unit, description) in COUNTERS.items()
        }
        self._lag = meter.create_histogram(
            _NS + "facts.job.lag",
            unit="s",
            description="Background generation: how long a job waited for a worker",
            explicit_bucket_boundaries_advisory=[0.1, 0.5, 1.0, 5.0, 10.0, 60.0, 300.0, 3600.0],
        )
        # The SDK keeps the callbacks of an instrument's first registration only, and every
        # service registers the gauges: each reads what all of the process's workers read.
        for name, (unit, description) in GAUGES.items():
            meter.create_observable_gauge(
                _NS + name, [_READINGS.callback(name)], unit=unit, description=description
            )
        self._user_ids = config.telemetry_user_ids
        self._base: dict[str, Any] = {"db.system.name": "redis", **endpoint}
        self._identify = identify
        self._attempts = _IDENTIFY_ATTEMPTS
        self._attributes: dict[str, dict[str, Any]] = {}
        """Each operation's attributes, replaced (never changed in place: the SDK may hold
        them) once the server is known."""

    def step(self, name: str, attributes: Mapping[str, Any]) -> AbstractContextManager[Any]:
        """A span (kind INTERNAL) inside the current operation's: a part of it with a time of
        its own, such as a generator's model call apart from the Redis work around it."""
        return self._tracer.start_as_current_span(
            name,
            kind=self._trace.SpanKind.INTERNAL,
            attributes={_NS + k: v for k, v in attributes.items()},
        )

    def traceparent(self) -> str:
        """The current span as a W3C ``traceparent`` ('' without one): what a background
        job keeps, so that its worker's span links to the trace that asked for it."""
        found = self._trace.get_current_span().get_span_context()
        if not found.is_valid:
            return ""
        return f"00-{found.trace_id:032x}-{found.span_id:016x}-{int(found.trace_flags):02x}"

    def job(
        self, traceparent: str, lag: float, attributes: Mapping[str, Any]
    ) -> AbstractContextManager[Any]:
        """A worker's span (kind CONSUMER) around one background job, linked to the span
        that enqueued it (a trace of its own: the request's ended long ago); ``lag``, the
        seconds the job waited, goes to the lag histogram."""
        self._lag.record(max(0.0, lag))
        links = []
        parts = traceparent.split("-")
        if len(parts) == 4 and len(parts[1]) == 32 and len(parts[2]) == 16:
            try:
                context = self._trace.SpanContext(
                    int(parts[1], 16), int(parts[2], 16), is_remote=True,
                    trace_flags=self._trace.TraceFlags(int(parts[3], 16)),
                )  # fmt: skip
            except ValueError:
                context = None
            if context is not None and context.is_valid:
                links.append(self._trace.Link(context))
        return self._tracer.start_as_current_span(
            "facts_job",
            kind=self._trace.SpanKind.CONSUMER,
            attributes={_NS + k: v for k, v in attributes.items()},
            links=links,
        )

    def backlog(self, worker: str, shards: Iterable[Any]) -> None:
        """What ``worker`` just read of its apps' queues (``ShardBacklog``s), for the gauges
        until it reads again; nothing (``[]``) once it stops, so that its apps' last counts
        are not reported for ever."""
        readings: dict[str, list[tuple[float, dict[str, Any]]]] = {name: [] for name in GAUGES}
        for shard in shards:
            where = {_NS + "app_name": shard.app, _NS + "job.shard": shard.shard}
            for state in ("queued", "deferred", "active"):
                count = getattr(shard, state)
                readings["facts.jobs.backlog"].append((count, {**where, _NS + "job.state": state}))
            if shard.oldest_age is not None:
                readings["facts.jobs.oldest_age"].append((shard.oldest_age, where))
        _READINGS.put(worker, readings)

    def count(self, name: str, amount: int = 1, **attributes: str) -> None:
        self._counters[name].add(amount, {_NS + k: v for k, v in attributes.items()})

    def traced(
        self, operation: str, method: Callable[..., Coroutine[Any, Any, R]]
    ) -> Callable[..., Coroutine[Any, Any, R]]:
        """``method`` inside a span, timed by the duration histogram."""
        # The same attributes for the span and the measurement (plus the call's ids on the
        # span): the SDK copies what it keeps, and every copy is time on the caller's path.
        self._attributes[operation] = {**self._base, "db.operation.name": operation}
        attributes = self._attributes
        contact = operation not in _NOT_A_CONTACT
        kind = self._trace.SpanKind.CLIENT
        in_context = self._trace.set_span_in_context
        attach, detach = self._context.attach, self._context.detach
        clock = time.perf_counter

        # start_span and attach by hand: the SDK's start_as_current_span is a generator-based
        # context manager, a few microseconds more on every call.
        @functools.wraps(method)
        async def call(*args: Any, **kwargs: Any) -> R:
            metric_attributes = attributes[operation]
            span = self._tracer.start_span(
                operation, kind=kind, attributes=metric_attributes | self._ids(args, kwargs)
            )
            token = attach(in_context(span))
            started = clock()
            try:
                result = await method(*args, **kwargs)
            except Exception as exc:
                error = self._failed(span, exc)
                self._duration.record(clock() - started, metric_attributes | {"error.type": error})
                raise
            else:
                self._duration.record(clock() - started, metric_attributes)
            finally:
                detach(token)
                span.end()
            if contact and self._identify is not None:
                await self._identified()
            return result

        return call

    async def _identified(self) -> None:
        """Read the server's name and version, once: after a call that succeeded (the
        server is reached), outside its span and its measurement. Spans and measurements
        carry them from the next call on."""
        identify, self._identify = self._identify, None
        if identify is None:  # another call got there first
            return
        try:
            found = await identify()
        except Exception:  # telemetry never fails a call that succeeded
            # A link lost since the call: ask again after another, a few times at most.
            self._attempts -= 1
            if self._attempts:
                self._identify = identify
            return
        if found is None:
            return
        name, version = found
        server = {_NS + "server.name": name.lower()}
        if version != "unknown":
            server[_NS + "server.version"] = version
        self._base |= server
        self._attributes.update({op: a | server for op, a in self._attributes.items()})

    def _failed(self, span: Any, exc: Exception) -> str:
        """Mark ``span`` failed by ``exc`` and count what only this library sees; the
        ``error.type`` of the failure."""
        if isinstance(exc, StaleSessionError):
            self.count("stale_refusals")
        elif isinstance(exc, WriteConcernError) and exc.written:
            self.count("write_concern.shortfalls")
        error = _error_type(exc)
        span.set_attribute("error.type", error)
        span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, f"{error}: {exc}"[:500]))
        span.record_exception(exc)
        return error

    def _ids(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, str]:
        """The app, user and session an operation is about: named, or of the session given
        (``append_event(session, event)``, ``refresh(session)``, memory's ingestion)."""
        session = kwargs.get("session", args[0] if args else None)
        app = kwargs.get("app_name", getattr(session, "app_name", None))
        user = kwargs.get("user_id", getattr(session, "user_id", None))
        sid = kwargs.get("session_id", getattr(session, "id", None))
        found: dict[str, str] = {}
        if isinstance(app, str):
            found[_NS + "app_name"] = app
        if self._user_ids and isinstance(user, str):
            found[_NS + "user_id"] = user
        if isinstance(sid, str) and sid:
            found["gen_ai.conversation.id"] = sid
        return found


class _Readings:
    """What the process's workers last read of their queues, per worker (a worker that
    stops takes its readings away)."""

    def __init__(self) -> None:
        self._by_worker: dict[str, dict[str, list[tuple[float, dict[str, Any]]]]] = {}

    def put(self, worker: str, readings: dict[str, list[tuple[float, dict[str, Any]]]]) -> None:
        # Newest last: two workers of the process reading one app, the later reading wins.
        self._by_worker.pop(worker, None)
        if any(readings.values()):
            self._by_worker[worker] = readings

    def callback(self, gauge: str) -> Callable[[Any], Iterable[Any]]:
        from opentelemetry.metrics import Observation

        def observe(options: Any) -> Iterable[Any]:
            latest: dict[tuple[tuple[str, Any], ...], tuple[float, dict[str, Any]]] = {}
            for readings in list(self._by_worker.values()):
                for value, attributes in readings.get(gauge, []):
                    latest[tuple(sorted(attributes.items()))] = (value, attributes)
            return [Observation(value, attributes) for value, attributes in latest.values()]

        return observe


_READINGS = _Readings()


def instrument(service: object, operations: Iterable[str], telemetry: Telemetry) -> None:
    """Wrap ``service``'s operations on the instance: the class, and every service without
    telemetry, stay as they are."""
    for name in operations:
        setattr(service, name, telemetry.traced(name, getattr(service, name)))


def _error_type(exc: BaseException) -> str:
    cls = type(exc)
    return (
        cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    )
