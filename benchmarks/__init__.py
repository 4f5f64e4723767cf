"""Benchmarks of redis-agent-sessions (not tests, not shipped in the wheel).

Run each from the repository root as ``.venv/bin/python -m benchmarks.<name>`` (``--help``
lists its flags; ``--quick`` is a smoke run, ``--json PATH`` keeps the result):

- ``append``: append latency against raw EVALSHA, by history size, full reads, throughput,
  where an append's and a read's time goes;
- ``reads``: the read cache against cold reads (core and ADK models), memory per JSON byte;
- ``adk``: the google-adk extra: reads against ADK's own parsing, last 20, appends;
- ``adk_turns``: ADK Runner turns on long sessions, compacted reads vs full vs sqlite;
- ``contention``: several writers on one session under the reject policy;
- ``listing``: pages of sessions from the indexes vs loading every session;
- ``memory``: memory search latency and ingestion, plain and RediSearch backends;
- ``semantic``: semantic memory: vector recall, hybrid search latency, ingestion with vectors;
- ``recall``: memory recall@5/@10 on LoCoMo conversations, ADK's memory services beside ours;
- ``facts``: learned facts on LoCoMo (an oracle generator of its annotated observations):
  recall through facts against raw events, and a consolidation step's cost against an append;
- ``footprint``: what a session, an event and a memory entry take of Redis' memory;
- ``plots``: the documentation's plots (append and read latency against session length, ours
  beside ADK's DatabaseSessionService), as SVG in ``docs/img``;
- ``transfer``: the CLI's export and import;
- ``write_concern``: what waiting for replicas or fsync costs;
- ``cluster``: a 3-primary cluster against one node;
- ``cpu``: pure CPU work (encoding, decoding, copies, cache hits), timed by pyperf;
- ``ab``: two revisions of the library against each other, in one run.

Each starts its own throwaway redis-server(s) on loopback and stops them on the way out.
The shared machinery lives in :mod:`benchmarks.harness`; a benchmark (a module, or a
package of modules such as ``cluster``) imports only the harness, its own modules, the
library and third-party packages, never another benchmark.
"""
