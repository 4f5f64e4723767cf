"""``recall --scale N``: LoCoMo's turns planted among N synthetic ones, for one user.

One user holds N entries in sessions of 100. Every session of the dev conversations keeps
its turns in order and together (so a turn keeps its real neighbours), at a random place
of a random session of 100; the other turns are synthetic: each as long as a real turn
drawn at random, its words drawn from all the real turns' words (as often as they are
said), its author the conversation's speakers in turn. Time goes forward turn by turn and
the real sessions keep their order. The seed makes it the same every run.

Then each question of the conversations (categories 1-4) is asked for its evidence turns,
(its evidence named after its conversation: dia_ids repeat across them), of both backends
and of an exact BM25 computed here over every entry's own words, with the
library's analyser, idf, k1 and b: the recall a candidate step that misses nothing would
give without the context and the author.
"""

from __future__ import annotations

import random
import re
from collections import Counter, defaultdict
from dataclasses import replace

from benchmarks.harness.internals import analysis
from benchmarks.harness.locomo import Conversation, Question, Turn

__all__ = ["SESSION", "exact_bm25", "plant"]

SESSION = 100
"""Turns in each session of the store."""
_WORD = re.compile(r"\w+")


def plant(convs: list[Conversation], n: int, seed: int = 55) -> Conversation:
    """``n`` entries for one user (named after the first conversation): every real session
    of ``convs`` and synthetic turns around them (see the module's doc)."""
    rng = random.Random(seed)
    # dia_ids ("D1:3") repeat across conversations: each is named after its own here.
    real = [[replace(t, dia_id=f"{c.user}/{t.dia_id}") for t in turns]
            for c in convs for turns in c.sessions.values() if turns]  # fmt: skip
    count = sum(len(turns) for turns in real)
    if count > n or any(len(turns) > SESSION for turns in real):
        raise SystemExit(f"--scale {n}: too small for the {count} real turns")
    words = [w for turns in real for t in turns for w in _WORD.findall(t.text)]
    lengths = [len(_WORD.findall(t.text)) or 1 for turns in real for t in turns]
    speakers = sorted({t.speaker for turns in real for t in turns})
    synthetic = n - count
    # Each real session goes in after this many synthetic turns (their order kept).
    after = sorted(rng.randrange(synthetic + 1) for _ in real)
    start = min(t.timestamp for t in real[0])
    sessions: dict[str, list[Turn]] = {}
    dia_ids: dict[str, str] = {}
    current: list[Turn] = []

    def add(turn: Turn) -> None:
        nonlocal current
        current.append(turn)
        if len(current) == SESSION:
            sessions[f"h{len(sessions)}"], current = current, []

    def event_id() -> str:
        return f"h{len(sessions)}t{len(current)}"

    made, block = 0, 0
    while made < synthetic or block < len(real):
        if block < len(real) and after[block] == made:
            turns = real[block]
            block += 1
            if len(current) + len(turns) > SESSION:  # a session is never cut in two
                sessions[f"h{len(sessions)}"], current = current, []
            for t in turns:
                dia_ids[event_id()] = t.dia_id
                add(Turn(event_id(), t.dia_id, t.speaker, t.text, start + 60.0 * made + block))
            continue
        text = " ".join(rng.choices(words, k=rng.choice(lengths)))
        speaker = speakers[made % len(speakers)]
        made += 1
        add(Turn(event_id(), "", speaker, text, start + 60.0 * made))
    if current:
        sessions[f"h{len(sessions)}"] = current
    user = convs[0].user
    questions = [
        Question(user, q.text, q.category, tuple(f"{c.user}/{e}" for e in q.evidence))
        for c in convs
        for q in c.questions
    ]
    return Conversation(user, sessions, questions, 0, dia_ids)


def exact_bm25(store: Conversation, limit: int = 10) -> list[list[frozenset[str]]]:
    """Each question's first ``limit`` entries by BM25 over their own words (every entry
    scored: no candidate step), as dia_ids (``?``: a synthetic turn); equal scores newest
    first."""
    postings: dict[str, list[tuple[int, int]]] = defaultdict(list)
    lengths: list[int] = []
    ids: list[str] = []
    for turns in store.sessions.values():
        for t in turns:
            terms = analysis.text_terms(t.text)
            for term, tf in Counter(terms).items():
                postings[term].append((len(ids), tf))
            lengths.append(len(terms))
            ids.append(t.event_id)
    n, average = len(ids), sum(lengths) / max(len(ids), 1)
    k1, b = analysis.K1, analysis.B
    found = []
    for q in store.questions:
        scores: dict[int, float] = defaultdict(float)
        for term, times in analysis.query_terms(q.text).items():
            posting = postings.get(term, [])
            weight = times * analysis.idf(n, len(posting))
            for at, tf in posting:
                scores[at] += (
                    weight * tf * (k1 + 1) / (tf + k1 * (1 - b + b * lengths[at] / average))
                )
        # Entries were read oldest first: a larger position is newer.
        best = sorted(scores.items(), key=lambda s: (-s[1], -s[0]))[:limit]
        found.append([frozenset({store.dia_ids.get(ids[at], "?")}) for at, _ in best])
    return found
