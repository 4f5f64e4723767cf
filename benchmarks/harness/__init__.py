"""What every benchmark shares.

- :mod:`.servers`: throwaway redis-servers on loopback (Redis 7, Redis 8.2 with modules, a
  primary with a replica, a 3-primary cluster), always stopped by pid; key cleanup and
  ``INFO commandstats`` counters.
- :mod:`.timing`: the one percentile definition, latency summaries, GC handling,
  interleaved rounds, ratios taken within a round, monkeypatch timers.
- :mod:`.workloads`: event builders (core and ADK models), seeding sessions, names.
- :mod:`.report`: tables, the environment header (with the file system a file sits on),
  ``--json PATH``, progress lines.
- :mod:`.internals`: every reach into the library's private modules, in one place.
- :mod:`.locomo`: LoCoMo conversations, questions and observations as the memory
  benchmarks read them (``recall``, ``facts``), and recall@k.
- :mod:`.svg`: a small line-chart writer for the documentation's plots (no plotting library).
"""
