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

Two services on one client, one session each: ``off`` (``telemetry=False``) and ``on``
(``telemetry=True``). The timed appends run in interleaved rounds (each service its
share per round, the order alternating) so drift hits both alike; each sample is one
awaited ``append_event`` of a small event with a session and a ``user:`` delta. The ratio
is the median over rounds of (on p50 / off p50) within a round. Target: <= 1.05.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
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
            for name, on in (("off", False), ("on", True))
        }
        sessions = {
            name: await service.create_session(app_name=APP, user_id=f"u-{name}")
            for name, service in services.items()
        }
        counter = iter(range(10**9))

        def append(name: str) -> Any:
            i = next(counter)
            event = Event(author="a", actions=EventActions(state_delta={"k": i, "user:u": i}))
            return services[name].append_event(sessions[name], event)

        progress(f"{rounds} rounds of {per_round} appends per service")
        result = await timing.interleave(
            {"off": lambda: append("off"), "on": lambda: append("on")},
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
    return {
        "environment": env,
        "rounds": rounds,
        "appends_per_round": per_round,
        "p50_us": {name: result.p50_ms(name) * 1000 for name in ("off", "on")},
        "ratio_per_round": ratios,
        "ratio": timing.median_of(ratios),
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
    verdict = "met" if result["ratio"] <= result["target"] else "MISSED"
    lines.append(
        f"on / off, median of {result['rounds']} rounds: {result['ratio']:.3f} "
        f"(rounds: {ratios}); target <= {result['target']}: {verdict}"
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
