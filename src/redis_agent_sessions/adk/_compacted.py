"""Compaction-aware reads for the ADK drop-in (``CompactedReads``).

With ``EventsCompactionConfig`` on, ADK builds every LLM request from the compaction
summaries that are not contained in a later one plus the raw events no summary covers
(``_process_compaction_events``, by event time). Everything else in a long session is
read, decoded and thrown away on every turn. A compacted read returns only:

* every summary the session's compaction index lists (``...:compactions``, kept by
  append_event.lua: each summary's range, minus ranges a later one contains);
* the raw events of the stream ranges no summary covers before the tail, and
* the tail: every event from the millisecond where the newest summary (or, with a sliding
  window, the newest window) begins.

That is exact only because stream ids are event times in ms: the append script records a
``full_reads`` reason in the metadata the first time it cannot keep them so (a writer's
clock behind the stream), and the drop-in records one for anything this module does not
model (rewinds, isolated task scopes, long-running tools and confirmations, resumable
agent state): such sessions are read in full, as are those without summaries. After a
read, two more things send it back for a full read: a function response whose call is not
in what was read (ADK re-injects such calls from the whole history), and a sliding window
that would start before the tail (the next summary must see the same window).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from typing import TYPE_CHECKING, Any, NamedTuple

from google.adk.apps.app import EventsCompactionConfig
from google.adk.events import Event
from google.adk.sessions.base_session_service import GetSessionConfig
from pydantic import ConfigDict

from redis_agent_sessions._redis import scripts as _scripts
from redis_agent_sessions._redis.codec import event_ms, meta_field, stream_id, text
from redis_agent_sessions.errors import InvalidInputError

if TYPE_CHECKING:
    from google.adk.sessions import Session

    from redis_agent_sessions.keys import SessionKeys
    from redis_agent_sessions.sessions._reads import Reads

__all__ = ["CompactedReads", "read_compacted", "read_hints"]


class CompactedReads(GetSessionConfig):
    """Read a session the way a Runner turn with compaction uses it.

    Pass the App's own compaction config, as the Runner's ``get_session_config``:

    ```python
    run_config = RunConfig(get_session_config=CompactedReads(
        compaction=app.events_compaction_config))
    runner.run_async(..., run_config=run_config)
    ```

    ``session.events`` then holds the compaction summaries that count and only the raw
    events a turn can use (the LLM request is the same as with every event read), so a
    turn's read stops growing with the history. ``Runner.rewind_async`` ignores
    ``get_session_config`` and reads everything, as it must to replay state.
    ``num_recent_events`` and ``after_timestamp`` cannot be combined with it.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    compaction: EventsCompactionConfig | None
    """The App's ``events_compaction_config`` (its sliding window decides how far back
    the next summary reaches)."""


def read_hints(event: Event) -> tuple[str, str]:
    """append_event.lua's ARGV[12..13] for an ADK event: its summary's range, and why the
    session must be read in full from now on (first match wins)."""
    actions = event.actions
    span, reason = "", ""
    compaction = actions.compaction
    if compaction is not None:
        start, end = compaction.start_timestamp, compaction.end_timestamp
        if not (_finite(start) and _finite(end)):
            # JSON has no NaN: stored, it would read back as null, which ADK refuses.
            raise InvalidInputError(
                f"compaction timestamps must be finite numbers: {start!r}, {end!r}"
            )
        if start <= end and compaction.compacted_content is not None:
            span = f"{float(start)!r} {float(end)!r}"
        else:  # ADK treats such summaries apart from the others: not modelled here
            reason = "compaction"
    interrupt = (
        event.long_running_tool_ids
        or actions.requested_tool_confirmations
        or actions.requested_auth_configs
    )
    if reason:
        pass
    elif actions.rewind_before_invocation_id is not None:
        reason = "rewind"
    elif getattr(event, "isolation_scope", None):
        reason = "scope"
    elif interrupt:
        reason = "interrupt"
    elif actions.agent_state is not None:
        reason = "resume"
    return span, reason


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


class _Summary(NamedTuple):
    stream_id: tuple[int, int]
    start: float
    end: float


def _retained(summaries: list[_Summary]) -> list[_Summary]:
    """ADK's ``_get_compaction_ranges``: the ranges no other contains (of equal ones, the
    latest), in stream order."""
    ordered = sorted(enumerate(summaries), key=lambda p: (p[1].start, -p[1].end, -p[0]))
    kept: set[int] = set()
    max_end: float | None = None
    for index, summary in ordered:
        if max_end is None or summary.end > max_end:
            kept.add(index)
            max_end = summary.end
    return [s for i, s in enumerate(summaries) if i in kept]


def _plan(summaries: list[_Summary]) -> tuple[int, list[tuple[str, str]], list[_Summary]]:
    """(first ms of the tail, the uncovered stream ranges before it, the summaries stored
    before it)."""
    newest = summaries[-1]
    retained = _retained(summaries)
    # Everything after the newest summary's end (ADK's "new invocations"), after the last
    # retained one's (token-threshold candidates) and after the union (the prompt's raw
    # events) must be read: the first of these ends bounds the tail.
    tail = event_ms(min(newest.end, retained[-1].end))
    union: list[list[float]] = []
    for s in sorted(retained, key=lambda s: (s.start, s.end)):
        if union and s.start <= union[-1][1]:
            union[-1][1] = max(union[-1][1], s.end)
        else:
            union.append([s.start, s.end])
    # Stream ids are event-time ms, so ids strictly inside a covered range hold covered
    # events only; ranges are read inclusive of their boundary ms (ADK filters exactly).
    ranges: list[tuple[str, str]] = []
    low, low_ms = "-", 0
    for start, end in union:
        high = min(event_ms(start), tail - 1)
        if high >= low_ms:
            ranges.append((low, str(high)))
        low_ms = event_ms(end)
        low = str(low_ms)
        if low_ms >= tail:
            break
    else:
        if low_ms < tail:
            ranges.append((low, str(tail - 1)))
    return tail, ranges, [s for s in summaries if s.stream_id[0] < tail]


# Sliding windows: entries read before the tail on the first try, per overlap invocation,
# and how many times that look-back may double before the read goes back to being full.
_LOOK_BACK = 8
_EXTENSIONS = 6


async def read_compacted(
    reads: Reads[Session, Event],
    keys: SessionKeys,
    compaction: EventsCompactionConfig | None,
) -> tuple[Session | None, bool]:
    """The compacted session (or None when there is none) and whether it is compacted;
    ``(None, False)`` also when it must be read in full."""
    redis = reads.client
    pipe = redis.pipeline(transaction=False)
    pipe.hmget(keys.meta, "full_reads", "create_time")
    pipe.zrange(keys.compactions, 0, -1)
    (full_reads, created), members = await _scripts.execute(pipe, [keys.meta, keys.compactions])
    if created is None or full_reads is not None or not members:
        if full_reads is not None and (telemetry := reads.telemetry) is not None:
            telemetry.count("compaction.full_reads", reason=text(full_reads))
        return None, False
    summaries = []
    for member in members:
        entry_id, start, end = text(member).split(" ")
        summaries.append(_Summary(stream_id(entry_id), float(start), float(end)))
    summaries.sort()
    tail, ranges, older = _plan(summaries)
    sliding = compaction is not None and compaction.compaction_interval is not None
    look_back = _LOOK_BACK * ((compaction.overlap_size or 0) + 1) if compaction else 0

    pipe = redis.pipeline(transaction=False)
    for low, high in ranges:
        pipe.xrange(keys.events, low, high)
    for summary in older:
        entry_id = "{}-{}".format(*summary.stream_id)
        pipe.xrange(keys.events, entry_id, entry_id)
    if sliding and tail > 0:
        pipe.xrevrange(keys.events, str(tail - 1), "-", count=look_back)
    pipe.hget(keys.meta, "create_time")
    # The tail comes with the state, at one instant; what is older never changes, unless
    # the session was deleted and created again in between (then create_time differs).
    found = await reads.snapshot(keys, None, str(tail))
    *parts, created_again = await _scripts.execute(pipe, [keys.events, keys.events, keys.meta])
    if found is None:
        return None, True
    stored, tail_entries = found.stored, found.entries
    if created_again != created or meta_field(found.meta, "create_time") != text(created):
        return None, False
    before = parts.pop() if sliding and tail > 0 else []
    events: dict[tuple[int, int], Event] = {}
    _add(reads, keys, events, [*(e for p in parts for e in p), *tail_entries, *before])
    # The tail and what was read just before it are one run of consecutive entries.
    first = min((stream_id(text(e[0])) for e in before), default=(tail, 0))
    for _ in range(_EXTENSIONS):
        order = sorted(events)
        listed = [events[k] for k in order]
        if _orphan_responses(listed):
            return None, False
        if not sliding or _window_in_tail(listed, bisect_left(order, first), compaction):
            return reads.build_session(stored, listed), True
        if len(before) < look_back:
            return None, False  # the run already starts at the session's first entry
        look_back *= 2
        pipe = redis.pipeline(transaction=False)
        pipe.xrevrange(keys.events, _previous(first), "-", count=look_back)
        pipe.hget(keys.meta, "create_time")
        before, created_again = await _scripts.execute(pipe, [keys.events, keys.meta])
        if created_again != created:
            return None, False
        _add(reads, keys, events, before)
        first = min((stream_id(text(e[0])) for e in before), default=first)
    return None, False


def _add(
    reads: Reads[Session, Event],
    keys: SessionKeys,
    events: dict[tuple[int, int], Event],
    entries: list[Any],
) -> None:
    """Decode the entries not read yet into ``events`` (by stream id)."""
    new: dict[tuple[int, int], Any] = {}
    for entry in entries:
        entry_id = stream_id(text(entry[0]))
        if entry_id not in events:
            new[entry_id] = entry
    events.update(zip(new, reads.decode(keys.events, list(new.values())), strict=True))


def _previous(entry_id: tuple[int, int]) -> str:
    """The stream id just before ``entry_id``, as an inclusive XREVRANGE bound."""
    ms, seq = entry_id
    return f"{ms}-{seq - 1}" if seq else str(ms - 1)


def _orphan_responses(events: list[Event]) -> bool:
    """Whether a function response was read without its call."""
    calls: set[str] = set()
    for event in events:
        for response in event.get_function_responses():
            if response.id and response.id not in calls:
                return True
        calls.update(c.id for c in event.get_function_calls() if c.id)
    return False


def _window_in_tail(
    events: list[Event], first_tail: int, config: EventsCompactionConfig | None
) -> bool:
    """Whether the next sliding window (``_run_compaction_for_sliding_window``, after the
    turn about to run) starts with an invocation that began inside the tail: then it is
    the same window as over every event."""
    assert config is not None
    overlap = config.overlap_size or 0
    live = [e for e in events if getattr(e, "isolation_scope", None) is None]
    last_end = 0.0
    for event in reversed(live):
        if event.actions.compaction and event.actions.compaction.end_timestamp:
            last_end = event.actions.compaction.end_timestamp
            break
    latest: dict[str, float] = {}
    for event in live:
        if event.invocation_id and not event.actions.compaction:
            latest[event.invocation_id] = max(latest.get(event.invocation_id, 0.0), event.timestamp)
    order = list(latest)
    new = [i for i in order if latest[i] > last_end]
    # With nothing new yet, the turn about to run is the first new invocation.
    first_new = order.index(new[0]) if new else len(order)
    if first_new - overlap >= len(order):
        return True  # the window starts with that turn
    start = order[max(0, first_new - overlap)]
    # Invocations by first appearance in the tail; the first may have begun before it.
    begun: list[str] = []
    for event in events[first_tail:]:
        inv = event.invocation_id
        if inv and not event.actions.compaction and inv not in begun:
            begun.append(inv)
    return start in begun[1:]
