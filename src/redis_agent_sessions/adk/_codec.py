"""The ADK codec: the core engine's reads and writes in ADK's ``Session`` and ``Event``.

Imported only by ``redis_agent_sessions.adk``, after it has checked that google-adk
is installed.
"""

from __future__ import annotations

from typing import Any

from google.adk.events import Event
from google.adk.sessions import Session
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import _common as _genai_common
from google.genai import types as _genai_types

from redis_agent_sessions.adk._compacted import read_hints
from redis_agent_sessions.sessions._pydantic_codec import PydanticCodec, private
from redis_agent_sessions.sessions._trusted import Hooks
from redis_agent_sessions.sessions._types import ErrorTypes

__all__ = ["AdkCodec"]


def _skipped(owner: type, name: str, *unless: str) -> dict[Any, frozenset[str]]:
    """``owner``'s before-validator ``name`` for ``Hooks.skip_before``, skipped unless
    one of ``unless`` is given. These are private to google-genai and google-adk: in a
    version without it, nothing (the plan runs whatever validator there is)."""
    method = getattr(owner, name, None)
    function = getattr(method, "__func__", None)
    return {} if function is None else {function: frozenset(unless)}


class AdkCodec(PydanticCodec[Session, Event]):
    """Maps the engine onto ADK's ``Session`` and ``Event``, raising ADK's errors.

    The engine's revision travels in ``Session._storage_update_marker``, the private
    attribute ADK reserves for exactly this, so pydantic ``==`` between a session we
    returned and one read back holds.
    """

    # On by default: ADK's own flows (the Runner, rewind, compaction, ...) never change a
    # session event in place, which is what the contract suites check of every event the
    # cache held (tests/conftest.py, read_cache). 0 in the config turns it off.
    read_cache_bytes = 128 << 20

    # What the schema cannot tell the trusted decode (sessions/_trusted); each is checked
    # against validation by tests/test_trusted_decode.py.
    hooks = Hooks(
        skip_before={
            # Only warns when a field holds a model instance of another class: JSON never does.
            **_skipped(_genai_common.BaseModel, "_check_field_type_mismatches"),
            # Routes convenience kwargs; stored events never have them.
            **_skipped(
                Event, "_accept_convenience_kwargs", "message", "state", "route", "node_path"
            ),
        },
        # Part.__init__ drops fields given as None, then validates the rest as is.
        plain_inits=frozenset({_genai_types.Part}),
    )

    def __init__(self, errors: ErrorTypes) -> None:
        # genai decodes base64 bytes itself, so binary parts survive dict validation
        # (tests/test_adk_parity.py::test_rich_event_round_trip).
        super().__init__(Session, Event, GetSessionConfig, errors)

    def revision(self, session: Session) -> int | None:
        marker = private(session, "_storage_update_marker")
        # A marker we did not write (a session built by hand or by another backend)
        # says nothing about our revision: the engine then compares last event ids.
        if marker is None or not marker.isdigit():
            return None
        return int(marker)

    def set_revision(self, session: Session, revision: int) -> None:
        session._storage_update_marker = str(revision)

    def read_hints(self, event: Event) -> tuple[str, str]:
        return read_hints(event)
