"""The operator CLI on learned facts (issue 43): `facts` lists a user's facts with their
history, deletes one, and `stats` shows the generations; each command run as a subprocess
on real Redis 7 and the real cluster, the facts made by the core service driven by a scripted
fake model (no network), as tests/test_memory_facts.py makes them."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from _cli import Cli
from redis_agent_sessions import (
    Content,
    Event,
    FactSettings,
    GenerationRequest,
    MemoryEntry,
    MemoryOperation,
    Part,
    RedisMemoryService,
    SessionServiceConfig,
)

APP = "booking"
Answer = Callable[[GenerationRequest], Sequence[Any]]


class Scripted:
    """The fake model: answers each request with the next scripted function of it (as in
    tests/test_memory_facts.py)."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)

    async def generate(self, request: GenerationRequest) -> Sequence[Any]:
        if not self.answers:
            raise AssertionError(f"an unexpected generation: {request.events}")
        return self.answers.pop(0)(request)


def add(text: str, *topics: str, ttl: int | None = None) -> Answer:
    return lambda request: [
        MemoryOperation(action="add", fact=text, topics=list(topics), ttl_seconds=ttl)
    ]


def update(old: str, text: str) -> Answer:
    def answer(request: GenerationRequest) -> list[MemoryOperation]:
        [fact] = [f for f in request.facts if old in f.text]
        return [MemoryOperation(action="update", fact_id=fact.id, fact=text, topics=["home"])]

    return answer


def delete(old: str) -> Answer:
    def answer(request: GenerationRequest) -> list[MemoryOperation]:
        [fact] = [f for f in request.facts if old in f.text]
        return [MemoryOperation(action="delete", fact_id=fact.id)]

    return answer


def said(text: str, ts: float) -> Event:
    return Event(author="user", timestamp=ts, content=Content(role="user", parts=[Part(text=text)]))


async def seed(cli: Cli) -> None:
    """alice: Paris, updated to Berlin; tea (for an hour); jazz, added then deleted. bob:
    trains. Five generations: 4 facts added, 1 updated, 1 deleted; 3 stored."""
    model = Scripted(
        add("The user lives in Paris.", "home"),
        update("Paris", "The user lives in Berlin."),
        lambda r: [
            *add("The user likes tea.", "food", ttl=3600)(r),
            *add("The user likes jazz.")(r),
        ],
        delete("jazz"),
        add("The user travels by train."),
    )
    config = SessionServiceConfig(key_prefix=cli.prefix)
    async with cli.client() as client, cli.service() as sessions:
        memory = RedisMemoryService(client, config=config, generator=model, facts=FactSettings())
        steps = [
            ("alice", "s1", "I live in Paris"),
            ("alice", "s1", "I moved to Berlin"),
            ("alice", "s2", "I like tea and jazz"),
            ("alice", "s2", "no more jazz"),
            ("bob", "s3", "I go everywhere by train"),
        ]
        for i, (user, sid, text) in enumerate(steps):
            session = await sessions.get_session(app_name=APP, user_id=user, session_id=sid)
            if session is None:
                session = await sessions.create_session(app_name=APP, user_id=user, session_id=sid)
            await sessions.append_event(session, said(text, 1_800_000_000.0 + i))
            await memory.add_session_to_memory(session)
    assert model.answers == []


async def test_facts_lists_newest_first_with_their_history(cli: Cli) -> None:
    await seed(cli)
    listed = cli.json("facts", APP, "alice")
    assert [(f["text"], f["revision"], f["topics"]) for f in listed] == [
        ("The user likes tea.", 1, ["food"]),
        ("The user lives in Berlin.", 2, ["home"]),
    ]
    tea, berlin = listed
    assert tea["expires"] is not None
    assert berlin["expires"] is None
    assert tea["updated"].endswith("Z")
    assert "history" not in tea
    assert [s["session_id"] for s in berlin["sources"]] == ["s1"]

    human = cli.run("facts", APP, "alice")
    assert human.returncode == 0, human.stderr
    lines = human.stdout.splitlines()
    assert lines[0].split() == ["ID", "TEXT", "TOPICS", "REV", "UPDATED", "EXPIRES", "SOURCES"]
    row = lines[1]
    assert row.startswith(tea["id"])
    for cell in ("The user likes tea.", "food", tea["updated"], tea["expires"], "s2 (1 event)"):
        assert cell in row
    assert "Berlin" in lines[2]
    assert "Paris" not in human.stdout
    assert lines[-1] == "2 facts of user 'alice' in app 'booking'"

    [tea_h, berlin_h] = cli.json("facts", APP, "alice", "--history")
    assert tea_h["history"] == []
    [paris] = berlin_h["history"]
    assert (paris["text"], paris["revision"], paris["topics"]) == (
        "The user lives in Paris.",
        1,
        ["home"],
    )
    assert paris["updated"].endswith("Z")
    assert (paris["labels"], paris["expires"]) == ({}, None)
    assert (berlin_h["metadata"], berlin_h["revision_labels"]) == ({}, {})
    human = cli.run("facts", APP, "alice", "--history")
    lines = human.stdout.splitlines()
    # The earlier revision sits under the fact it became.
    assert "Berlin" in lines[2]
    assert "was: The user lives in Paris." in lines[3]
    assert lines[-1].endswith("; 1 earlier revision shown")


async def test_facts_delete_forgets_one_fact_and_its_history(cli: Cli) -> None:
    await seed(cli)
    berlin = next(f for f in cli.json("facts", APP, "alice") if "Berlin" in f["text"])
    done = cli.run("facts", APP, "alice", "--delete", berlin["id"])
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == (
        f"deleted fact {berlin['id']!r} of user 'alice' in app 'booking' "
        "(revision 2, 1 earlier revision): The user lives in Berlin."
    )
    assert [f["text"] for f in cli.json("facts", APP, "alice")] == ["The user likes tea."]
    client = cli.client()
    async with client:
        history = f"{cli.prefix}:mem:{{{APP}:alice}}:fact:{berlin['id']}:history"
        assert await client.exists(history) == 0

    again = cli.run("facts", APP, "alice", "--delete", berlin["id"])
    assert again.returncode == 1
    assert again.stderr.strip() == (
        f"redis-agent-sessions: no learned fact {berlin['id']!r} of user 'alice' in app 'booking'"
    )
    tea = cli.json("facts", APP, "alice")[0]
    deleted = cli.json("facts", APP, "alice", "--delete", tea["id"])
    assert deleted == {"deleted": {**tea, "history_revisions": 0}}
    gone = cli.run("facts", APP, "alice")
    assert gone.returncode == 1
    assert gone.stderr.strip().endswith("no learned facts of user 'alice' in app 'booking'")


async def test_facts_refuses_what_is_no_fact(cli: Cli) -> None:
    nothing = cli.run("facts", APP, "alice")
    # Nothing in memory: no backend chosen, and the read-only command chooses none.
    assert nothing.returncode == 1
    assert "no memory backend was ever chosen" in nothing.stderr
    await seed(cli)
    assert cli.run("facts", APP, "carol").returncode == 1
    assert cli.run("facts", "nope", "alice").returncode == 1
    # A memory entry that is not a fact is not deleted as one.
    config = SessionServiceConfig(key_prefix=cli.prefix)
    async with cli.client() as client:
        memory = RedisMemoryService(client, config=config)
        note = MemoryEntry(id="m1", content=Content(parts=[Part(text="allergic to peanuts")]))
        await memory.add_memory(app_name=APP, user_id="alice", memories=[note])
        refused = cli.run("facts", APP, "alice", "--delete", "m1")
        assert refused.returncode == 1
        assert "no learned fact 'm1'" in refused.stderr
        found = await memory.search_memory(app_name=APP, user_id="alice", query="peanuts")
        assert [m.id for m in found.memories] == ["m1"]
    usage = cli.run("facts", APP, "alice", "--delete", " x")
    assert usage.returncode == 2
    both = cli.run("facts", APP, "alice", "--delete", "x", "--history")
    assert both.returncode == 2


async def test_stats_counts_generations_and_facts_per_app(cli: Cli) -> None:
    await seed(cli)
    report = cli.json("stats")
    [booking] = report["apps"]
    assert booking["learned_facts"] == {
        "facts_stored": 3,
        "generations": 5,
        "facts_added": 4,
        "facts_updated": 1,
        "facts_deleted": 1,
        "facts_expired": 0,
    }
    human = cli.run("stats", APP)
    assert human.returncode == 0, human.stderr
    assert (
        "booking: learned facts: 3 stored, 5 generations (4 added, 1 updated, 1 deleted, 0 expired)"
    ) in human.stdout.splitlines()
    # A deletion by an operator is counted, and is no generation.
    tea = next(f for f in cli.json("facts", APP, "alice") if "tea" in f["text"])
    assert cli.run("facts", APP, "alice", "--delete", tea["id"]).returncode == 0
    [booking] = cli.json("stats", APP)["apps"]
    assert (booking["learned_facts"]["facts_stored"], booking["learned_facts"]["generations"]) == (
        2,
        5,
    )
    assert booking["learned_facts"]["facts_deleted"] == 2


async def test_stats_without_learned_facts_says_nothing_of_them(cli: Cli) -> None:
    async with cli.service() as sessions:
        await sessions.create_session(app_name="plain", user_id="u", session_id="s")
    report = cli.json("stats")
    assert [a["learned_facts"] for a in report["apps"]] == [None]
    assert "learned facts" not in cli.run("stats").stdout
    assert json.loads(cli.run("stats", "plain", "--json").stdout)["apps"][0]["sessions"] == 1
