"""The two ways of answering a query: RediSearch, or the plain backend's postings script.

Both return entry ids ranked by the number of distinct query words matched, then newest
first (equal times: larger id first), at most ``limit``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from redis.exceptions import ResponseError

from . import _scripts
from ._codec import text
from ._memory_store import owner_tag
from ._memory_text import query_grams
from .errors import MemoryIndexError
from .keys import KeySpace

__all__ = ["IndexSearch", "PlainSearch", "has_search_module"]

_MIN_SEARCH_VERSION = 20000

# (attribute, type, options): the search backend's view of an entry hash.
_SCHEMA = (
    ("app", "TAG", ()),
    ("user", "TAG", ()),
    ("words", "TEXT", ("NOSTEM", "SORTABLE", "UNF")),
    ("grams", "TEXT", ("NOSTEM",)),
    ("lower", "TEXT", ("NOINDEX", "SORTABLE", "UNF")),
    ("id", "TEXT", ("NOINDEX", "SORTABLE", "UNF")),
    ("ts", "NUMERIC", ("SORTABLE",)),
)


async def has_search_module(client: Any) -> bool:
    """Whether ``MODULE LIST`` shows RediSearch 2.x or later."""
    try:
        modules = await client.execute_command("MODULE", "LIST")
    except ResponseError:
        return False  # no MODULE command (fakeredis) or not allowed: search is not usable
    for module in modules:
        info = (
            module
            if isinstance(module, dict)
            else dict(zip(module[::2], module[1::2], strict=True))
        )
        info = {text(k): v for k, v in info.items()}
        if text(info.get("name", b"")).lower() == "search":
            return int(info.get("ver", 0)) >= _MIN_SEARCH_VERSION
    return False


def _escape_term(word: str) -> str:
    # Query words are \w runs; escaping every ASCII non-alphanumeric keeps them plain
    # terms whatever the query parser treats as syntax.
    return "".join(c if c.isalnum() or not c.isascii() else "\\" + c for c in word)


class IndexSearch:
    """Queries one RediSearch index covering every app and user under the key prefix."""

    def __init__(self, client: Any, keys: KeySpace) -> None:
        self._redis = client
        self._index = keys.memory_index()
        self._prefix = keys.memory_index_prefix()
        self._ready = False

    async def ensure_index(self) -> None:
        """Create the index unless it exists; an existing one must have our schema."""
        if self._ready:
            return
        schema = [part for name, kind, opts in _SCHEMA for part in (name, kind, *opts)]
        try:
            await self._redis.execute_command(
                "FT.CREATE", self._index, "ON", "HASH", "PREFIX", 1, self._prefix,
                "STOPWORDS", 0, "SCHEMA", *schema,
            )  # fmt: skip
        except ResponseError as exc:
            if "already exists" not in str(exc).lower():
                raise
            await self._check_existing()
        self._ready = True

    async def _check_existing(self) -> None:
        info = await self._redis.execute_command("FT.INFO", self._index)
        info = _as_dict(info)
        definition = _as_dict(info.get("index_definition", []))
        prefixes = [text(p) for p in definition.get("prefixes", [])]
        found = {}
        for attr in info.get("attributes", []):
            attr = _as_dict(attr) if not isinstance(attr, list) else _flags(attr)
            found[text(attr.get("attribute", b""))] = text(attr.get("type", b""))
        want = {name: kind for name, kind, _ in _SCHEMA}
        if prefixes != [self._prefix] or any(found.get(n) != k for n, k in want.items()):
            raise MemoryIndexError(
                f"RediSearch index {self._index!r} exists with another definition "
                f"(prefixes {prefixes}, fields {found}); drop it or use another key_prefix"
            )

    async def search(self, app: str, user: str, words: Iterable[str], limit: int) -> list[str]:
        clauses, tests = [], []
        for word in sorted(words):
            if word.isascii():
                clauses.append(f"@words:{_escape_term(word)}")
                tests.append(f'(contains(@words, " {word} ") > 0)')
            else:
                grams = " ".join(_escape_term(g) for g in sorted(query_grams(word)))
                clauses.append(f"@grams:({grams})")
                tests.append(f'(contains(@lower, "{word}") > 0)')
        query = f"@app:{{{owner_tag(app)}}} @user:{{{owner_tag(user)}}} ({' | '.join(clauses)})"
        reply = await self._redis.execute_command(
            "FT.AGGREGATE", self._index, query,
            "LOAD", 4, "@words", "@lower", "@ts", "@id",
            "APPLY", " + ".join(tests), "AS", "n",
            "FILTER", "@n > 0",
            "SORTBY", 6, "@n", "DESC", "@ts", "DESC", "@id", "DESC", "MAX", limit,
            "DIALECT", 2,
        )  # fmt: skip
        return [_row_id(row) for row in _rows(reply)]


def _as_dict(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return {text(k): v for k, v in value.items()}
    return {text(k): v for k, v in zip(value[::2], value[1::2], strict=True)}


def _flags(attr: list[Any]) -> dict[str, Any]:
    # RESP2 FT.INFO attributes mix key/value pairs with bare flags (SORTABLE, NOSTEM).
    out: dict[str, Any] = {}
    i = 0
    while i < len(attr):
        key = text(attr[i]) if isinstance(attr[i], (bytes, str)) else ""
        if key in ("identifier", "attribute", "type", "WEIGHT", "SEPARATOR") and i + 1 < len(attr):
            out[key] = attr[i + 1]
            i += 2
        else:
            i += 1
    return out


def _rows(reply: Any) -> list[Any]:
    if isinstance(reply, dict):
        return [
            _as_dict(r).get("extra_attributes", {})
            for r in reply[b"results" if b"results" in reply else "results"]
        ]
    return [_as_dict(r) for r in reply[1:]]


def _row_id(row: Any) -> str:
    return text(_as_dict(row)["id"])


class PlainSearch:
    """Runs ``memory_search.lua`` over the query words' postings, in one round trip."""

    def __init__(self, client: Any, keys: KeySpace) -> None:
        self._keys = keys
        self._script = _scripts.register(client, "memory_search")

    async def search(self, app: str, user: str, words: Iterable[str], limit: int) -> list[str]:
        keys = [self._keys.memory_texts(app, user)]
        args: list[Any] = [limit, 0]
        for word in sorted(words):
            if word.isascii():
                postings, verify = [self._keys.memory_word(app, user, word)], ""
            else:
                grams = sorted(query_grams(word))
                postings, verify = [self._keys.memory_gram(app, user, g) for g in grams], word
            args.append(len(postings))
            for key in postings:
                keys.append(key)
                args.append(len(keys))
            args.append(verify)
            args[1] += 1
        reply = await self._script(keys=keys, args=args)
        return [text(x) for x in reply[::2]]
