"""Words and character grams that memory search matches on (ADK InMemoryMemoryService rules).

Query words are the lowercase ``\\w+`` runs of the NFC-normalised query. An entry matches
an ASCII query word when the word is one of its searchable words; it matches a non-ASCII
query word when the word occurs anywhere in its lowercased text (CJK is written without
spaces, so whole sentences are single ``\\w+`` runs). Substring matching is served by an
index of the grams below and then verified against the text.
"""

from __future__ import annotations

import itertools
import re
import unicodedata

__all__ = [
    "entry_grams",
    "lowered_text",
    "query_grams",
    "query_words",
    "searchable_words",
    "term_count",
]

_WORD = re.compile(r"\w+")


def query_words(text: str) -> set[str]:
    """The distinct lowercase words of ``text``."""
    return {word.lower() for word in _WORD.findall(unicodedata.normalize("NFC", text))}


def _is_latin(char: str) -> bool:
    if char.isascii():
        return char.isalnum() or char == "_"
    return unicodedata.name(char, "").startswith("LATIN")


def searchable_words(text: str) -> set[str]:
    """Query words plus the single-script runs of tokens mixing Latin and other scripts.

    ``私はPythonを`` is one ``\\w+`` token; its run ``python`` becomes a word of its own so
    that an ASCII query word can match it, while ``thon`` still does not.
    """
    words = query_words(text)
    for word in list(words):
        if not word.isascii():
            words.update("".join(run) for _, run in itertools.groupby(word, _is_latin))
    return words


def lowered_text(text: str) -> str:
    """What non-ASCII query words are looked for in."""
    return unicodedata.normalize("NFC", text).lower()


def _bigrams(word: str) -> set[str]:
    return {a + b for a, b in itertools.pairwise(word) if not (a + b).isascii()}


def entry_grams(words: set[str]) -> set[str]:
    """Non-ASCII characters and character pairs with a non-ASCII member, of non-ASCII words.

    Every non-ASCII query word occurring in the entry's text has all its
    ``query_grams`` here, so they select a superset of the matches, verified after.
    """
    grams: set[str] = set()
    for word in words:
        if not word.isascii():
            grams.update(c for c in word if not c.isascii())
            grams.update(_bigrams(word))
    return grams


def query_grams(word: str) -> set[str]:
    """The grams an entry must have to contain the non-ASCII ``word``."""
    return _bigrams(word) or {c for c in word if not c.isascii()}


def term_count(text: str) -> int:
    """What the memory limits count of ``text``: its distinct searchable words, and outside
    ASCII their characters and pairs of characters. No fewer than the terms and grams an
    entry is indexed by or a query looks up, and cheap: no stemming."""
    words = searchable_words(text)
    return len(words) + len(entry_grams(words))
