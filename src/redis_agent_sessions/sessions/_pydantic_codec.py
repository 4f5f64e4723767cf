"""The engine's view of a pair of pydantic session/event classes: ours, or google-adk's."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from redis_agent_sessions.errors import InvalidInputError
from redis_agent_sessions.sessions._trusted import Hooks, Plan, Untrusted
from redis_agent_sessions.sessions._types import ErrorTypes, StoredSession

__all__ = ["PydanticCodec", "private"]

S = TypeVar("S", bound=BaseModel)
E = TypeVar("E", bound=BaseModel)

_PLANS: dict[tuple[type, type[BaseModel]], Plan] = {}


class PydanticCodec(Generic[S, E]):
    """Builds sessions, stores events as JSON (snake_case, None fields left out, the shape
    ADK's DatabaseSessionService stores) and reads them back.

    Subclasses say where a session object keeps the revision it was read at, and may
    give ``Hooks`` for their event models' validators (see ``._trusted``).
    """

    hooks: Hooks = Hooks()
    read_cache_bytes = 0
    """The read cache's default for services of these models (see the config's field)."""
    trusted_decode = True
    """Whether events this codec wrote are rebuilt by a plan rather than validated: off
    where validation is the faster of the two."""

    def __init__(
        self,
        session_type: type[S],
        event_type: type[E],
        config_type: type[BaseModel],
        errors: ErrorTypes | None = None,
    ) -> None:
        self.errors = errors or ErrorTypes()
        self._session_type = session_type
        self._event_type = event_type
        self._config_type = config_type
        self._validator = event_type.__pydantic_validator__

    @cached_property
    def plan(self) -> Plan:
        """The trusted-decode plan of the event class, built on first use (a few ms for
        ADK's) and shared by every codec of this class (whose hooks it was built with)."""
        key = (type(self), self._event_type)
        plan = _PLANS.get(key)
        if plan is None:
            plan = _PLANS[key] = Plan(self._event_type, self.hooks)
        return plan

    @cached_property
    def fingerprint(self) -> str:
        """Stored with each event this codec encodes; '' if no event of it is trusted."""
        return self.plan.fingerprint if self.trusted_decode and self.plan.trusting else ""

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

    def decode_events(
        self, raws: Sequence[bytes | str], schemas: Sequence[str | None] | None = None
    ) -> list[E]:
        """Events from stored JSON. With ``schemas`` (the fingerprint stored beside each),
        those written by these very models are rebuilt by the plan without validation; the
        rest, and any the plan cannot vouch for, are validated."""
        # One pydantic call per event: 0.83-0.91x the time of one call on the whole batch
        # as a JSON array, whose parsed tree outgrows the CPU caches, for 1,000 core events
        # and 0.93-1.00x for ADK's (benchmarks/cpu.py, pyperf). Not orjson + dicts:
        # orjson reads integers beyond 64 bits as floats; pydantic keeps them exact.
        validate = self._validator.validate_json
        fingerprint = self.fingerprint
        if schemas is None or not fingerprint:
            return [validate(raw) for raw in raws]
        decode = self.plan.decode
        events = []
        for raw, schema in zip(raws, schemas, strict=True):
            if schema == fingerprint:
                try:
                    events.append(decode(raw))
                    continue
                except Untrusted:
                    pass
            events.append(validate(raw))
        return events

    def read_hints(self, event: E) -> tuple[str, str]:
        return "", ""

    def revision(self, session: S) -> int | None:
        raise NotImplementedError

    def set_revision(self, session: S, revision: int) -> None:
        raise NotImplementedError


def private(model: BaseModel, name: str) -> Any:
    """The value of ``model``'s private attribute ``name``. Read as an attribute, it goes
    through pydantic's ``__getattr__``, which probes it for a descriptor by raising and
    catching an AttributeError: ~3 us a read, on every append and every refresh, against
    ~0.1 us for the dict that holds it."""
    held = model.__pydantic_private__
    if held is not None and name in held:
        return held[name]
    return getattr(model, name)
