"""LoCoMo conversations as the memory benchmarks read them (``recall``, ``facts``).

LoCoMo (Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM Agents", ACL
2024), GitHub snap-research/locomo, ``data/locomo10.json`` or the files of
``data/locomo10.zip``. A path: a folder of its conversation files (or one file; a file may
hold a list, as ``locomo10.json`` does). Never commit the data to this repository.

One (app, user) per conversation, one session per ``session_N``, one event per turn: author
= speaker, text = ``text`` (+ `` [shares <blip_caption>]``), timestamp = the session's
``session_N_date_time`` (UTC) + the turn's index in seconds; event id ``s<N>t<i>``, mapped
back to the turn's ``dia_id``. Questions of categories 1-4 that name evidence are kept (5 has
no answer). ``session_N_observation`` (facts about each speaker, each naming the turns it
comes from) is read too, for the learned facts' oracle.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol, TypeVar

from benchmarks.harness import timing
from redis_agent_sessions.models import Content, Event, Part, Session

__all__ = [
    "APP",
    "CATEGORIES",
    "Conversation",
    "Observation",
    "Question",
    "Turn",
    "conversation",
    "data_summary",
    "load_locomo",
    "recall",
    "recall_summary",
    "session",
    "timed_searches",
]

APP = "locomo"
WARMUP = 5
"""Questions each service is asked, untimed, before the timed searches."""


class Timed(Protocol):
    samples_ns: list[int]


T = TypeVar("T", bound=Timed)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
DATE_FORMAT = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"


@dataclass
class Turn:
    event_id: str
    dia_id: str
    speaker: str
    text: str
    timestamp: float


@dataclass
class Question:
    user: str
    text: str
    category: int
    evidence: tuple[str, ...]


@dataclass
class Observation:
    """One of ``session_N_observation``'s facts, and the turns (dia_ids) it names."""

    speaker: str
    text: str
    dia_ids: tuple[str, ...]


@dataclass
class Conversation:
    user: str
    sessions: dict[str, list[Turn]]
    questions: list[Question]
    skipped: int  # questions of categories 1-4 naming no evidence
    dia_ids: dict[str, str] = field(default_factory=dict)  # event id -> dia_id
    observations: dict[str, list[Observation]] = field(default_factory=dict)  # by session


def dia_id_list(value: Any) -> tuple[str, ...]:
    """A dia_id as LoCoMo writes it: ``"D1:3"``, ``["D1:3", "D1:4"]`` or ``"D1:3; D1:4"``."""
    items = value if isinstance(value, list) else [value]
    found = (part.strip() for item in items for part in re.split(r"[;,]", str(item)))
    return tuple(dict.fromkeys(p for p in found if p))


def _observations(raw: dict[str, Any], conv: dict[str, Any], n: int) -> list[Observation]:
    key = f"session_{n}_observation"
    # The per-conversation files have it at the top; locomo10.json under "observation".
    found = raw.get(key) or (raw.get("observation") or {}).get(key) or conv.get(key) or {}
    return [
        Observation(str(speaker), str(item[0]), dia_id_list(item[1]))
        for speaker, items in found.items()
        for item in items
        if isinstance(item, list) and len(item) >= 2
    ]


def conversation(name: str, raw: dict[str, Any]) -> Conversation:
    """One LoCoMo sample: the flat per-conversation file, or ``locomo10.json``'s entry."""
    conv = raw.get("conversation", raw)
    sample = str(raw.get("sample_id", name))  # locomo10.json: "conv-26"; its files: "26"
    user = sample if sample.startswith("conv-") else f"conv-{sample}"
    keys = [k for k, v in conv.items() if re.fullmatch(r"session_\d+", k) and isinstance(v, list)]
    sessions: dict[str, list[Turn]] = {}
    observations: dict[str, list[Observation]] = {}
    for n in sorted(int(k.removeprefix("session_")) for k in keys):
        when = conv.get(f"session_{n}_date_time")
        try:
            start = datetime.strptime(str(when), DATE_FORMAT).replace(tzinfo=timezone.utc)
        except ValueError:
            message = f"{name}: session_{n}_date_time {when!r} is not like {DATE_FORMAT!r}"
            raise SystemExit(message) from None
        turns = sessions[f"session_{n}"] = []
        for i, turn in enumerate(conv[f"session_{n}"]):
            text = str(turn["text"])
            if turn.get("blip_caption"):
                text += f" [shares {turn['blip_caption']}]"
            event_id, dia_id, speaker = f"s{n}t{i}", str(turn["dia_id"]), str(turn["speaker"])
            turns.append(Turn(event_id, dia_id, speaker, text, start.timestamp() + i))
        observations[f"session_{n}"] = _observations(raw, conv, n)
    questions, skipped = [], 0
    for qa in (qa for qa in raw.get("qa", []) if qa.get("category") in CATEGORIES):
        evidence = tuple(dict.fromkeys(str(e) for e in qa.get("evidence") or ()))
        if evidence:
            questions.append(Question(user, str(qa["question"]), int(qa["category"]), evidence))
        skipped += not evidence
    found = Conversation(user, sessions, questions, skipped, observations=observations)
    found.dia_ids = {t.event_id: t.dia_id for turns in sessions.values() for t in turns}
    return found


def load_locomo(path: Path) -> list[Conversation]:
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    if not files:
        raise SystemExit(f"--locomo {path}: no *.json conversation files there")
    out = []
    for file in files:
        raw = json.loads(file.read_text(encoding="utf-8"))
        samples = raw if isinstance(raw, list) else [raw]
        for i, sample in enumerate(samples):
            name = file.stem if len(samples) == 1 else f"{file.stem}-{i}"
            out.append(conversation(name, sample))
    return out


def session(conv: Conversation, sid: str, adk: bool) -> Any:
    """``session_N`` as an ADK session (``adk``) or this library's: one event per turn."""
    models: tuple[Any, ...] = (Session, Event, Content, Part)
    if adk:
        from google.adk.events import Event as AdkEvent
        from google.adk.sessions import Session as AdkSession
        from google.genai import types

        models = (AdkSession, AdkEvent, types.Content, types.Part)
    session_class, event_class, content_class, part_class = models
    events = [
        event_class(id=t.event_id, author=t.speaker, timestamp=t.timestamp,
                    content=content_class(role="user", parts=[part_class(text=t.text)]))
        for t in conv.sessions[sid]
    ]  # fmt: skip
    return session_class(id=sid, app_name=APP, user_id=conv.user, events=events)


def recall(found: Sequence[Collection[str]], evidence: tuple[str, ...], k: int) -> float:
    """The share of ``evidence`` named by the first ``k`` results of ``found``, each result
    naming the turns it stands for (an event its own; a learned fact those it comes from)."""
    named: set[str] = set().union(*found[:k])
    return sum(e in named for e in evidence) / len(evidence)


def recall_summary(
    found: Sequence[Sequence[Collection[str]]], questions: Sequence[Question]
) -> dict[str, Any]:
    """Recall@5, @10 and @1..10 over every question (``found``: each one's results), and
    @5 and @10 by category."""

    def mean_recall(rows: list[int], k: int) -> float | None:
        if not rows:
            return None
        return sum(recall(found[i], questions[i].evidence, k) for i in rows) / len(rows)

    every = list(range(len(questions)))
    by_category = {}
    for cat, name in CATEGORIES.items():
        rows = [i for i in every if questions[i].category == cat]
        by_category[str(cat)] = {"name": name, "questions": len(rows),
                                 "recall_at_5": mean_recall(rows, 5),
                                 "recall_at_10": mean_recall(rows, 10)}  # fmt: skip
    return {
        "recall_at_5": mean_recall(every, 5), "recall_at_10": mean_recall(every, 10),
        "recall_at_k": [mean_recall(every, k) for k in range(1, 11)], "by_category": by_category,
    }  # fmt: skip


async def timed_searches(
    services: Sequence[T],
    questions: Sequence[Question],
    search: Callable[[T, Question], Awaitable[Any]],
    record: Callable[[T, Question, Any], None],
    progress: Callable[[str], None] | None = None,
) -> None:
    """Every question asked of every service, the services taking turns question by
    question (after ``WARMUP`` questions each, untimed): each search's time appended to the
    service's ``samples_ns``, its response given to ``record``."""
    for service in services:
        for q in questions[:WARMUP]:
            await search(service, q)
    clock = time.perf_counter_ns
    with timing.settled_gc():
        for i, q in enumerate(questions):
            for service in timing.rotate(list(services), i):
                start = clock()
                response = await search(service, q)
                service.samples_ns.append(clock() - start)
                record(service, q, response)
            if progress is not None and (i + 1) % 100 == 0:
                progress(f"{i + 1} of {len(questions)} questions")


def data_summary(path: Path, convs: list[Conversation], questions: list[Question]) -> Any:
    known = {c.user: set(c.dia_ids.values()) for c in convs}
    evidence = [(q.user, e) for q in questions for e in q.evidence]
    missing = [{"conversation": u, "evidence": e} for u, e in evidence if e not in known[u]]
    return {
        "path": str(path), "conversations": [c.user for c in convs],
        "sessions": sum(len(c.sessions) for c in convs),
        "turns": sum(len(c.dia_ids) for c in convs), "questions": len(questions),
        "questions_by_category": {str(k): sum(q.category == k for q in questions)
                                  for k in CATEGORIES},
        "skipped_no_evidence": sum(c.skipped for c in convs), "evidence_ids": len(evidence),
        "evidence_not_found": len(missing), "missing_evidence": missing,
    }  # fmt: skip
