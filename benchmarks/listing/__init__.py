"""Benchmark of session listing (not a test): pages from the indexes vs loading every session.

Usage (from the repository root)::

    .venv/bin/python -m benchmarks.listing            # 100,000 sessions, ~2-3 minutes
    .venv/bin/python -m benchmarks.listing --quick    # 10,000 sessions, well under 30 s
    .venv/bin/python -m benchmarks.listing --json -   # only the JSON result on stdout
    .venv/bin/python -m benchmarks.listing --url redis://127.0.0.1:6379/0

It starts a throwaway Redis 7 and always stops it. With ``--url`` it writes only keys under a
random prefix and deletes them at the end.

Seeding: 100,000 sessions of one app spread over 1,000 users (``--quick``: 10,000 over
100), user ``i % users`` owning the i-th, each created by the real ``create_session`` with a
small state, then given one event by the real ``append_event`` (a small state delta,
including a ``user:`` key) in a shuffled order, so that the by-update index orders the
sessions differently from the by-creation one. Both run as concurrent calls
(``asyncio.gather`` in chunks) on one ``redis.asyncio.Redis`` client (bytes replies, hiredis
parser when installed).

Timed (sequential, one call at a time, ``time.perf_counter_ns`` around each awaited call):

* ``list_sessions_page(app_name, page_size=100)``: the first page, newest first by update
  (the headline, target p50 <= 5 ms at 100,000 sessions), and by creation;
* a page deep in the walk: the page after the token that 50 pages by update lead to;
* one user's first page (``user_id=``, that user's ~100 sessions);
* for contrast ``list_sessions(app_name, user_id=<one user>)`` (loads that user's ~100
  sessions) and ``list_sessions(app_name)``, which loads all sessions of the app: the call
  the pages replace, timed only up to 3 times (it takes seconds).

The page cases run in interleaved rounds (each case's share of calls per round, after
untimed warm-up calls; the order rotated from round to round), so drift on a shared machine
hits them alike; p50/p99 are over all of a case's samples. GC as in
``benchmarks.harness.timing``. Nothing writes while timing, so the deep token stays valid
and every page is the same.

A last, separate phase splits the first page's time: the index read (one round trip), the
sessions' read (one round trip), decoding and merging state, building the ``Session``
models, and the rest; plus the server's own time for those commands (``INFO
commandstats``), a short cProfile, and for reference the same hashes read raw on the same
client: as a pipeline of HGETALLs and as one EVALSHA returning them all. The latency table
also shows the commands of each round trip of a call (counted once, untimed).

The package: this module holds the plan and the constants its parts share; ``cases`` seeds
the sessions and times the cases, ``breakdown`` runs the last phase, and ``__main__`` the
run and its report.
"""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.harness import report

APP = "bench_listing"
PAGE_SIZE = 100
TARGET_PAGE_MS = 5.0
CHUNK = 64  # concurrent calls per asyncio.gather while seeding (the pool allows 100)
SEED = 20240611


progress = report.Progress("listing")


@dataclass(frozen=True)
class Plan:
    """How big the data set is and how many calls each timed case gets."""

    name: str
    sessions: int
    users: int
    calls: int  # timed calls per page case (and per user's list_sessions)
    rounds: int  # the calls are split over this many interleaved rounds
    warmup: int  # untimed calls per case before each round
    deep_pages: int  # pages followed before the deep page
    full_list_max: int  # list_sessions(app) timings at most (stops early past 20 s)
    profile_calls: int


FULL = Plan("full", 100_000, 1_000, 200, 4, 5, 50, 3, 200)
QUICK = Plan("quick", 10_000, 100, 100, 2, 5, 50, 3, 100)
