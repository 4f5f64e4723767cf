"""What memory ranks by: the analysed terms of an entry and of a query, and BM25's constants.

Both backends index and query the terms computed here, so they see the same words.

- Tokens are the lowercase ``\\w+`` runs of the NFC-normalised text; the Snowball English
  stop words are dropped; ASCII tokens are reduced to their Snowball English stem ("Booked"
  and "books" are both ``book``). Other tokens stay as they are, and a token mixing Latin
  and another script also yields its single-script runs (``私はPythonを`` yields ``python``).
- An entry is found by its own words and, weaker, by those of the turns around it in its
  session (``CONTEXT``): "Yes, the blue one!" is found by the question it answers. What a
  search returns is still the event as it was said. Each word of the context weighs what
  the one turn saying it best gives, not the sum over the turns around: "Ready." between
  two turns saying "deploy" is not found by "deploy" as much as they are.
- Its author is a field of its own: a query naming the author adds ``AUTHOR_WEIGHT`` times
  the author's rarity (how few entries that author wrote) to the entries already found.

Weights are kept as integers in quarters (own words 4, one turn away 2, two away 1), so
Redis adds and removes them exactly. The figures that chose these are in
docs/memory-ranking.md (``python -m benchmarks.recall``). ``context_turns`` (0 to
``len(CONTEXT)``) is how far the context reaches when an entry is written; it is recorded
with the entry's analysis (``analysis_id``), so ``reindex`` applies a change of it to the
entries written before.

Only an entry's own terms are indexed (postings, the search module's ``terms`` field); its
weights with the context (``tf``, ``dl``) and its neighbours' ids are stored with it, so a
search finds the entries holding a word and then scores them and the turns around them.
That keeps the index as small as the words said: a context window of two turns each side
would otherwise index every word five times.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from snowballstemmer.english_stemmer import EnglishStemmer  # type: ignore[import-untyped]

__all__ = [
    "ANALYSIS",
    "AUTHOR_WEIGHT",
    "K1",
    "SUBSTRING_WEIGHT",
    "Analysed",
    "B",
    "analyse",
    "analysis_id",
    "author_terms",
    "idf",
    "neighbours",
    "query_terms",
    "text_terms",
]

ANALYSIS = 3
"""The version of the analysis, recorded in each entry: a change of what an entry is indexed
or scored by takes a new one, and ``reindex`` analyses the entries of another again (2: the
context's words summed over the turns around; 3: the best of them)."""
K1 = 1.2
B = 0.75
AUTHOR_WEIGHT = 2.0
SUBSTRING_WEIGHT = 1.0
"""A non-ASCII query word found inside a longer run (CJK text has no spaces) weighs as
one occurrence in an entry of average length."""
CONTEXT = (2, 1)
"""Quarter weights of the words of the turns 1 and 2 away (own words: 4)."""
OWN = 4


def analysis_id(context_turns: int = len(CONTEXT)) -> str:
    """What an entry records of how it was analysed: ``ANALYSIS``, and the context's reach
    when it is not the default (``3.0``: its own words only)."""
    if context_turns == len(CONTEXT):
        return str(ANALYSIS)
    return f"{ANALYSIS}.{context_turns}"


_WORD = re.compile(r"\w+")
# Snowball's English stop list (snowballstem.org), without the forms with an apostrophe,
# which \w+ never yields whole.
_STOP = frozenset(
    """i me my myself we our ours ourselves you your yours yourself yourselves he him his
    himself she her hers herself it its itself they them their theirs themselves what which
    who whom this that these those am is are was were be been being have has had having do
    does did doing would should could ought cannot a an the and but if or because as until
    while of at by for with about against between into through during before after above
    below to from up down in out on off over under again further then once here there when
    where why how all any both each few more most other some such no nor not only own same
    so than too very""".split()  # noqa: SIM905
)
_stemmer = EnglishStemmer()


@functools.lru_cache(maxsize=65536)
def _stem(token: str) -> str:
    return str(_stemmer.stemWord(token))


def _is_latin(char: str) -> bool:
    if char.isascii():
        return char.isalnum() or char == "_"
    return unicodedata.name(char, "").startswith("LATIN")


def text_terms(text: str, *, split: bool = True) -> list[str]:
    """The terms of ``text`` in order, repeated as often as they occur; with ``split``, a
    token mixing Latin and another script also yields its single-script runs (an entry's
    ``私はPythonを`` is found by ``python``; a query's stays one word)."""
    out: list[str] = []
    for token in _WORD.findall(unicodedata.normalize("NFC", text).lower()):
        if token in _STOP:
            continue
        if token.isascii():
            out.append(_stem(token))
            continue
        out.append(token)
        runs = ["".join(run) for _, run in itertools.groupby(token, _is_latin)]
        if split and len(runs) > 1:
            out.extend(_stem(r) if r.isascii() else r for r in runs if r not in _STOP)
    return out


def query_terms(text: str) -> Counter[str]:
    """A query's terms with how often it says each."""
    return Counter(text_terms(text, split=False))


def author_terms(author: str | None) -> list[str]:
    """The author field's terms (``@`` + term: never a text term), stop words kept."""
    return list(_author_terms(author)) if author else []


@functools.lru_cache(maxsize=4096)
def _author_terms(author: str) -> tuple[str, ...]:
    words = _WORD.findall(unicodedata.normalize("NFC", author).lower())
    return tuple(sorted({"@" + (_stem(w) if w.isascii() else w) for w in words}))


class _Suffixes(dict[int, str]):
    """``:<n>`` for each count met (a few dozen in practice), formatted once; a count past
    4,096 (a word said a thousand times) is not kept."""

    def __missing__(self, n: int) -> str:
        suffix = f":{n}"
        if n < 4096:
            self[n] = suffix
        return suffix


_COUNTS = _Suffixes()


@dataclass(frozen=True, slots=True)
class Analysed:
    """What one entry is found by: its own terms (how often each is said: what is indexed),
    its terms with the context (term -> quarter weight: what is scored), its quarter length
    with the context, and its author's terms."""

    own: dict[str, int]
    tf: dict[str, int]
    length: int
    authors: list[str]

    def encoded_tf(self) -> str:
        """``term:quarters`` pairs (a term is a ``\\w+`` run: never a ``:`` or a space), in
        the order ``analyse`` met them: the same for the same text and neighbours (what
        an entry is found by is compared as written; sorting cost ingestion a tenth)."""
        return " ".join([t + _COUNTS[n] for t, n in self.tf.items()])

    def encoded_own(self) -> str:
        return " ".join([t + _COUNTS[n] for t, n in self.own.items()])

    def indexed_terms(self) -> str:
        """The search module's ``terms`` field: each own term as often as it is said (its
        BM25 then ranks one term's entries as the plain backend's postings do)."""
        return " ".join([t for t, n in sorted(self.own.items()) for _ in range(min(n, 8))])


def analyse(
    own: Sequence[str], context: Iterable[tuple[int, Sequence[str]]], author: str | None
) -> Analysed:
    """An entry's weights from its own terms and its neighbours' (distance, terms).

    A context word weighs what the neighbour saying it best gives (its weight at that
    distance x how often it says it), not the sum over the neighbours: summed, a turn
    between two that each say a word once held it as firmly as they do, and outranked the
    turns that said the query's words (docs/memory-ranking.md#context)."""
    return analyse_counted(
        Counter(own), len(own), [(d, Counter(terms), len(terms)) for d, terms in context], author
    )


def analyse_counted(
    said: Mapping[str, int],
    said_length: int,
    context: Iterable[tuple[int, Mapping[str, int], int]],
    author: str | None,
) -> Analysed:
    """`analyse` of terms already counted (each term with how often it is said, in
    the order met: a ``Counter``), and their lengths: an ingestion counts each turn's terms
    once, not once more for each turn it is the context of (that was half its analysis)."""
    around: dict[str, int] = {}
    known = around.get
    length = OWN * said_length
    for distance, counts, terms in context:
        weight = CONTEXT[distance - 1]
        length += weight * terms
        for term, n in counts.items():
            # A comparison, not max(): this runs for every context word of every entry.
            if weight * n > known(term, 0):
                around[term] = weight * n
    tf = {t: OWN * n for t, n in said.items()}
    for term, quarters in around.items():
        tf[term] = tf.get(term, 0) + quarters
    return Analysed(dict(said), tf, length, author_terms(author))


def neighbours(sessions: Sequence[str], reach: int = len(CONTEXT)) -> list[list[tuple[int, int]]]:
    """For entries in conversation order, each one's (distance, index) in the same session,
    up to ``reach`` turns away on either side (at most ``len(CONTEXT)``)."""
    out: list[list[tuple[int, int]]] = []
    for i in range(len(sessions)):
        around = []
        for distance in range(1, min(reach, len(CONTEXT)) + 1):
            for j in (i - distance, i + distance):
                if 0 <= j < len(sessions) and sessions[j] == sessions[i]:
                    around.append((distance, j))
        out.append(around)
    return out


def idf(entries: int, df: int) -> float:
    """Lucene's BM25 idf: never negative, however common the term."""
    return math.log(1 + (entries - df + 0.5) / (df + 0.5))
