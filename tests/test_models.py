"""Our models read and write the same JSON as google-adk 2.13's."""

from __future__ import annotations

from typing import Any

import pytest

from redis_agent_sessions import Event, GetSessionConfig, Session


def rich_adk_event() -> Any:
    adk = pytest.importorskip("google.adk.events")
    types = pytest.importorskip("google.genai.types")
    return adk.Event(
        invocation_id="inv-7",
        author="booking_agent",
        branch="root.booking",
        content=types.Content(
            role="model",
            parts=[
                types.Part(text="Let me look that up."),
                types.Part(
                    function_call=types.FunctionCall(
                        id="call-1", name="search_flights", args={"origin": "NYC"}
                    )
                ),
                types.Part(
                    function_response=types.FunctionResponse(
                        id="call-1", name="search_flights", response={"flights": [1, 2]}
                    )
                ),
            ],
        ),
        actions=adk.EventActions(
            state_delta={"booking_step": "select_flight", "user:n": None},
            artifact_delta={"ticket.pdf": 2},
            transfer_to_agent="payments",
            escalate=False,
            skip_summarization=True,
            agent_state={"step": 3},
        ),
        long_running_tool_ids={"call-2", "call-1"},
        usage_metadata=types.GenerateContentResponseUsageMetadata(
            prompt_token_count=10, candidates_token_count=5, total_token_count=15
        ),
        turn_complete=True,
        custom_metadata={"trace": "abc"},
        error_code=None,
    )


@pytest.mark.adk
def test_adk_event_json_survives_our_models() -> None:
    adk_event = rich_adk_event()
    dumped = adk_event.model_dump(mode="json", exclude_none=True)
    ours = Event.model_validate(dumped)
    assert ours.model_dump(mode="json", exclude_none=True) == dumped
    assert ours.id == adk_event.id
    assert ours.timestamp == adk_event.timestamp
    assert ours.actions.state_delta == {"booking_step": "select_flight", "user:n": None}
    assert ours.content is not None
    assert ours.content.text == "Let me look that up."
    # And back: ADK reads what we write, field for field.
    again = type(adk_event).model_validate_json(ours.model_dump_json(exclude_none=True))
    assert again == adk_event


@pytest.mark.adk
def test_adk_camel_case_json_is_accepted() -> None:
    adk_event = rich_adk_event()
    camel = adk_event.model_dump(mode="json", exclude_none=True, by_alias=True)
    ours = Event.model_validate(camel)
    assert ours.invocation_id == "inv-7"
    assert ours.actions.skip_summarization is True
    assert type(adk_event).model_validate(ours.model_dump(mode="json", exclude_none=True)) == (
        adk_event
    )


@pytest.mark.adk
def test_session_json_matches_adk() -> None:
    sessions = pytest.importorskip("google.adk.sessions")
    adk_session = sessions.Session(
        id="s1", app_name="a", user_id="u", state={"k": 1}, last_update_time=12.5
    )
    ours = Session.model_validate(adk_session.model_dump(mode="json"))
    assert ours.model_dump(mode="json") == adk_session.model_dump(mode="json")
    assert ours.model_dump(mode="json", by_alias=True) == adk_session.model_dump(
        mode="json", by_alias=True
    )


def test_events_get_ids_and_timestamps() -> None:
    a, b = Event(), Event()
    assert a.id != b.id
    assert a.timestamp <= b.timestamp
    assert Event.model_validate({"invocationId": "x"}).invocation_id == "x"


def test_get_session_config_validates() -> None:
    assert GetSessionConfig().num_recent_events is None
    assert GetSessionConfig(num_recent_events=0).num_recent_events == 0


def test_the_core_never_imports_google_adk() -> None:
    import subprocess
    import sys

    code = (
        "import sys, redis_agent_sessions\n"
        "from redis_agent_sessions import RedisMemoryService, RedisSessionService\n"
        "assert not [m for m in sys.modules if m.startswith('google')], 'google imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
