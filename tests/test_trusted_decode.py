"""The trusted decode (sessions/_trusted.py) gives exactly what validation gives.

Property tests draw events covering every field type of the core models and of ADK's
``Event`` (with genai's ``Content``/``Part`` and the rest), from the models' own core
schemas: what the store writes must be rebuilt without validation and be identical to
``model_validate_json`` (equality, ``model_dump()``, ``model_dump_json()``, the fields
set at every level, extras, private attributes, field order); anything else (keys by
alias, nulls, unknown keys, values of other types) is either refused by the plan, so the
reader validates it, or identical too. The services store the fingerprint with every
event and validate what was stored under another one, or none.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from _model_strategies import python_data, wild_json
from redis_agent_sessions import Event, RedisSessionService
from redis_agent_sessions.sessions import _Codec
from redis_agent_sessions.sessions._trusted import Plan, Untrusted

APP, USER = "app", "u"
PROPERTY = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def same(got: Any, expected: Any, where: str = "event") -> None:
    """``got`` is ``expected`` as validation built it, down to every nested value's type."""
    assert type(got) is type(expected), f"{where}: {type(got)} != {type(expected)}"
    if isinstance(expected, BaseModel):
        assert list(got.__dict__) == list(expected.__dict__), where
        assert got.model_fields_set == expected.model_fields_set, where
        assert got.__pydantic_extra__ == expected.__pydantic_extra__, where
        assert got.__pydantic_private__ == expected.__pydantic_private__, where
        for name, value in expected.__dict__.items():
            same(got.__dict__[name], value, f"{where}.{name}")
        for name, value in (expected.__pydantic_extra__ or {}).items():
            same(got.__pydantic_extra__[name], value, f"{where}.{name}")
    elif isinstance(expected, dict):
        assert list(got) == list(expected), where
        for key, value in expected.items():
            same(got[key], value, f"{where}[{key!r}]")
    elif isinstance(expected, (list, tuple)):
        assert len(got) == len(expected), where
        for i, (a, b) in enumerate(zip(got, expected, strict=True)):
            same(a, b, f"{where}[{i}]")
    else:
        assert got == expected, where


def identical(got: Any, expected: BaseModel) -> None:
    same(got, expected)
    assert got == expected
    assert got.model_dump() == expected.model_dump()
    assert got.model_dump_json() == expected.model_dump_json()
    assert got.model_dump(exclude_unset=True) == expected.model_dump(exclude_unset=True)


def stored(codec: Any, data: dict[str, Any]) -> bytes | None:
    """What the store would write for an event validated from ``data`` (None: invalid)."""
    try:
        event = codec._event_type.model_validate(data)
    except (ValidationError, ValueError, TypeError):
        return None
    try:
        raw: bytes = codec.encode_event(event)
    except Exception:  # an event the store refuses to write (InvalidInputError)
        return None
    return raw


def check_stored(codec: Any, data: dict[str, Any]) -> None:
    raw = stored(codec, data)
    if raw is None:
        return
    expected = codec._event_type.model_validate_json(raw)
    identical(codec.plan.decode(raw), expected)  # never Untrusted: the store wrote it


def check_wild(codec: Any, data: dict[str, Any]) -> None:
    # Every stored event has both; left out, each side would draw its own uuid and time.
    data = {"id": "e-1", "timestamp": 1.5, **data}
    if data["id"] == "":
        data["id"] = "e-1"  # ADK's Event draws one for an empty id too
    try:
        raw = orjson.dumps(data)
    except TypeError:  # an integer beyond 64 bits: orjson cannot write it
        return
    try:
        expected = codec._event_type.model_validate_json(raw)
    except Exception:  # genai's enums raise AttributeError for a list, for one
        expected = None
    try:
        got = codec.plan.decode(raw)
    except Untrusted:
        return  # the reader validates it
    assert expected is not None, f"the plan accepted what validation refuses: {raw!r}"
    identical(got, expected)


core = _Codec()


def test_core_examples() -> None:
    check_stored(core, {"author": "u", "custom_metadata": {"big": 2**70, "f": 1.0}})
    check_stored(core, {"long_running_tool_ids": {"b", "a"}, "extraField": {"x": [1, None]}})
    check_wild(core, {"author": "u", "timestamp": 3})  # an int where a float goes
    check_wild(core, {"author": 3})
    check_wild(core, {"invocationId": "i", "invocation_id": "j"})  # by alias and by name
    check_wild(core, {"content": {"parts": [{"text": None, "thought": 1}]}})
    check_wild(core, {"long_running_tool_ids": [[1]]})


@functools.cache
def adk_codec() -> Any:
    from redis_agent_sessions.adk import _adk_codec

    return _adk_codec()


@pytest.mark.adk
def test_the_plan_trusts_every_adk_model() -> None:
    adk = adk_codec()
    assert adk.plan.trusting
    assert "untrusted" not in adk.plan.description


# The core models, and ADK's Event with genai's models (with the [adk] extra).
FAMILIES = pytest.mark.parametrize("family", ["core", pytest.param("adk", marks=pytest.mark.adk)])


def codec_of(family: str) -> Any:
    return core if family == "core" else adk_codec()


@FAMILIES
@PROPERTY
@given(data=st.data())
def test_events_as_stored_are_rebuilt_exactly(family: str, data: st.DataObject) -> None:
    codec = codec_of(family)
    check_stored(codec, data.draw(python_data(codec._event_type)))


@FAMILIES
@PROPERTY
@given(data=st.data())
def test_events_written_by_hand_are_refused_or_exact(family: str, data: st.DataObject) -> None:
    codec = codec_of(family)
    check_wild(codec, data.draw(wild_json(codec._event_type)))


@pytest.mark.adk
def test_adk_examples() -> None:
    adk = adk_codec()
    from google.genai import types

    call = types.Part.from_function_call(name="search", args={"to": "Paris", "n": 2})
    result = types.Part.from_function_response(name="search", response={"ok": [1, 2.5]})
    for part in (call, result, types.Part(text="hi")):
        check_stored(adk, {"author": "a", "content": {"role": "model", "parts": [part]}})
    part = types.Part(
        inline_data=types.Blob(data=b"\x00\xffbytes", mime_type="image/png"),
        thought_signature=b"sig\x01",
    )
    check_stored(
        adk,
        {
            "author": "model",
            "content": {"role": "model", "parts": [part.model_dump()]},
            "finish_reason": "STOP",
            "long_running_tool_ids": {"t2", "t1"},
            "actions": {"requested_auth_configs": {}, "state_delta": {"k": 2**70}},
            "usage_metadata": {"prompt_token_count": 3, "total_token_count": 5},
        },
    )
    # Convenience kwargs run Event's own validator, as validation runs it.
    check_wild(adk, {"author": "u", "state": {"a": 1}})
    check_wild(adk, {"author": "u", "content": {"parts": [{"text": None}]}})
    check_wild(adk, {"author": "u", "content": {"parts": [{"functionCall": {"name": "f"}}]}})
    check_wild(adk, {"author": "u", "finish_reason": "stop"})  # genai's enums ignore case


@pytest.mark.adk
def test_the_hooks_change_nothing_they_skip() -> None:
    adk = adk_codec()
    from google.adk.events import Event as AdkEvent
    from google.genai import _common, types

    check = _common.BaseModel._check_field_type_mismatches
    data = {"text": "x", "function_call": {"name": "f"}}
    assert types.Part._check_field_type_mismatches(data) is data
    assert check.__func__ in adk.hooks.skip_before
    convenience = AdkEvent._accept_convenience_kwargs
    plain = {"author": "u", "actions": {"state_delta": {}}}
    assert convenience(plain) == plain
    for key in adk.hooks.skip_before[convenience.__func__]:
        given = {**plain, key: {} if key == "state" else "x"}
        assert convenience(given) != given  # so it runs whenever one is there


def test_the_fingerprint_is_the_same_in_every_process() -> None:
    code = (
        "from redis_agent_sessions.sessions import _Codec; print(_Codec().plan.fingerprint)\n"
        "try:\n"
        "    from redis_agent_sessions.adk import _adk_codec; print(_adk_codec().fingerprint)\n"
        "except ImportError: print('-')\n"
    )
    runs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": str(seed), "PATH": ""},
        ).stdout
        for seed in (1, 2)
    }
    assert len(runs) == 1
    assert runs.pop().split("\n")[0] == core.plan.fingerprint


def test_another_model_version_has_another_fingerprint() -> None:
    class V1(BaseModel):
        text: str = ""

    class V2(BaseModel):
        text: str | None = ""

    class V3(BaseModel):
        text: str = "-"

    prints = {Plan(model).fingerprint for model in (V1, V2, V3)}
    assert len(prints) == 3
    assert Plan(V1).fingerprint == Plan(V1).fingerprint


def test_validators_the_plan_cannot_run_make_it_validate() -> None:
    from pydantic import field_validator, model_validator

    class WithInfo(BaseModel):
        text: str = ""

        @field_validator("text")
        @classmethod
        def _shout(cls, value: str, info: Any) -> str:
            return value.upper()

    class Wrapped(BaseModel):
        n: int = 0

        @model_validator(mode="wrap")
        @classmethod
        def _wrap(cls, data: Any, handler: Any) -> Any:
            return handler(data)

    with pytest.raises(Untrusted):
        Plan(WithInfo).decode(b'{"text": "a"}')
    assert Plan(WithInfo).decode(b"{}") == WithInfo()  # absent: nothing to run
    assert not Plan(Wrapped).trusting


def adk_service(client: Any) -> Any:
    from redis_agent_sessions.adk import RedisSessionService as AdkService

    return AdkService(client)


def adk_event(author: str, text: str = "", **more: Any) -> Any:
    from google.adk.events import Event as AdkEvent
    from google.genai import types

    content = types.Content(role="user", parts=[types.Part(text=text)]) if text else None
    return AdkEvent(author=author, content=content, **more)


async def test_core_events_are_validated_and_carry_no_fingerprint(
    redis_client: Any, service: RedisSessionService
) -> None:
    session = await service.create_session(app_name=APP, user_id=USER)
    await service.append_event(session, Event(author="u"))
    keys = service._engine.ctx.keys.session(APP, USER, session.id)
    [(_, fields)] = await redis_client.xrange(keys.events)
    assert set(fields) == {b"event"}
    assert core.fingerprint == ""


@pytest.mark.adk
async def test_adk_events_carry_the_fingerprint(redis_client: Any, worker_client: Any) -> None:
    service = adk_service(worker_client)
    session = await service.create_session(app_name=APP, user_id=USER)
    await service.append_event(session, adk_event("u", "hi"))
    keys = service._engine.ctx.keys.session(APP, USER, session.id)
    [(_, fields)] = await redis_client.xrange(keys.events)
    assert fields[b"schema"] == adk_codec().fingerprint.encode()
    assert orjson.loads(fields[b"event"])["author"] == "u"


@pytest.mark.adk
async def test_events_of_other_models_or_none_are_validated(
    redis_client: Any, worker_client: Any
) -> None:
    service = adk_service(worker_client)
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    events = [adk_event("a", "one"), adk_event("b", timestamp=5.0), adk_event("c")]
    for event in events:
        await service.append_event(session, event)
    keys = service._engine.ctx.keys.session(APP, USER, "s")
    entries = await redis_client.xrange(keys.events)
    # Rewrite the stream: the first as another version wrote it, the second without any.
    await redis_client.delete(keys.events)
    fingerprint = adk_codec().fingerprint.encode()
    rewritten = [
        {b"event": entries[0][1][b"event"], b"schema": b"000000000000"},
        {b"event": entries[1][1][b"event"]},
        {b"event": entries[2][1][b"event"], b"schema": fingerprint},
    ]
    for (entry_id, _), fields in zip(entries, rewritten, strict=True):
        await redis_client.xadd(keys.events, fields, id=entry_id)
    plan = service._engine.ctx.codec.plan
    rebuilt: list[bytes] = []
    original = plan.decode

    def spying(raw: bytes) -> Any:
        rebuilt.append(raw)
        return original(raw)

    plan.decode = spying
    try:
        got = await service.get_session(app_name=APP, user_id=USER, session_id="s")
    finally:
        del plan.decode
    assert got is not None
    assert got.events == events
    validating = service._engine.ctx.config.validate_reads
    assert rebuilt == ([] if validating else [entries[2][1][b"event"]])


@pytest.mark.adk
async def test_a_bad_event_under_the_fingerprint_is_still_refused(
    redis_client: Any, worker_client: Any
) -> None:
    from redis_agent_sessions import CorruptDataError

    service = adk_service(worker_client)
    session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
    await service.append_event(session, adk_event("a"))
    keys = service._engine.ctx.keys.session(APP, USER, "s")
    [(entry_id, fields)] = await redis_client.xrange(keys.events)
    event = orjson.loads(fields[b"event"])
    await redis_client.delete(keys.events)
    event["author"] = ["not", "text"]
    await redis_client.xadd(
        keys.events, {b"event": orjson.dumps(event), b"schema": fields[b"schema"]}, id=entry_id
    )
    with pytest.raises(CorruptDataError):
        await service.get_session(app_name=APP, user_id=USER, session_id="s")
