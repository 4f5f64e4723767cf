"""The search module's indexes, by ``IndexLayout``: the shared ones made when the
backend opens, a user's (cluster) at their first write, and an app's (``per_app``) only
checked by workers, because an operator makes them (``IndexDefinitions.provision``,
``redis-agent-sessions tenant create``) with a connection that may create indexes.

Every refusal of a search command is a PermissionDeniedError naming the command and the
index (Redis's NOPERM reply names neither when a key pattern refused the index name).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import NoPermissionError, ResponseError

from redis_agent_sessions._health import PROBE_ID
from redis_agent_sessions._redis.codec import text
from redis_agent_sessions._redis.scripts import permission_error
from redis_agent_sessions._redis.topology import Topology
from redis_agent_sessions.errors import MemoryIndexError, PermissionDeniedError
from redis_agent_sessions.memory._indexes import IndexLayout, provision_hint
from redis_agent_sessions.memory._vectors import Semantic, vector_fields

__all__ = ["SCHEMA", "IndexDefinitions", "Provisioned", "as_dict", "missing_index"]

# (attribute, type, options): the search backend's view of an entry hash, what the ranking
# asks of it (_ranking.IndexRanker): an owner's entries by their terms or grams, and by time.
SCHEMA = (
    ("app", "TAG", ()),
    ("user", "TAG", ()),
    ("grams", "TEXT", ("NOSTEM",)),
    ("terms", "TEXT", ("NOSTEM",)),
    ("ts", "NUMERIC", ("SORTABLE",)),
)

Run = Callable[[list[tuple[Any, ...]]], Awaitable[list[Any]]]


def missing_index(exc: ResponseError) -> bool:
    """Whether the search module said the index does not exist."""
    said = str(exc).lower()
    return "unknown index" in said or "no such index" in said


@dataclass(frozen=True, slots=True)
class Provisioned:
    """What an operator's step on an app's indexes made, found, rebuilt or dropped."""

    made: list[str] = field(default_factory=list)
    found: list[str] = field(default_factory=list)
    rebuilt: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


class IndexDefinitions:
    """Makes and checks the indexes of one layout (and, for an operator, an app's)."""

    def __init__(
        self, topology: Topology, layout: IndexLayout, semantic: Semantic | None = None
    ) -> None:
        self._topology = topology
        self.layout = layout
        self._keys = layout.keys
        self._semantic = semantic
        self._ready: set[tuple[str, str]] = set()

    def run_for(self, app: str, user: str) -> Run:
        """Runs search commands where the (app, user)'s index lives, in one round trip."""
        key = self._keys.memory_entries(app, user)

        async def run(commands: list[tuple[Any, ...]]) -> list[Any]:
            return await typed_refusals(self._topology.at_key(key, commands), commands)

        return run

    def _run_on(self, node: str) -> Run:
        async def run(commands: list[tuple[Any, ...]]) -> list[Any]:
            return await typed_refusals(self._topology.at_node(node, commands), commands)

        return run

    async def prepare(self, *, rebuild: bool = False) -> None:
        """Before the backend is recorded: make the shared index, which proves this client
        can use the module. (Other indexes are made at their owner's first write or by an
        operator: the module is asked now, about an index that does not exist, so that a
        server without it fails here and not at a user's first write. A user limited to
        one app's keys is refused that question, which proves the module is there: Redis
        looks a command up before it checks the keys.)"""
        if self.layout.scope == "shared":
            await self.ensure(rebuild=rebuild)
            return
        probe = self.layout.index(PROBE_ID, PROBE_ID)
        try:
            await self.run_for(PROBE_ID, PROBE_ID)([("FT.INFO", probe)])
        except PermissionDeniedError:
            return
        except ResponseError as exc:
            if not missing_index(exc):
                raise

    async def ensure(self, app: str = "", user: str = "", *, rebuild: bool = False) -> None:
        """The indexes of (app, user) exist with our definition: made unless they exist
        (checked only, when provisioned). With ``rebuild``, a vector index of another
        definition is dropped (not its hashes) and made again (for ``reembed``)."""
        owner = self.layout.owner(app, user)
        if owner in self._ready:
            return
        run, prefix = self.run_for(app, user), self.layout.prefix(app, user)
        index, vectors = self.layout.index(app, user), self.layout.vector_index(app, user)
        if self.layout.provisioned:
            await self._check_provisioned(run, app, index, vectors, prefix)
            self._ready.add(owner)
            return
        if rebuild and self._semantic is not None:
            await self._drop_other_vectors(run, vectors, prefix, self._want_vectors())
        await self._create(run, index, prefix, _keyword_schema(), vector=False)
        if self._semantic is not None:
            await self._create(run, vectors, prefix, self._vector_schema(), vector=True)
        self._ready.add(owner)

    async def provision(
        self, app: str, *, vectors: tuple[int, str] | None, rebuild: bool = False
    ) -> Provisioned:
        """An operator's step: make the app's indexes (per app; on a cluster on every
        primary), and with ``vectors`` (dimensions, algorithm) its vector indexes; with
        ``rebuild``, a vector index of another definition is dropped (not its hashes) and
        made again. Idempotent: what exists with our definition is left alone."""
        done = Provisioned()
        prefix = self._keys.memory_app_index_prefix(app)
        for run, index, vector_index in await self._app_indexes(app):
            made = await self._create(run, index, prefix, _keyword_schema(), vector=False)
            (done.made if made else done.found).append(index)
            if vectors is None:
                continue
            if rebuild and await self._drop_other_vectors(run, vector_index, prefix, vectors):
                done.rebuilt.append(vector_index)
            made = await self._create(
                run, vector_index, prefix, vector_fields(*vectors), vector=True, want=vectors
            )
            (done.made if made else done.found).append(vector_index)
        return done

    async def drop(self, app: str) -> list[str]:
        """An operator's step: drop the app's indexes (never their hashes); the names
        dropped."""
        dropped = []
        for run, *names in await self._app_indexes(app):
            for name in names:
                try:
                    await run([("FT.DROPINDEX", name)])
                except ResponseError as exc:
                    if not missing_index(exc):
                        raise
                    continue
                dropped.append(name)
        return dropped

    async def _app_indexes(self, app: str) -> list[tuple[Run, str, str]]:
        """(where, keyword index, vector index) of each of the app's index pairs."""
        layout = self.layout
        if layout.scope == "app_shard":
            pairs = []
            for node in await self._topology.primary_names():
                n = layout.shard_on(app, node)
                pairs.append((
                    self._run_on(node),
                    self._keys.memory_app_shard_index(app, n),
                    self._keys.memory_app_shard_vector_index(app, n),
                ))  # fmt: skip
            return pairs
        if layout.scope != "app":
            raise MemoryIndexError(
                "per-app indexes need memory_index='per_app' (and the search backend)"
            )
        run = self.run_for(app, "")
        names = self._keys.memory_app_index(app), self._keys.memory_app_vector_index(app)
        return [(run, *names)]

    async def _create(
        self,
        run: Run,
        index: str,
        prefix: str,
        schema: list[Any],
        *,
        vector: bool,
        want: tuple[int, str] | None = None,
    ) -> bool:
        """Whether it made the index (False: it existed, and has our definition)."""
        try:
            await run([(
                "FT.CREATE", index, "ON", "HASH", "PREFIX", 1, prefix,
                "STOPWORDS", 0, "SCHEMA", *schema,
            )])  # fmt: skip
            return True
        except ResponseError as exc:
            if "already exists" not in str(exc).lower():
                if vector:
                    raise MemoryIndexError(
                        f"cannot create the vector index {index!r}: {exc} (is the "
                        f"{(want or self._want_vectors())[1]} algorithm supported "
                        "by this server's search module?)"
                    ) from exc
                raise
        if vector:
            await self._check_vectors(run, index, prefix, want or self._want_vectors(), "")
        else:
            await self._check_keyword(run, index, prefix, fix="")
        return False

    async def _check_provisioned(
        self, run: Run, app: str, index: str, vectors: str, prefix: str
    ) -> None:
        fix = provision_hint(app)
        try:
            await self._check_keyword(run, index, prefix, fix=fix)
            if self._semantic is not None:
                await self._check_vectors(run, vectors, prefix, self._want_vectors(), fix)
        except ResponseError as exc:
            if not missing_index(exc):
                raise
            raise MemoryIndexError(
                f"the memory index of app {app!r} does not exist here ({exc}): {fix}"
            ) from exc

    async def _definition(self, run: Run, index: str) -> tuple[list[str], dict[str, Any]]:
        """An existing index's key prefixes, and its attributes by name (FT.INFO)."""
        [info] = await run([("FT.INFO", index)])
        info = as_dict(info)
        prefixes = [text(p) for p in as_dict(info.get("index_definition", [])).get("prefixes", [])]
        attributes = {}
        for attr in info.get("attributes", []):
            attr = as_dict(attr) if not isinstance(attr, list) else _flags(attr)
            attributes[text(attr.get("attribute", b""))] = attr
        return prefixes, attributes

    def _want_vectors(self) -> tuple[int, str]:
        assert self._semantic is not None
        return self._semantic.vectorizer.dimensions, self._semantic.index

    def _vector_schema(self) -> list[Any]:
        return vector_fields(*self._want_vectors())

    async def _drop_other_vectors(
        self, run: Run, index: str, prefix: str, want: tuple[int, str]
    ) -> bool:
        """Drop a vector index of another definition (not its hashes); whether it did."""
        try:
            await self._check_vectors(run, index, prefix, want, "")
        except MemoryIndexError:
            await run([("FT.DROPINDEX", index)])
            return True
        except ResponseError as exc:
            if not missing_index(exc):
                raise
        return False

    async def _check_vectors(
        self, run: Run, index: str, prefix: str, want: tuple[int, str], fix: str
    ) -> None:
        prefixes, attributes = await self._definition(run, index)
        vec = attributes.get("vec", {})
        found = (
            text(vec.get("type", b"")),
            text(vec.get("algorithm", b"")).upper(),
            int(vec.get("dim", 0) or 0),
        )
        wanted = ("VECTOR", want[1], want[0])
        if prefixes != [prefix] or found != wanted:
            raise MemoryIndexError(
                f"RediSearch vector index {index!r} exists with another definition (prefixes "
                f"{prefixes}, vec {found}; this service needs {wanted}): "
                + (
                    fix + ", with --rebuild-vectors"
                    if fix
                    else "re-embed with `redis-agent-sessions reembed`, which rebuilds it, "
                    "or use another key_prefix"
                )
            )

    async def _check_keyword(self, run: Run, index: str, prefix: str, *, fix: str) -> None:
        prefixes, attributes = await self._definition(run, index)
        found = {name: text(attr.get("type", b"")) for name, attr in attributes.items()}
        want = {name: kind for name, kind, _ in SCHEMA}
        if prefixes != [prefix] or any(found.get(n) != k for n, k in want.items()):
            raise MemoryIndexError(
                f"RediSearch index {index!r} exists with another definition "
                f"(prefixes {prefixes}, fields {found}); "
                + (fix if fix else "drop it or use another key_prefix")
            )


async def typed_refusals(
    replies: Awaitable[list[Any]], commands: list[tuple[Any, ...]]
) -> list[Any]:
    """``replies``, with Redis's NOPERM refusal of a search command raised as a
    PermissionDeniedError naming the command and the index (or key) it was for."""
    try:
        return await replies
    except NoPermissionError as exc:
        command, key = (text(commands[0][0]), text(commands[0][1])) if commands else (None, None)
        named = permission_error(exc, key)
        raise PermissionDeniedError(named.command or command, key, str(exc)) from exc


def _keyword_schema() -> list[Any]:
    return [part for name, kind, opts in SCHEMA for part in (name, kind, *opts)]


def as_dict(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return {text(k): v for k, v in value.items()}
    return {text(k): v for k, v in zip(value[::2], value[1::2], strict=True)}


def _flags(attr: list[Any]) -> dict[str, Any]:
    # RESP2 FT.INFO attributes mix key/value pairs with bare flags (SORTABLE, NOSTEM).
    out: dict[str, Any] = {}
    i = 0
    while i < len(attr):
        key = text(attr[i]) if isinstance(attr[i], (bytes, str)) else ""
        if key in _VALUED and i + 1 < len(attr):
            out[key] = attr[i + 1]
            i += 2
        else:
            i += 1
    return out


_VALUED = ("identifier", "attribute", "type", "WEIGHT", "SEPARATOR", "algorithm", "dim")
