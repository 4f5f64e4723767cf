"""Every error this library raises derives from [`RedisSessionsError`][].

Errors that ADK callers already catch as ``ValueError`` (stale and missing sessions,
bad input) also derive from ``ValueError`` so existing ``except ValueError`` code keeps
working. Errors from redis-py itself (connection loss, timeouts) propagate unwrapped, except
a lost connection that redis-py lets out as a bare ``AttributeError`` or ``TypeError``:
that one is a [`ConnectionLostError`][], which is redis-py's ``ConnectionError`` too.
"""

from __future__ import annotations

from redis.exceptions import ConnectionError as RedisConnectionError

__all__ = [
    "AlreadyExistsError",
    "BacklogFullError",
    "ConnectionLostError",
    "ConsolidationConflictError",
    "CorruptDataError",
    "EmbeddingError",
    "GenerationError",
    "GenerationTimeoutError",
    "IncompleteSessionError",
    "InvalidInputError",
    "LayoutVersionError",
    "MemoryIndexError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RedisSessionsError",
    "SessionNotFoundError",
    "StaleSessionError",
    "StoreFullError",
    "WriteConcernError",
]

# Third-party code matches on this exact text (ADK's DatabaseSessionService and its ports).
STALE_SESSION_MESSAGE = (
    "The session has been modified in storage since it was loaded. "
    "Please reload the session before appending more events."
)


class RedisSessionsError(Exception):
    """Root of every error raised by redis-agent-sessions."""


class InvalidInputError(RedisSessionsError, ValueError):
    """An argument was rejected before anything was written."""


class PayloadTooLargeError(InvalidInputError):
    """An encoded event or state exceeds the configured ``max_payload_bytes``."""

    def __init__(self, what: str, size: int, limit: int) -> None:
        super().__init__(f"{what} is {size} bytes encoded, over the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class AlreadyExistsError(RedisSessionsError):
    """A session with that id already exists (like ADK's, not a ValueError)."""


class SessionNotFoundError(RedisSessionsError, ValueError):
    """The session does not exist (never created, deleted, or expired)."""


class StaleSessionError(RedisSessionsError, ValueError):
    """Another writer appended to the session after this copy was loaded; nothing was written."""

    def __init__(self, message: str = STALE_SESSION_MESSAGE) -> None:
        super().__init__(message)


class CorruptDataError(RedisSessionsError):
    """Data stored in Redis does not have the shape this library writes."""

    def __init__(self, key: str, detail: str) -> None:
        super().__init__(f"corrupt data at Redis key {key!r}: {detail}")
        self.key = key
        self.detail = detail


class IncompleteSessionError(RedisSessionsError):
    """Some of a session's keys are gone while its metadata remains: Redis evicted them
    apart under a ``maxmemory-policy`` that may evict this store's keys (or they were
    deleted by hand). Nothing is returned or written for such a session, so an agent is
    never handed part of a conversation as if it were whole; ``delete_session`` removes it
    (``redis-agent-sessions incomplete APP --delete`` finds and removes them all).

    ``missing`` names what is gone: ``"events"``, ``"event ids"`` (the index that makes
    retried appends idempotent) or ``"session state"``.
    """

    def __init__(
        self, app_name: str, user_id: str, session_id: str, missing: list[str], key: str
    ) -> None:
        super().__init__(
            f"session {session_id!r} of user {user_id!r} in app {app_name!r} is incomplete: "
            f"its {' and '.join(missing)} {'are' if len(missing) > 1 else 'is'} missing from "
            f"Redis (keys of {key!r}), most likely evicted under maxmemory-policy. Nothing "
            "was returned or written; delete the session (delete_session, or "
            f"`redis-agent-sessions incomplete {app_name} --delete`)"
        )
        self.app_name = app_name
        self.user_id = user_id
        self.session_id = session_id
        self.missing = list(missing)


class LayoutVersionError(RedisSessionsError):
    """The store records a Redis layout newer than this version of the library reads (the
    ``<prefix>:layout`` key, see docs/layout-spec.md): workers of a newer release, or of
    another language, wrote it. Raised at a service's first operation, before it reads or
    writes anything else, so that no worker misreads keys whose meaning changed. Run a
    release that reads ``found`` (or point this service at another prefix).
    """

    def __init__(self, key: str, found: str, supported: int) -> None:
        super().__init__(
            f"the store records layout {found} ({key!r}), but this version of "
            f"redis-agent-sessions reads layout {supported} and older: nothing was read or "
            "written. Upgrade the workers to a release that reads it "
            "(docs/layout-spec.md)"
        )
        self.key = key
        self.found = found
        self.supported = supported


class StoreFullError(RedisSessionsError):
    """Redis refused a write because it is out of memory (``used_memory`` at ``maxmemory``
    under ``maxmemory-policy noeviction``). Nothing was written; reads and deletes keep
    working. Free memory (delete or expire sessions) or raise ``maxmemory``, then retry."""

    def __init__(self, detail: str = "") -> None:
        super().__init__(
            "Redis is out of memory and refuses writes (maxmemory reached under "
            "maxmemory-policy noeviction); nothing was written. Reads and deletes still work: "
            "free memory or raise maxmemory, then retry"
            + (f" (Redis said: {detail})" if detail else "")
        )


class EmbeddingError(RedisSessionsError):
    """The memory service's embedder failed, or returned vectors that cannot be stored (a
    wrong count or dimension, a value that is not a finite number, an all-zero vector).
    Raised before anything is written: the previous entries stay as they were."""


class GenerationError(RedisSessionsError):
    """The memory service's generator failed, or returned what cannot be applied (not a list
    of operations, a fact too long or empty, an id it was not shown: another user's, or
    none at all). Raised before the step it failed is written: the facts and the session's
    watermark stay as that step found them, so its events are offered again next time. A
    long session is read in steps of 50 events, each written on its own: the steps of the
    call before the failed one stay written."""


class ConsolidationConflictError(RedisSessionsError):
    """Other workers kept changing the facts a generator's operations touch (or processed
    the same events first) through every attempt: nothing of that step was written (the
    steps of the call before it, 50 events each, stay written)."""


class BacklogFullError(RedisSessionsError):
    """Background generation's queue holds as many jobs as ``FactSettings.max_backlog``
    allows for the user's shard (or one job's waiting events reached their bound): the
    request was refused and nothing was written. The workers are behind or stopped; start
    more, or retry later."""


class GenerationTimeoutError(RedisSessionsError, TimeoutError):
    """``wait_for_generation`` waited its ``timeout`` while jobs were still queued, deferred
    or running for the session or user; they go on (nothing is cancelled)."""


class MemoryIndexError(RedisSessionsError):
    """Memory cannot use its index or backend as configured.

    Raised when a RediSearch index name is taken by an index of another definition, when
    the ``search`` backend is asked for but the server (or cluster) has no usable search
    module, when this service's backend or embedder disagrees with the one the store
    records (``redis-agent-sessions reembed`` moves a store to another embedder), or when that
    record cannot be written. Nothing is written to the memory entries.
    """


class PermissionDeniedError(RedisSessionsError):
    """The Redis ACL user may not run a command (or touch a key) an operation needs.

    Scripts ask before their first write, so a script refused this way wrote nothing;
    ``command`` is the Redis command to grant (``+<command>``; None when Redis refused a
    key, not a command), ``key`` the key it was for (None when Redis did not say).
    """

    def __init__(self, command: str | None, key: str | None, detail: str = "") -> None:
        what = f"run {command.upper()}" if command else "use a key"
        on = f" on key {key!r}" if key else ""
        super().__init__(
            f"the Redis user may not {what}{on}{': ' + detail if detail else ''}. Grant it "
            "(docs/security.md#least-privilege-acl) or connect as a user that has it"
        )
        self.command = command.upper() if command else None
        self.key = key


class ConnectionLostError(RedisSessionsError, RedisConnectionError):
    """A connection to Redis was lost during the call, and redis-py said so with an
    ``AttributeError`` or ``TypeError`` from inside its transport instead of its own
    ``ConnectionError`` (a pooled connection reset by the server, or closed by redis-py's
    own failover handling while in use: redis-py issue 4287). It derives from redis-py's
    ``ConnectionError`` too, so code that retries on that retries on this.

    Like any connection error, the call may have written in part, or not at all; retrying
    it is safe (a retried append is recognised as a duplicate). ``__cause__`` is the error
    redis-py raised.
    """


class WriteConcernError(RedisSessionsError):
    """The write was not confirmed as the configured ``write_concern`` asks.

    ``written`` says whether it landed on the primary: a shortfall after the write (too
    few replicas confirmed in time) does not undo it, and it may be lost if the primary
    fails before the replicas catch up; retrying is safe (writes are idempotent) and waits
    again. ``written`` is False when the server cannot confirm that way at all (checked
    before the first write).
    """

    def __init__(self, message: str, *, written: bool) -> None:
        super().__init__(message)
        self.written = written
