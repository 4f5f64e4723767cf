"""The engine's view of a pair of pydantic session/event classes: ours, or google-adk's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, TypeVar

import orjson
from pydantic import BaseModel, TypeAdapter

from redis_agent_sessions.errors import InvalidInputError
from redis_agent_sessions.sessions._engine import StoredSession

__all__ = ["PydanticCodec"]

S = TypeVar("S", bound=BaseModel)
E = TypeVar("E", bound=BaseModel)


class PydanticCodec(Generic[S, E]):
    """Builds sessions, stores events as JSON (snake_case, None fields left out, the shape
    ADK's DatabaseSessionService stores) and reads a batch of them back in one call.

    Subclasses say where a session object keeps the revision it was read at.

    Args:
        validate_dicts: parse the batch with orjson and validate dicts, instead of letting
            pydantic parse the JSON. Faster for models with Python "before" validators that
            need dicts anyway (ADK's and genai's: 40.9 instead of 43.9 ms for 1,000 booking
            events, interleaved A/B); slower for plain models like ours.
    """

    def __init__(
        self,
        session_type: type[S],
        event_type: type[E],
        config_type: type[BaseModel],
        *,
        validate_dicts: bool,
    ) -> None:
        self._session_type = session_type
        self._event_type = event_type
        self._config_type = config_type
        self._events: TypeAdapter[list[E]] = TypeAdapter(list[event_type])  # type: ignore[valid-type]
        self._validate_dicts = validate_dicts

    def is_session(self, value: object) -> bool:
        return isinstance(value, self._session_type)

    def is_event(self, value: object) -> bool:
        return isinstance(value, self._event_type)

    def narrowing(self, config: object | None) -> tuple[int | None, float | None]:
        if config is None:
            return None, None
        if not isinstance(config, self._config_type):
            raise InvalidInputError(
                f"config must be a {self._config_type.__name__}, got {type(config).__name__}"
            )
        return getattr(config, "num_recent_events", None), getattr(config, "after_timestamp", None)

    def build_session(self, stored: StoredSession, events: list[E]) -> S:
        session = self._session_type(
            id=stored.id,
            app_name=stored.app_name,
            user_id=stored.user_id,
            state=stored.state,
            events=events,
            last_update_time=stored.last_update_time,
        )
        self.set_revision(session, stored.revision)
        return session

    def events_of(self, session: S) -> list[E]:
        events: list[E] = getattr(session, "events")  # noqa: B009 - S is any session model
        return events

    def encode_event(self, event: E) -> bytes:
        return event.__pydantic_serializer__.to_json(event, exclude_none=True)

    def decode_events(self, raws: Sequence[bytes | str]) -> list[E]:
        if not raws:
            return []
        # One call into pydantic-core for the whole batch: the per-call overhead is a
        # large share of parsing small events.
        joined: Any = (
            b"[" + b",".join(raws) + b"]"  # type: ignore[arg-type]
            if isinstance(raws[0], bytes)
            else "[" + ",".join(raws) + "]"  # type: ignore[arg-type]
        )
        if self._validate_dicts:
            return self._events.validate_python(orjson.loads(joined))
        return self._events.validate_json(joined)

    def read_hints(self, event: E) -> tuple[str, str]:
        return "", ""

    def revision(self, session: S) -> int | None:
        raise NotImplementedError

    def set_revision(self, session: S, revision: int) -> None:
        raise NotImplementedError
