"""Benchmark of telemetry's cost (not a test): append_event p50 with OpenTelemetry on, the SDK
installed and exporting nowhere, against the same appends with telemetry off.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.telemetry            # ~30 s
    .venv/bin/python -m benchmarks.telemetry --quick    # smoke run, a few seconds
    .venv/bin/python -m benchmarks.telemetry --url redis://127.0.0.1:6379/0 --json out.json

Without ``--url`` it starts a throwaway Redis 7 on a free loopback port and always stops it.
The SDK is set up as an application would: a ``TracerProvider`` (sampling every trace, or
``--sample`` of them) whose spans go through a
``BatchSpanProcessor`` to an exporter that drops them (the no-op exporter: what recording
and batching cost, not what shipping them costs), and a ``MeterProvider`` with a periodic
reader (60 s, so it never exports within the run) to a metric exporter that drops too.

Three services on one client, one session each: ``off`` (``telemetry=False``), ``on``
(``telemetry=True``) and ``floor``: telemetry off, its ``append_event`` wrapped by hand in
the least any instrumentation the issue asks for must do with the SDK, one span (a name, no
attributes, not made current) and one histogram measurement per call. ``floor`` separates
the SDK's own cost from the library's. The timed appends run in interleaved rounds (each
service its share per round, the order rotated and reversed) so drift hits all alike; each sample is
one awaited ``append_event`` of a small event with a session and a ``user:`` delta. A
ratio is the median over rounds of (p50 / off p50) within a round. Target (on): <= 1.05.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
from redis.asyncio import Redis

from benchmarks.harness import report, servers, timing
from redis_agent_sessions import Event, EventActions, RedisSessionService, SessionServiceConfig

APP = "bench_otel"
progress = report.Progress("telemetry")


class DropSpans(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


class DropMetrics(MetricExporter):
    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        return None


def floor(method: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Any]:
    """``method`` with one bare span and one histogram measurement per call."""
    tracer = trace.get_tracer("benchmarks.floor")
    duration = metrics.get_meter("benchmarks.floor").create_histogram("floor.duration", unit="s")
    attributes = {"db.system.name": "redis", "db.operation.name": "append_event"}
    clock = time.perf_counter

    async def call(*args: Any, **kwargs: Any) -> Any:
        span = tracer.start_span("append_event")
        started = clock()
        try:
            return await method(*args, **kwargs)
        finally:
            duration.record(clock() - started, attributes)
            span.end()

    return call


def install_sdk(sample: float) -> None:
    tracer_provider = TracerProvider(sampler=TraceIdRatioBased(sample))
    tracer_provider.add_span_processor(BatchSpanProcessor(DropSpans()))
    trace.set_tracer_provider(tracer_provider)
    reader = PeriodicExportingMetricReader(DropMetrics(), export_interval_millis=60_000)
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))


async def measure(url: str, rounds: int, per_round: int, sample: float) -> dict[str, Any]:
    install_sdk(sample)
    prefix = f"bench-otel-{uuid.uuid4().hex[:8]}"
    client = Redis.from_url(url)
    try:
        services = {
            name: RedisSessionService(
                client, config=SessionServiceConfig(key_prefix=prefix, telemetry=on)
            )
            for name, on in (("off", False), ("on", True), ("floor", False))
        }
        services["floor"].append_event = floor(services["floor"].append_event)  # type: ignore[method-assign]
        sessions = {
            name: await service.create_session(app_name=APP, user_id=f"u-{name}")
            for name, service in services.items()
        }
        counter = iter(range(10**9))

        def appender(name: str) -> Callable[[], Any]:
            def append() -> Any:
                i = next(counter)
                event = Event(author="a", actions=EventActions(state_delta={"k": i, "user:u": i}))
                return services[name].append_event(sessions[name], event)

            return append

        progress(f"{rounds} rounds of {per_round} appends per service")
        result = await timing.interleave(
            {name: appender(name) for name in services},
            rounds,
            per_round=per_round,
            warmup_rounds=2,
            order=timing.alternate,
        )
        env = await report.server_environment(client)
    finally:
        await servers.delete_prefix(client, prefix)
        await client.aclose()
    ratios = result.ratios("on", "off")
    floor_ratios = result.ratios("floor", "off")
    return {
        "environment": env,
        "rounds": rounds,
        "appends_per_round": per_round,
        "p50_us": {name: result.p50_ms(name) * 1000 for name in ("off", "floor", "on")},
        "ratio_per_round": ratios,
        "ratio": timing.median_of(ratios),
        "floor_ratio_per_round": floor_ratios,
        "floor_ratio": timing.median_of(floor_ratios),
        "sampled": sample,
        "target": 1.05,
    }


def text(result: dict[str, Any]) -> str:
    title = f"telemetry: append_event p50, {result['sampled']:.0%} of traces sampled"
    lines = report.environment_lines(title, result["environment"])
    table = report.Table(("telemetry", "append_event p50 (µs)"))
    for name, p50 in result["p50_us"].items():
        table.add(name, report.us(p50))
    lines.append(table.render())
    ratios = ", ".join(f"{r:.3f}" for r in result["ratio_per_round"])
    verdict = report.verdict(result["ratio"], result["target"])
    lines.append(
        f"on / off, median of {result['rounds']} rounds: {result['ratio']:.3f} "
        f"(rounds: {ratios}); target <= {result['target']}: {verdict}"
    )
    floors = ", ".join(f"{r:.3f}" for r in result["floor_ratio_per_round"])
    lines.append(
        f"floor / off (one bare SDK span and one histogram measurement): "
        f"{result['floor_ratio']:.3f} (rounds: {floors})"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = report.add_flags(report.parser(__doc__), url=True, quick="a few seconds")
    parser.add_argument(
        "--sample",
        type=float,
        default=1.0,
        help="share of traces the SDK samples (TraceIdRatioBased; default 1: every span)",
    )
    args = parser.parse_args(argv)
    rounds, per_round = (3, 200) if args.quick else (10, 1000)
    with servers.redis_url(args.url) as (url, _):
        result = asyncio.run(measure(url, rounds, per_round, args.sample))
    report.emit(result, text, args.json)


if __name__ == "__main__":
    main()
