"""Property tests: every message part round-trips through serde and through every store."""

from __future__ import annotations

import json
from datetime import timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from storekit import KINDS, open_kit

from lousho_sessions.messages import ImagePart, Message, TextPart, ToolCall, Usage
from lousho_sessions.serde import (
    message_from_dict,
    message_to_dict,
    messages_from_json,
    messages_to_json,
)

TEXT = st.text(max_size=12)
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
JSON_OBJECTS = st.dictionaries(TEXT, JSON_VALUES, max_size=3)
#: Fields a newer release might add; the ``x_`` prefix keeps them clear of known names.
UNKNOWN = st.dictionaries(
    st.text(min_size=1, max_size=6).map(lambda s: "x_" + s), JSON_VALUES, max_size=2
)

TEXT_PARTS = st.builds(TextPart, TEXT, extra=UNKNOWN)
IMAGE_PARTS = st.one_of(
    st.builds(ImagePart, url=TEXT, media_type=st.none() | TEXT, extra=UNKNOWN),
    st.builds(ImagePart, data=st.binary(max_size=64), media_type=st.none() | TEXT, extra=UNKNOWN),
)
TOOL_CALLS = st.builds(
    ToolCall, TEXT, TEXT, JSON_OBJECTS, raw_arguments=st.none() | TEXT, extra=UNKNOWN
)
USAGE = st.builds(
    Usage,
    st.integers(0, 10**9),
    st.integers(0, 10**9),
    st.floats(0, 1e6, allow_nan=False, allow_infinity=False),
)
MESSAGES = st.builds(
    Message,
    role=st.sampled_from(["user", "assistant", "tool", "system"]),
    content=st.lists(TEXT_PARTS | IMAGE_PARTS, max_size=3).map(tuple),
    tool_calls=st.lists(TOOL_CALLS, max_size=2).map(tuple),
    tool_call_id=st.none() | TEXT,
    is_error=st.booleans(),
    usage=st.none() | USAGE,
    created_at=st.datetimes(timezones=st.just(timezone.utc)),
    id=TEXT,
    metadata=JSON_OBJECTS,
    extra=UNKNOWN,
)


@settings(max_examples=150, deadline=None)
@given(MESSAGES)
def test_message_round_trips_through_dict(message: Message) -> None:
    data = message_to_dict(message)
    assert message_from_dict(data) == message
    assert json.loads(json.dumps(data)) == data  # the dict is plain JSON


@settings(max_examples=100, deadline=None)
@given(st.lists(MESSAGES, max_size=4))
def test_messages_round_trip_through_json(messages: list[Message]) -> None:
    assert messages_from_json(messages_to_json(messages)) == messages


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=256), st.none() | st.sampled_from(["image/png", "image/jpeg"]))
def test_image_bytes_round_trip(data: bytes, media_type: str | None) -> None:
    message = Message.user([TextPart("look"), ImagePart(data=data, media_type=media_type)])
    text = messages_to_json([message])
    (loaded,) = messages_from_json(text)
    part = loaded.content[1]
    assert isinstance(part, ImagePart)
    assert (part.data, part.media_type, part.url) == (data, media_type, None)
    assert isinstance(json.loads(text)[0]["content"][1]["data"], str)  # base64 text in JSON


@settings(max_examples=60, deadline=None)
@given(MESSAGES, UNKNOWN)
def test_unknown_fields_in_stored_json_round_trip(
    message: Message, unknown: dict[str, Any]
) -> None:
    data = message_to_dict(message)
    data.update(unknown)
    for part in data["content"]:
        part.update(unknown)
    assert message_to_dict(message_from_dict(data)) == data


def test_raw_arguments_are_written_only_for_a_malformed_call() -> None:
    plain = message_to_dict(Message.assistant(tool_calls=[ToolCall("c1", "f", {"a": 1})]))
    assert plain["tool_calls"] == [{"id": "c1", "name": "f", "arguments": {"a": 1}}]
    bad = Message.assistant(tool_calls=[ToolCall("c2", "f", raw_arguments='{"a": ')])
    data = message_to_dict(bad)
    assert data["tool_calls"][0]["raw_arguments"] == '{"a": '
    assert message_from_dict(data) == bad


def test_unknown_usage_fields_round_trip() -> None:
    data = message_to_dict(Message.assistant("x", usage=Usage(1, 2, 0.5)))
    data["usage"]["cache_read_tokens"] = 7
    assert message_to_dict(message_from_dict(data)) == data


@pytest.mark.parametrize("kind", KINDS)
def test_messages_round_trip_through_every_store(
    kind: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    kit = open_kit(kind, tmp_path_factory.mktemp(kind))
    try:

        @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(st.lists(MESSAGES, max_size=3), st.lists(MESSAGES, max_size=2))
        def check(saved: list[Message], appended: list[Message]) -> None:
            kit.sessions.save("s1", saved)
            assert kit.sessions.load("s1") == saved
            kit.sessions.append("s1", appended, len(saved))
            assert kit.sessions.load("s1") == saved + appended

        check()
    finally:
        kit.close()


def test_invalid_message_names_the_problem(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a valid message"):
        message_from_dict({"role": "user", "content": [{"type": "video"}]})
