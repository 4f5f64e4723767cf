"""Clocks, percentiles, GC handling and interleaved rounds: one definition of each.

**Percentiles.** Every percentile in every benchmark is :func:`percentile`: linear
interpolation between the closest ranks, the ``method='inclusive'`` of
:func:`statistics.quantiles` (numpy's default ``'linear'``, Excel's ``PERCENTILE.INC``):
for sorted ``x[0..n-1]`` the p-th percentile is at position ``(n - 1) * p / 100``. Its
p50 is the ordinary median (:func:`statistics.median`); p0 and p100 are the min and max.

**GC.** :func:`settled_gc` runs before every timed block: a full collection, then the
survivors frozen (``gc.freeze``) so that old objects (seeded histories) are not rescanned
while timing; the collector stays enabled while timing, as in an application, unless
``disable=True``.

**Rounds.** :func:`interleave` runs several calls in turn, round after round (A, B, A, B,
...; the order rotated from round to round where asked), so that drift on a shared
machine (CPU frequency, other load) hits them alike. :class:`Rounds` gives each call's
pooled summary, its per-round medians, and ratios taken within a round, then their median
(:func:`median_of`).
"""

from __future__ import annotations

import gc
import inspect
import math
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Rounds",
    "Stats",
    "Timers",
    "alternate",
    "interleave",
    "median_of",
    "patched",
    "percentile",
    "rotate",
    "settled_gc",
    "summarize",
    "time_calls",
    "timed",
    "timed_appends",
    "timer_overhead_us",
]


def percentile(samples: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0-100) of ``samples``: ``statistics.quantiles(samples,
    method='inclusive')``'s definition (linear between closest ranks), for any n >= 1."""
    if not samples:
        raise ValueError("percentile of no samples")
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} is not within 0-100")
    ordered = sorted(samples)
    at = (len(ordered) - 1) * p / 100
    low = math.floor(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def median_of(values: Sequence[float]) -> float:
    """The median (:func:`percentile` 50) of ``values``: of rounds, of ratios, of runs."""
    return percentile(values, 50)


@dataclass
class Stats:
    """Latency summary of one series, in microseconds (percentiles: :func:`percentile`)."""

    n: int
    p50_us: float
    p90_us: float
    p99_us: float
    mean_us: float
    min_us: float
    max_us: float


def summarize(samples_ns: Sequence[float]) -> Stats:
    """:class:`Stats` of samples in nanoseconds."""
    n = len(samples_ns)
    return Stats(
        n,
        percentile(samples_ns, 50) / 1e3,
        percentile(samples_ns, 90) / 1e3,
        percentile(samples_ns, 99) / 1e3,
        sum(samples_ns) / n / 1e3,
        min(samples_ns) / 1e3,
        max(samples_ns) / 1e3,
    )


@contextmanager
def settled_gc(*, freeze: bool = True, disable: bool = False) -> Iterator[None]:
    """Collect; then freeze what survives (``freeze``), and pause the collector while the
    block runs (``disable``). Everything is undone on the way out."""
    gc.collect()
    if freeze:
        gc.freeze()
    enabled = gc.isenabled()
    if disable:
        gc.disable()
    try:
        yield
    finally:
        if disable and enabled:
            gc.enable()
        if freeze:
            gc.unfreeze()


# -- timed calls -----------------------------------------------------------------------------


async def timed(call: Callable[[], Awaitable[Any]], count: int, samples: list[int]) -> None:
    """``count`` awaited calls, each one's nanoseconds appended to ``samples`` (no GC step)."""
    clock = time.perf_counter_ns
    for _ in range(count):
        start = clock()
        await call()
        samples.append(clock() - start)


async def time_calls(call: Callable[[], Awaitable[Any]], count: int, warmup: int) -> list[int]:
    """``warmup`` untimed calls, then ``count`` timed ones under :func:`settled_gc`."""
    for _ in range(warmup):
        await call()
    samples: list[int] = []
    with settled_gc():
        await timed(call, count, samples)
    return samples


async def timed_appends(service: Any, pairs: Sequence[tuple[Any, Any]], samples: list[int]) -> None:
    """``service.append_event(session, event)`` for each pair, each one timed (ns)."""
    clock = time.perf_counter_ns
    for session, event in pairs:
        start = clock()
        await service.append_event(session, event)
        samples.append(clock() - start)


# -- interleaved rounds ----------------------------------------------------------------------


def rotate(items: Sequence[Any], round_no: int) -> list[Any]:
    """``items`` rotated by the round number."""
    k = round_no % len(items)
    return [*items[k:], *items[:k]]


def alternate(items: Sequence[Any], round_no: int) -> list[Any]:
    """``items`` rotated by the round, and reversed every other round."""
    rotated = rotate(items, round_no)
    return rotated if round_no % 2 == 0 else rotated[::-1]


@dataclass
class Rounds:
    """Samples (ns) of named calls, per round: ``samples[name][round] = [ns, ...]``."""

    samples: dict[str, list[list[int]]] = field(default_factory=lambda: defaultdict(list))

    def add(self, name: str, round_no: int, values: Sequence[int]) -> None:
        rounds = self.samples[name]
        while len(rounds) <= round_no:
            rounds.append([])
        rounds[round_no].extend(values)

    def pooled(self, name: str) -> list[int]:
        return [v for r in self.samples[name] for v in r]

    def stats(self, name: str) -> Stats:
        """Summary over every round's samples together."""
        return summarize(self.pooled(name))

    def p50_ms(self, name: str) -> float:
        return percentile(self.pooled(name), 50) / 1e6

    def round_medians(self, name: str) -> list[float]:
        return [percentile(r, 50) for r in self.samples[name] if r]

    def ratios(self, numerator: str, denominator: str) -> list[float]:
        """Per round: the numerator's median / the denominator's median of that round."""
        return [
            n / d
            for n, d in zip(
                self.round_medians(numerator), self.round_medians(denominator), strict=True
            )
        ]

    def ratio(self, numerator: str, denominator: str) -> float:
        """The median over rounds of :meth:`ratios`."""
        return median_of(self.ratios(numerator, denominator))


async def interleave(
    calls: Mapping[str, Callable[[], Any]],
    rounds: int,
    *,
    per_round: int = 1,
    warmup_rounds: int = 0,
    collect_each: bool = False,
    order: Callable[[Sequence[str], int], list[str]] | None = None,
) -> Rounds:
    """Each call (sync, or returning an awaitable) ``per_round`` times per round, the calls
    in turn, for ``warmup_rounds`` untimed rounds and then ``rounds`` timed ones; ``order``
    (e.g. :func:`rotate`) reorders the calls from round to round. Without ``collect_each``
    each timed round runs under :func:`settled_gc`; with it, the collector runs before
    every call instead (for calls that allocate much, e.g. a whole session's events). What
    a call returns is kept until its time is taken, as a caller keeps a read."""
    result = Rounds()
    names = list(calls)
    clock = time.perf_counter_ns
    for i in range(warmup_rounds + rounds):
        timed_round = i >= warmup_rounds
        round_no = i - warmup_rounds
        ordered = order(names, i) if order else names
        gc_block: AbstractContextManager[None] = (
            settled_gc() if timed_round and not collect_each else _nothing()
        )
        with gc_block:
            for name in ordered:
                values: list[int] = []
                for _ in range(per_round):
                    if collect_each:
                        gc.collect()
                    start = clock()
                    returned = calls[name]()
                    if inspect.isawaitable(returned):
                        returned = await returned
                    values.append(clock() - start)
                    del returned
                if timed_round:
                    result.add(name, round_no, values)
    return result


@contextmanager
def _nothing() -> Iterator[None]:
    yield


# -- timing parts of a call (monkeypatched wrappers) -----------------------------------------


class Timers:
    """Accumulating wall-clock timers around sync and async callables."""

    def __init__(self) -> None:
        self.ns: dict[str, int] = defaultdict(int)
        self.calls: dict[str, int] = defaultdict(int)
        self.last_end: dict[str, int] = {}

    def sync(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                self.ns[name] += time.perf_counter_ns() - start
                self.calls[name] += 1

        return timed

    def coro(self, name: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter_ns()
            try:
                return await fn(*args, **kwargs)
            finally:
                end = time.perf_counter_ns()
                self.ns[name] += end - start
                self.calls[name] += 1
                self.last_end[name] = end

        return timed

    def instrument(
        self, target: object, attr: str, name: str, *, is_async: bool = False
    ) -> AbstractContextManager[None]:
        """Time every call of ``target.attr`` under ``name`` while the context is open."""
        original = getattr(target, attr)
        wrapper = self.coro(name, original) if is_async else self.sync(name, original)
        return patched(target, attr, wrapper)

    def mean_us(self, name: str, per: int) -> float:
        return self.ns[name] / per / 1e3


@contextmanager
def patched(target: object, name: str, value: Any) -> Iterator[None]:
    """Temporarily replace an attribute (only in this process, only while measuring)."""
    had_own = name in getattr(target, "__dict__", {})
    old = getattr(target, name)
    setattr(target, name, value)
    try:
        yield
    finally:
        if had_own:
            setattr(target, name, old)
        else:
            delattr(target, name)


def timer_overhead_us() -> float:
    """What one :class:`Timers` wrapper adds to a call, to read a breakdown with."""
    timers = Timers()
    bare = len
    wrapped = timers.sync("x", len)
    rounds = 200_000
    start = time.perf_counter_ns()
    for _ in range(rounds):
        bare("")
    mid = time.perf_counter_ns()
    for _ in range(rounds):
        wrapped("")
    end = time.perf_counter_ns()
    return max(0.0, ((end - mid) - (mid - start)) / rounds / 1e3)
