"""The operator CLI on background generation (issue 54): `facts jobs` shows the queue by
shard, `facts dead-letters` lists, retries and drops dead letters, `facts worker` runs
jobs in an OS process of its own until SIGTERM, then stops cleanly, and `stats` shows each
app's queue among its other counts; on real Redis 7 and the real cluster."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

from _cli import Cli
from redis_agent_sessions import (
    CallableGenerator,
    Content,
    Event,
    FactSettings,
    FactWorker,
    GenerationRequest,
    MemoryOperation,
    Part,
    RedisMemoryService,
    SessionServiceConfig,
)
from redis_agent_sessions.keys import KeySpace

APP = "booking"
TESTS = Path(__file__).resolve().parent
DEADLINE = 60.0
"""The most a wait on the worker process may take (a hung worker fails, not a timing)."""


def likes(request: GenerationRequest) -> list[MemoryOperation]:
    """As tests/facts_generators.py's ``likes`` (which the worker process imports)."""
    if request.user_id == "bad":
        raise RuntimeError("the model is down for bad")
    return [
        MemoryOperation(action="add", fact=f"The user said: {e.content.text}", topics=["likes"])
        for e in request.events
        if e.content is not None and e.content.text.startswith("I like")
    ]


def memory(cli: Cli, client: Any) -> RedisMemoryService:
    config = SessionServiceConfig(key_prefix=cli.prefix)
    facts = FactSettings(mode="background")
    return RedisMemoryService(
        client, config=config, generator=CallableGenerator(likes), facts=facts
    )


async def seed(cli: Cli, client: Any, *users: str) -> None:
    """A session of each user saying what they like, recorded as a job."""
    async with cli.service() as sessions:
        for user in users:
            session = await sessions.create_session(app_name=APP, user_id=user, session_id="s1")
            told = Content(role="user", parts=[Part(text=f"I like {user}'s trains")])
            await sessions.append_event(session, Event(author="user", content=told))
            await memory(cli, client).add_session_to_memory(session)


async def test_jobs_and_dead_letters_are_shown_retried_and_dropped(cli: Cli) -> None:
    async with cli.client() as client:
        await seed(cli, client, "bad", "good")
        queued = cli.json("facts", "jobs", APP)
        assert len(queued) == 8  # every shard of a named app
        assert sum(row["queued"] for row in queued) == 2
        assert all(row["dead_letters"] == 0 for row in queued)
        human = cli.run("facts", "jobs")  # every app: the shards holding something
        assert human.returncode == 0, human.stderr
        assert human.stdout.splitlines()[0].split()[:3] == ["APP", "SHARD", "QUEUED"]
        assert len(human.stdout.splitlines()) == 1 + len(
            {r["shard"] for r in queued if r["queued"]}
        )

        service = memory(cli, client)
        async with FactWorker(service, max_attempts=1, poll_interval=0.01):
            await service.wait_for_generation(app_name=APP, user_id="good", timeout=DEADLINE)
            await service.wait_for_generation(app_name=APP, user_id="bad", timeout=DEADLINE)
        [letter] = cli.json("facts", "dead-letters", APP)
        assert (letter["user"], letter["session_id"], letter["kind"]) == ("bad", "s1", "session")
        assert "RuntimeError: the model is down for bad" in letter["error"]
        assert letter["at"].endswith("Z")
        listed = cli.run("facts", "dead-letters", APP)
        assert letter["id"] in listed.stdout
        assert listed.stdout.splitlines()[-1] == "1 dead letter in app 'booking'"
        assert sum(row["dead_letters"] for row in cli.json("facts", "jobs", APP)) == 1

        missing = cli.run("facts", "dead-letters", APP, "--drop", "3/1-0")
        assert missing.returncode == 1
        assert "no dead letter '3/1-0'" in missing.stderr
        retried = cli.run("facts", "dead-letters", APP, "--retry", letter["id"])
        assert retried.returncode == 0, retried.stderr
        assert retried.stderr.startswith(f"queued again: dead letter {letter['id']}")
        assert cli.run("facts", "dead-letters", APP).returncode == 1  # none left
        assert sum(row["queued"] for row in cli.json("facts", "jobs", APP)) == 1


async def test_facts_worker_runs_jobs_until_sigterm(cli: Cli, processes: list[Any]) -> None:
    async with cli.client() as client:
        await seed(cli, client, "ann", "bo")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent / "src"), str(TESTS)])}
        proc = await asyncio.create_subprocess_exec(
            *cli.argv("facts", "worker", "--generator", "import:facts_generators:likes",
                      "--concurrency", "2", "--grace", "5"),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        )  # fmt: skip
        processes.append(proc)
        service = memory(cli, client)
        for user in ("ann", "bo"):
            await service.wait_for_generation(app_name=APP, user_id=user, timeout=DEADLINE)
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), DEADLINE)
        assert proc.returncode == 0, err.decode()
        lines = err.decode().splitlines()
        assert lines[0].startswith("facts worker ")
        assert "running jobs of every app in the registry, 2 at a time" in lines[0]
        assert " stopped: 2 jobs done, 0 to retry, 0 dead" in lines[-1]
        for user in ("ann", "bo"):
            [fact] = await service.list_facts(app_name=APP, user_id=user)
            assert fact.text == f"The user said: I like {user}'s trains"
        assert not any(row["pending"] for row in cli.json("facts", "jobs", APP))


async def test_facts_worker_needs_a_generator_and_an_app_named_worker_stays_reachable(
    cli: Cli,
) -> None:
    no_model = cli.run("facts", "worker")
    assert no_model.returncode == 2
    assert "name the model: --generator" in no_model.stderr
    # `facts -- worker USER`: the facts of an app named "worker".
    flags = ["--url", cli.url, "--key-prefix", cli.prefix, *(["--cluster"] if cli.cluster else [])]
    assert cli.forker is not None
    named = cli.forker.run(["facts", *flags, "--", "worker", "alice"], stdin=None)
    assert named.returncode == 1
    assert "nothing is in memory yet" in named.stderr or "no learned facts" in named.stderr


async def test_stats_shows_each_shards_backlog_pending_oldest_job_and_dead_letters(
    cli: Cli,
) -> None:
    async with cli.client() as client:
        await seed(cli, client, "bad", "good")
        async with cli.service() as sessions:  # an app that never queued a job
            await sessions.create_session(app_name="plain", user_id="u", session_id="s")
        keys = KeySpace(cli.prefix)
        holding = [keys.job_shard(APP, user) for user in ("bad", "good")]
        # A worker that read the good user's job and was killed before it started it: the
        # entry is pending (handed out, not acknowledged) and the job is still queued.
        stream = keys.jobs(APP, holding[1]).jobs
        await client.xgroup_create(stream, "workers", id="0", mkstream=True)
        [[_, [_]]] = await client.xreadgroup("workers", "killed", {stream: ">"}, 1)

        apps = {a["app_name"]: a for a in cli.json("stats")["apps"]}
        assert (apps["plain"]["background_jobs"], apps["plain"]["background_jobs_unknown"]) == (
            [],
            None,
        )
        shards = apps[APP]["background_jobs"]
        assert [row["shard"] for row in shards] == list(range(8))
        for row in shards:
            waiting = holding.count(row["shard"])
            assert (row["backlog"], row["queued"], row["deferred"]) == (waiting, waiting, 0)
            assert (row["oldest_age"] is not None) == bool(waiting)
            assert row["pending"] == (1 if row["shard"] == holding[1] else 0)
            assert (row["active"], row["dead_letters"], row["dropped"]) == (0, 0, 0)
        human = cli.run("stats", APP).stdout.splitlines()
        header = human.index(next(line for line in human if "BACKLOG" in line))
        assert human[header].split() == [
            "APP",
            "SHARD",
            "BACKLOG",
            "PENDING",
            "OLDEST",
            "DEAD",
            "LETTERS",
        ]
        shown = [line.split() for line in human[header + 1 : header + 1 + len(set(holding))]]
        assert sorted(int(cells[1]) for cells in shown) == sorted(set(holding))
        assert all(cells[0] == APP and cells[4].endswith("s") for cells in shown)
        assert any(line.startswith("BACKLOG: ") for line in human)

        # A worker takes the killed one's job over, runs both: the bad user's is a dead letter.
        service = memory(cli, client)
        worker = FactWorker(
            service, max_attempts=3, retry_delay=0.01, visibility_timeout=1.0, poll_interval=0.01
        )
        async with worker:
            for user in ("bad", "good"):
                await service.wait_for_generation(app_name=APP, user_id=user, timeout=DEADLINE)
        assert worker.counts["claimed"] >= 1  # more only if a heartbeat came late, harmless
        assert not await client.xpending_range(stream, "workers", "-", "+", 10, "killed")
        shards = cli.json("stats", APP)["apps"][0]["background_jobs"]
        assert [row["dead_letters"] for row in shards] == [int(n == holding[0]) for n in range(8)]
        assert not any(row["backlog"] or row["pending"] or row["active"] for row in shards)
        human = cli.run("stats").stdout.splitlines()
        header = human.index(next(line for line in human if "BACKLOG" in line))
        assert human[header + 1].split() == [APP, str(holding[0]), "0", "0", "-", "1"]
        assert not human[header + 2].startswith(("booking", "plain"))
