"""Pure parts: key layout and escaping, scope split and merge."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from redis_agent_sessions.keys import KeySpace, escape, split_app_member, unescape
from redis_agent_sessions.state import merge_state, split_state_delta, without_temp


def hash_tag(key: str) -> str:
    """What Redis Cluster hashes: the text between the first '{' and the next '}'."""
    start = key.index("{")
    return key[start + 1 : key.index("}", start + 1)]


def test_readable_layout() -> None:
    ks = KeySpace()
    k = ks.session("booking_app", "user1", "s1")
    assert k.meta == "ras:{booking_app:user1}:session:s1"
    assert k.state == "ras:{booking_app:user1}:session:s1:state"
    assert k.events == "ras:{booking_app:user1}:session:s1:events"
    assert k.event_ids == "ras:{booking_app:user1}:session:s1:event_ids"
    assert k.user_state == "ras:{booking_app:user1}:user_state"
    assert k.user_sessions == "ras:{booking_app:user1}:sessions"
    assert k.app_state == "ras:{booking_app}:app_state"
    assert k.app_sessions == "ras:{booking_app}:sessions"
    assert KeySpace("prod").app_state("a") == "prod:{a}:app_state"


def test_hash_tags_group_a_user_and_separate_the_app() -> None:
    k = KeySpace().session("a", "u", "s")
    user_keys = [k.meta, k.state, k.events, k.event_ids, k.user_state, k.user_sessions]
    assert {hash_tag(key) for key in user_keys} == {"a:u"}
    assert hash_tag(k.app_state) == hash_tag(k.app_sessions) == "a"


ids = st.text(min_size=1, max_size=12)


@given(st.tuples(ids, ids, ids), st.tuples(ids, ids, ids))
def test_distinct_triples_never_share_a_key(
    a: tuple[str, str, str], b: tuple[str, str, str]
) -> None:
    ks = KeySpace()
    ka, kb = ks.session(*a), ks.session(*b)
    if a != b:
        assert ka.meta != kb.meta
        assert ka.events != kb.events
    if a[:2] != b[:2]:
        assert ka.user_state != kb.user_state
        assert hash_tag(ka.meta) != hash_tag(kb.meta)
    if a[0] != b[0]:
        assert ka.app_state != kb.app_state


@given(ids, ids, ids)
def test_input_cannot_forge_or_break_a_hash_tag(app: str, user: str, sid: str) -> None:
    k = KeySpace().session(app, user, sid)
    for key in (k.meta, k.state, k.user_state, k.app_state):
        assert key.count("{") == 1
        assert key.count("}") == 1
    assert hash_tag(k.meta) == f"{escape(app)}:{escape(user)}"
    assert hash_tag(k.app_state) == escape(app)


@given(ids)
def test_escape_round_trips_and_keeps_separators_out(value: str) -> None:
    escaped = escape(value)
    assert unescape(escaped) == value
    assert not re.search(r"[:{} \x00-\x1f\x7f-\x9f]", escaped)


@given(ids, ids)
def test_app_member_round_trips(user: str, sid: str) -> None:
    from redis_agent_sessions.keys import app_member

    assert split_app_member(app_member(user, sid)) == (user, sid)


def test_prefix_cannot_carry_a_hash_tag() -> None:
    for bad in ("", "a{b", "}"):
        with pytest.raises(ValueError, match="prefix"):
            KeySpace(bad)


def test_split_by_prefix() -> None:
    delta = {"k": 1, "app:a": 2, "user:u": 3, "temp:t": 4, "other:o": 5, "app:": 6, "User:x": 7}
    scoped = split_state_delta(delta)
    assert scoped.session == {"k": 1, "other:o": 5, "User:x": 7}
    assert scoped.user == {"u": 3}
    assert scoped.app == {"a": 2, "": 6}
    assert without_temp(delta) == {k: v for k, v in delta.items() if k != "temp:t"}


def test_merge_puts_prefixes_back_with_user_last() -> None:
    merged = merge_state({"k": 1}, {"u": 2}, {"a": 3})
    assert merged == {"k": 1, "app:a": 3, "user:u": 2}
    assert list(merged) == ["k", "app:a", "user:u"]


@given(
    st.dictionaries(
        st.sampled_from(["", "app:", "user:", "temp:"]).flatmap(
            lambda p: st.text(max_size=5).map(lambda s: p + s)
        ),
        st.integers(),
    )
)
def test_split_then_merge_is_the_delta_without_temp(delta: dict[str, int]) -> None:
    scoped = split_state_delta(delta)
    assert merge_state(scoped.session, scoped.user, scoped.app) == without_temp(delta)
    assert sum(map(len, scoped)) == len(without_temp(delta))
    assert not list(itertools.chain(k for k in scoped.session if k.startswith("temp:")))
