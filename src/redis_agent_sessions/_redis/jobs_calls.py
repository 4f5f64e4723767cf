"""Background generation's scripts' calls and replies, by name (see ``.calls``; each
``.lua`` header says what every field means). Every one touches the keys of one shard of an
app's job queue (``keys.JobKeys``) and, for a job, its events list and its user's lease.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from redis_agent_sessions._redis.calls import Script
from redis_agent_sessions._redis.codec import text

__all__ = [
    "JOBS_DUE",
    "JOBS_ENQUEUE",
    "JOBS_FINISH",
    "JOBS_LETTER",
    "JOBS_START",
    "JOBS_TOUCH",
    "SCRIPTS",
    "Enqueued",
    "JobsDue",
    "JobsEnqueue",
    "JobsFinish",
    "JobsLetter",
    "JobsStart",
    "JobsTouch",
    "Started",
]


# -- jobs_enqueue.lua ------------------------------------------------------------------------


class JobsEnqueue(NamedTuple):
    jobs: str
    queued: str
    active: str
    again: str
    due: str
    users: str
    marks: str
    events: str
    options: str
    job: str
    user: str
    now_ms: int
    max_waiting: int
    session_events: int
    event_trigger: int
    idle_ms: int
    max_events: int
    traceparent: str
    request: str  # the request's options as JSON ('' none)
    given: Sequence[str]


class Enqueued(NamedTuple):
    """``status``: 1 queued, 2 merged, 3 deferred; nothing written for -5 (the shard's
    backlog is full) and -7 (the job's events are), with how many ``waiting``."""

    status: int
    waiting: int = 0


def _enqueued(call: JobsEnqueue, reply: list[Any]) -> Enqueued:
    return Enqueued(int(reply[0]), int(reply[1]) if len(reply) > 1 else 0)


JOBS_ENQUEUE = Script("jobs_enqueue", JobsEnqueue, keys=9, reply=_enqueued, more_args=True)


# -- jobs_start.lua --------------------------------------------------------------------------


class JobsStart(NamedTuple):
    jobs: str
    queued: str
    active: str
    tries: str
    lease: str
    events: str
    options: str
    job: str
    entry: str
    token: str
    lease_ms: int
    now_ms: int
    max_events: int
    claimed: int


class Started(NamedTuple):
    """``status``: 1 started (its failed ``attempts``, the ms it was ``queued_ms``, 0 when it
    was not, its ``events``, oldest first, and its newest request's ``options``, JSON or ''),
    0 another job holds the user's lease, -1 the entry is gone."""

    status: int
    attempts: int = 0
    queued_ms: float = 0.0
    events: Sequence[Any] = ()
    options: str = ""


def _started(call: JobsStart, reply: list[Any]) -> Started:
    if reply[0] != 1:
        return Started(int(reply[0]))
    return Started(1, int(reply[1]), float(text(reply[2]) or 0), reply[4:], text(reply[3]))


JOBS_START = Script("jobs_start", JobsStart, keys=7, reply=_started)


# -- jobs_finish.lua -------------------------------------------------------------------------


class JobsFinish(NamedTuple):
    jobs: str
    queued: str
    active: str
    again: str
    due: str
    users: str
    marks: str
    tries: str
    failed: str
    dead: str
    dropped: str
    events: str
    lease: str
    options: str
    job: str
    user: str
    entry: str
    group: str
    token: str
    now_ms: int
    outcome: str
    read: int
    error: str
    attempts: int
    retry_ms: int
    dead_kept: int


JOBS_FINISH = Script("jobs_finish", JobsFinish, keys=14, reply=lambda call, reply: reply[1])
"""Its reply: what became of the job ('done', 'retry', 'dead', 'gone', 'released' or
'stale'), as Redis gives it."""


# -- jobs_due.lua ----------------------------------------------------------------------------


class JobsDue(NamedTuple):
    jobs: str
    queued: str
    active: str
    again: str
    due: str
    now_ms: int
    limit: int
    flushing: Sequence[str]  # none: the jobs whose time has come


JOBS_DUE = Script(
    "jobs_due", JobsDue, keys=5, reply=lambda call, reply: int(reply[0]), more_args=True
)
"""Its reply: how many jobs moved."""


# -- jobs_touch.lua --------------------------------------------------------------------------


class JobsTouch(NamedTuple):
    jobs: str
    lease: str
    group: str
    consumer: str
    entry: str
    token: str
    lease_ms: int


JOBS_TOUCH = Script("jobs_touch", JobsTouch, keys=2, reply=lambda call, reply: int(reply[0]))
"""Its reply: 1 the job holds the lease, 0 it does not, -1 the entry is another's."""


# -- jobs_letter.lua -------------------------------------------------------------------------


class JobsLetter(NamedTuple):
    jobs: str
    queued: str
    active: str
    again: str
    due: str
    users: str
    failed: str
    dead: str
    marks: str
    events: str
    options: str
    entry: str
    action: str  # 'retry' or 'drop'
    now_ms: int
    job: str


JOBS_LETTER = Script("jobs_letter", JobsLetter, keys=11, reply=lambda call, reply: reply[0] == 1)
"""Its reply: whether there was that dead letter, of that job, to answer."""


SCRIPTS: tuple[Script[Any, Any], ...] = (
    JOBS_DUE,
    JOBS_ENQUEUE,
    JOBS_FINISH,
    JOBS_LETTER,
    JOBS_START,
    JOBS_TOUCH,
)
