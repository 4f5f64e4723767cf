"""What every operator command gets: a connected client, the services, and output helpers.

Exit codes are the CLI's contract: 0 ok, 1 not found / nothing matched (or data that cannot
be read), 2 usage or connection error, each failure with one line on stderr.
"""

from __future__ import annotations

import argparse
import datetime as dt
import errno
import os
import re
import sys
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
from pydantic import ValidationError
from redis.exceptions import AuthenticationError, NoPermissionError
from redis.exceptions import ConnectionError as RedisConnectionError
from rich.console import Console, ConsoleOptions, RenderResult
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from redis_agent_sessions._messages import plural, visible
from redis_agent_sessions._redis.codec import check_id
from redis_agent_sessions._redis.lifecycle import AnyRedis, client_for
from redis_agent_sessions._redis.redact import redact_url
from redis_agent_sessions._redis.uri import parse_service_url, problems
from redis_agent_sessions.config import SessionServiceConfig
from redis_agent_sessions.errors import InvalidInputError, RedisSessionsError
from redis_agent_sessions.keys import KeySpace
from redis_agent_sessions.memory import RedisMemoryService
from redis_agent_sessions.memory._context import DEFAULT_CONTEXT_TURNS
from redis_agent_sessions.memory._url import context_setting
from redis_agent_sessions.models import Event, Session
from redis_agent_sessions.sessions import RedisSessionService
from redis_agent_sessions.sessions._engine import SessionEngine

_T = TypeVar("_T")
Advance = Callable[[int, int], None]
"""A progress callback: ``(done, total)``."""

__all__ = [
    "CliError",
    "Context",
    "NotFound",
    "UsageError",
    "connect",
    "first_line",
    "json_bytes",
    "no_session",
    "sessions_of_whom",
    "utc",
    "when",
]

DEFAULT_URL = "redis://localhost:6379/0"


class CliError(Exception):
    """Ends a command with ``code`` and this one line on stderr."""

    code = 1


class NotFound(CliError):
    code = 1


class UsageError(CliError):
    code = 2


def no_session(args: argparse.Namespace) -> NotFound:
    """For commands naming APP USER SESSION."""
    return NotFound(f"no session {args.session!r} of user {args.user!r} in app {args.app!r}")


def sessions_of_whom(app: str, user: str | None) -> str:
    """``app 'x'`` or ``user 'u' of app 'x'``, as messages name a listing."""
    return f"user {user!r} of app {app!r}" if user else f"app {app!r}"


@dataclass
class Context:
    """A connected client and the services every command uses; ``out`` is stdout."""

    client: AnyRedis
    config: SessionServiceConfig
    url: str
    json: bool = False
    memory_backend: str = "auto"
    """The URL's ``memory_backend``: what the services built from the same URL would use."""
    out: Console = field(default_factory=lambda: _console())
    err: Console = field(default_factory=lambda: _Safe(stderr=True, highlight=False))

    def __post_init__(self) -> None:
        self.sessions = RedisSessionService(self.client, config=self.config)
        self.keys = KeySpace(self.config.key_prefix)
        self._import_engine: SessionEngine[Any, Any] | None = None

    def memory(self, **settings: Any) -> RedisMemoryService:
        """The memory service of the URL's settings (its ``memory_backend``), on this client."""
        backend: Any = self.memory_backend
        # The URL's context_turns: reindex analyses entries as the URL's services write them.
        params = parse_service_url(self.url).memory
        settings.setdefault("context_turns", context_setting(params, DEFAULT_CONTEXT_TURNS))
        return RedisMemoryService(self.client, config=self.config, backend=backend, **settings)

    @property
    def engine(self) -> SessionEngine[Session, Event]:
        return self.sessions._engine

    @property
    def import_engine(self) -> SessionEngine[Any, Any]:
        """The engine imports write through: ADK's models when the [adk] extra is installed,
        so summary events of ADK's compaction get their read index as they would from a
        Runner; the core models (which keep every ADK field) otherwise."""
        if self._import_engine is None:
            try:
                from redis_agent_sessions.adk import RedisSessionService as AdkService
            except ImportError:
                self._import_engine = self.engine
            else:
                adk = AdkService(client=self.client, config=self.config)
                self._import_engine = adk._engine
        return self._import_engine

    @property
    def cluster(self) -> bool:
        """Whether the sessions use the cluster layout (no app-wide by-update index)."""
        return self.engine.layout.name == "cluster"

    async def app_index(self, app_name: str) -> tuple[str, str, int]:
        """The checked app name, its session index and the index's size, for the commands
        that walk an app's sessions; NotFound when it indexes none."""
        app = check_id("app_name", app_name)
        index = self.keys.app_sessions(app)
        total = int(await self.client.zcard(index))
        if not total:
            raise NotFound(f"no sessions indexed for app {app!r}")
        return app, index, total

    def print_json(self, value: Any) -> None:
        """One JSON document (or line) on stdout, exactly as given."""
        sys.stdout.buffer.write(json_bytes(value) + b"\n")
        sys.stdout.buffer.flush()

    def table(self, *columns: str, show_header: bool = True) -> Table:
        table = _Trimmed(box=None, header_style="bold", pad_edge=False, show_header=show_header)
        for column in columns:
            table.add_column(column, no_wrap=True)
        return table

    @contextmanager
    def progress(self, description: str, total: int | None) -> Iterator[Progress]:
        """A progress bar on stderr (only drawn on a terminal, or with RAS_PROGRESS=1)."""
        show = self.err.is_terminal or os.environ.get("RAS_PROGRESS") == "1"
        progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.err,
            disable=not show,
            transient=False,
        )
        with progress:
            progress.add_task(description, total=total)
            yield progress

    async def tracked(self, description: str, work: Callable[[Advance], Awaitable[_T]]) -> _T:
        """``work(on_progress)`` under a progress bar; ``on_progress(done, total)``."""
        with self.progress(description, None) as bar:
            task = bar.task_ids[0]

            def advance(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

            return await work(advance)

    def walked(
        self, app: str | None, users: int, entries: int, current: int, payload: dict[str, Any]
    ) -> str | None:
        """The end of a walk over stored memory (``reindex``, ``reembed``): NotFound when
        it met no entry; with ``--json``, ``payload`` printed and None; else the summary
        line's start, for the command to finish."""
        if not entries:
            whose = "the store" if app is None else f"app {app!r}"
            raise NotFound(f"no memory entries in {whose}")
        if self.json:
            self.print_json(payload)
            return None
        return (
            f"{plural(entries, 'entry', 'entries')} of "
            f"{plural(users, 'user')}: {current:,} already current"
        )


class _Trimmed(Table):
    """A table whose lines end at their last character: rich pads every cell to its
    column's width, the last one too, which leaves trailing spaces in files and diffs."""

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        rendered = (
            segment
            for item in super().__rich_console__(console, options)
            for segment in ([item] if isinstance(item, Segment) else console.render(item, options))
        )
        for line in Segment.split_lines(rendered):
            yield from _rstrip(line)
            yield Segment.line()


def _rstrip(line: list[Segment]) -> Iterable[Segment]:
    while line and not line[-1].control:
        text, style, control = line[-1]
        if text.rstrip(" "):
            line[-1] = Segment(text.rstrip(" "), style, control)
            break
        line.pop()
    return line


class _Safe(Console):
    """rich's console for output that quotes stored data: no markup and no emoji codes (an
    id ``[bold]`` or ``:x:`` is printed as it is), and every string with its control
    characters shown (``visible``, line by line: the commands' own messages may span
    lines). Text objects are not strings here: whoever builds one from stored data passes
    the data through ``visible`` first."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(markup=False, emoji=False, **settings)

    def render_str(self, text: str, **options: Any) -> Text:
        return super().render_str("\n".join(map(visible, text.split("\n"))), **options)


class _Stdout(_Safe):
    """rich's console, but a reader that went away ends the command as any other write to
    stdout does (the CLI's entry point stops quietly): rich would exit 1 by itself."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


def _console() -> Console:
    """stdout; when it is not a terminal (a pipe, a file), lines are never wrapped."""
    console = _Stdout(highlight=False, soft_wrap=True)
    if not console.is_terminal:
        console = _Stdout(highlight=False, soft_wrap=True, width=10_000)
    return console


_UNSAFE_IN_JSON = re.compile(rb"\x7f|\xc2[\x80-\x9f]|\xe2\x80[\xa8\xa9]")
"""DEL, the C1 controls and U+2028/2029 in UTF-8 (each byte sequence is only ever that
character): JSON allows them raw, and orjson writes them raw, but a terminal obeys C1's CSI
(U+009B) as it does ESC [."""


def json_bytes(value: Any) -> bytes:
    """``value`` as JSON for ``--json`` output: orjson's, with the characters it leaves raw
    that a terminal would act on written as ``\\u`` escapes (the same JSON to a parser)."""
    raw = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    return _UNSAFE_IN_JSON.sub(lambda m: b"\\u%04x" % ord(m[0].decode()), raw)


def utc(timestamp: float | None) -> str | None:
    """An epoch time in the one format of every command's output, tables and ``--json``
    alike: UTC, ISO-8601 with the zone marked, to the second (``2026-11-25T07:40:31Z``)."""
    if timestamp is None:
        return None
    try:
        moment = dt.datetime.fromtimestamp(timestamp, tz=dt.timezone.utc)
    except (OverflowError, ValueError, OSError):
        # A time no datetime can hold (1e300, NaN) was written by hand: the library refuses
        # one. Shown as the number, so that one such session does not stop a listing.
        return repr(timestamp)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def when(timestamp: float | None) -> str:
    """``utc`` for a table cell or a message: ``-`` for no time."""
    return utc(timestamp) or "-"


NO_REDIS_HINT = (
    "; if no Redis listens there, start one (docs/tutorial.md#2-have-a-redis) or a throwaway"
    " one, `redis-agent-sessions demo --keep-server` (the [demo] extra), and pass the URL"
    " it prints as --url or REDIS_URL"
)
"""The next step when nothing answers: a newcomer's first command often meets no Redis."""


def _nothing_there(exc: BaseException) -> bool:
    """Whether the PING found no server (refused, unreachable, timed out) rather than one
    that refused us (a wrong password is a server answering)."""
    if isinstance(exc, AuthenticationError):
        return False
    return isinstance(exc, (RedisConnectionError, TimeoutError, OSError))


async def connect(args: argparse.Namespace) -> Context:
    """The client for ``--url`` (or REDIS_URL), checked with a PING."""
    url = args.url or os.environ.get("REDIS_URL") or DEFAULT_URL
    shown = redact_url(url)
    try:
        parsed = parse_service_url(url)
        config = parsed.config(None)
    except (InvalidInputError, ValueError) as exc:
        raise _bad_url(shown, exc) from None
    if args.key_prefix is not None:
        config = _with_prefix(config, args.key_prefix)
    try:
        if parsed.memory_backend not in (None, "auto", "search", "plain"):
            raise InvalidInputError(
                f"memory_backend must be auto, search or plain: {parsed.memory_backend!r}"
            )
        client = client_for(parsed, config, args.cluster, {})
    except (InvalidInputError, ValueError) as exc:
        raise _bad_url(shown, exc) from None
    try:
        await client.ping()
    except NoPermissionError:
        pass  # a least-privilege user may not PING; the refusal is an answer
    except Exception as exc:
        await client.aclose()
        message = f"cannot reach Redis at {shown}: {first_line(exc)}"
        if _nothing_there(exc):
            message = message.rstrip(".") + NO_REDIS_HINT
        raise UsageError(message) from None
    try:
        return Context(
            client=client,
            config=config,
            url=url,
            json=getattr(args, "json", False),
            memory_backend=parsed.memory_backend or "auto",
        )
    except RedisSessionsError as exc:
        await client.aclose()
        raise UsageError(first_line(exc)) from None


def _bad_url(shown: str, exc: Exception) -> UsageError:
    """``bad Redis URL``, naming the URL (redacted) unless the reason already does."""
    reason = first_line(exc)
    return UsageError(
        f"bad Redis URL: {reason}" if shown in reason else f"bad Redis URL {shown!r}: {reason}"
    )


def _with_prefix(config: SessionServiceConfig, prefix: str) -> SessionServiceConfig:
    """``config`` under ``--key-prefix``; a refused prefix is named as the option, not as
    a bad URL."""
    try:
        return SessionServiceConfig(**{**config.model_dump(), "key_prefix": prefix})
    except ValidationError as exc:
        raise UsageError(f"bad --key-prefix {prefix!r}: {problems(exc, named=False)}") from None


def first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
