"""Property tests: messages and turn checkpoints round-trip through serde and every store;
what a message holds cannot be edited through it."""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable, Mapping
from datetime import timezone
from pathlib import Path
from typing import Any, cast

import attrs
import pytest
from helpers import calls
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from storekit import KINDS, open_kit

from lousho_sessions import (
    FunctionProvider,
    create_agent,
    memory_store,
    tool,
)
from lousho_sessions._message_codec import message_dict, message_from_canonical
from lousho_sessions.engine import _checkpoint_codec
from lousho_sessions.engine._checkpoint_codec import turn_checkpoint, turn_state_from_checkpoint
from lousho_sessions.engine._turn_state import TurnState
from lousho_sessions.errors import SchemaVersionError, StoreCorruptError
from lousho_sessions.messages import (
    FrozenMapping,
    ImagePart,
    Message,
    ReasoningPart,
    TextPart,
    ToolCall,
    Usage,
    freeze,
    thaw,
)
from lousho_sessions.serde import (
    converter,
    message_from_dict,
    message_to_dict,
    messages_from_json,
    messages_from_json_texts,
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
OPAQUE = st.none() | st.text(max_size=40)
FAMILIES = st.sampled_from(["anthropic", "openai", "gemini", ""]) | TEXT
REASONING_PARTS = st.builds(ReasoningPart, TEXT, FAMILIES, OPAQUE, OPAQUE, OPAQUE, extra=UNKNOWN)
TOOL_CALLS = st.builds(
    ToolCall, TEXT, TEXT, JSON_OBJECTS, raw_arguments=st.none() | TEXT, extra=UNKNOWN
)
USAGE = st.builds(
    Usage,
    st.integers(0, 10**9),
    st.integers(0, 10**9),
    st.floats(0, 1e6, allow_nan=False, allow_infinity=False),
    cache_read_tokens=st.integers(0, 10**9) | st.just(0),
    cache_write_tokens=st.integers(0, 10**9) | st.just(0),
    reasoning_tokens=st.integers(0, 10**9) | st.just(0),
)
MESSAGES = st.builds(
    Message,
    role=st.sampled_from(["user", "assistant", "tool", "system"]),
    content=st.lists(TEXT_PARTS | IMAGE_PARTS | REASONING_PARTS, max_size=3).map(tuple),
    tool_calls=st.lists(TOOL_CALLS, max_size=2).map(tuple),
    tool_call_id=st.none() | TEXT,
    is_error=st.booleans(),
    usage=st.none() | USAGE,
    created_at=st.datetimes(timezones=st.just(timezone.utc)),
    id=TEXT,
    metadata=JSON_OBJECTS,
    extra=UNKNOWN,
)


#: Messages of the shape a model and this release write: no unknown fields anywhere.
PLAIN_MESSAGES = st.builds(
    Message,
    role=st.sampled_from(["user", "assistant", "tool", "system"]),
    content=st.lists(
        st.builds(TextPart, TEXT)
        | st.builds(ReasoningPart, TEXT, FAMILIES, OPAQUE, OPAQUE, OPAQUE),
        max_size=3,
    ).map(tuple),
    tool_calls=st.lists(
        st.builds(ToolCall, TEXT, TEXT, JSON_OBJECTS, raw_arguments=st.none() | TEXT), max_size=2
    ).map(tuple),
    tool_call_id=st.none() | TEXT,
    is_error=st.booleans(),
    usage=st.none() | USAGE,
    created_at=st.datetimes(timezones=st.just(timezone.utc)),
    id=TEXT,
    metadata=JSON_OBJECTS,
)


def _shape(value: Any) -> Any:
    """``value`` with the type of every leaf beside it: equal shapes hold equal types too."""
    if isinstance(value, Mapping):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [_shape(v) for v in value])
    if hasattr(value, "__attrs_attrs__"):
        return (
            type(value).__name__,
            {a.name: _shape(getattr(value, a.name)) for a in value.__attrs_attrs__},
        )
    return (type(value).__name__, value)


@settings(max_examples=200, deadline=None)
@given(MESSAGES | PLAIN_MESSAGES)
def test_the_fast_message_codec_gives_what_the_converter_gives(message: Message) -> None:
    slow = converter.unstructure(message, Message)
    fast = message_dict(message)
    assert fast is not None  # every class of this release takes the fast path out
    assert json.dumps(fast) == json.dumps(slow)  # the same keys, in the same order
    back = message_from_canonical(json.loads(json.dumps(slow)))
    if back is not None:
        assert _shape(back) == _shape(converter.structure(json.loads(json.dumps(slow)), Message))


@settings(max_examples=100, deadline=None)
@given(PLAIN_MESSAGES)
def test_plain_messages_are_read_by_the_fast_path(message: Message) -> None:
    data = json.loads(json.dumps(converter.unstructure(message, Message)))
    back = message_from_canonical(data)
    assert back is not None and _shape(back) == _shape(message_from_dict(data))
    assert back == message


def test_the_fast_path_leaves_unusual_data_to_the_converter() -> None:
    data = message_to_dict(Message.user("hi"))
    for key, value in [
        ("role", "robot"),
        ("is_error", 1),
        ("usage", {"input_tokens": True, "output_tokens": 0, "cost_usd": 0.0}),
        ("created_at", "yesterday"),
        ("x_new", 1),
        ("content", [{"type": "text", "text": 5}]),
    ]:
        assert message_from_canonical({**data, key: value}) is None, key
    with pytest.raises(ValueError, match="role"):
        message_from_dict({**data, "role": "robot"})


def test_rows_of_a_store_name_the_bad_one() -> None:
    good = json.dumps(message_to_dict(Message.user("hi")))
    assert [m.text for m in messages_from_json_texts([good, good])] == ["hi", "hi"]
    for bad in ("{", "[]", '"text"', '{"role": "robot"}'):
        with pytest.raises(StoreCorruptError, match="rows of s: cannot read messages"):
            messages_from_json_texts([good, bad], source="rows of s")


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
    data["usage"]["surcharge_tokens"] = 7
    assert message_to_dict(message_from_dict(data)) == data


def test_a_load_shares_equal_usages_and_keeps_each_usage_exact() -> None:
    usages = [Usage(1, 2, 0.5), Usage(1, 2, 0.5), Usage(1, 2, 0.0), Usage(1, 2, -0.0), Usage(1, 3)]
    texts = [json.dumps(message_to_dict(Message.assistant("x", usage=u))) for u in usages]
    extra = message_to_dict(Message.assistant("x", usage=Usage(1, 2, 0.5)))
    extra["usage"]["surcharge_tokens"] = 7  # read by the converter: its own Usage, extra kept
    texts.append(json.dumps(extra))
    for loaded in (
        messages_from_json_texts(texts),
        messages_from_json("[" + ",".join(texts) + "]"),
    ):
        assert [m.usage for m in loaded] == [*usages, Usage(1, 2, 0.5)]
        assert texts == [json.dumps(message_to_dict(m)) for m in loaded]  # -0.0 stays -0.0
        assert loaded[0].usage is loaded[1].usage  # equal values, one object
        assert loaded[2].usage is not loaded[3].usage  # 0.0 and -0.0: equal, written apart
        assert loaded[5].usage is not None and loaded[5].usage is not loaded[0].usage
        assert loaded[5].usage.extra == {"surcharge_tokens": 7}


def test_a_load_shares_equal_single_texts_and_reads_every_content_exactly() -> None:
    saved = [
        Message.user("same"),
        Message.assistant("same"),
        Message.user([TextPart("same"), TextPart("two")]),
        Message.user("other"),
        Message.assistant(),
        Message.user("same", metadata={"k": 1}),
    ]
    texts = [json.dumps(message_to_dict(m)) for m in saved]
    for loaded in (
        messages_from_json_texts(texts),
        messages_from_json("[" + ",".join(texts) + "]"),
    ):
        assert loaded == saved
        assert texts == [json.dumps(message_to_dict(m)) for m in loaded]
        assert loaded[0].content is loaded[1].content is loaded[5].content  # one tuple
        assert loaded[2].content[0] is not loaded[0].content[0]  # two parts: read as they are
        assert loaded[3].content == (TextPart("other"),) and loaded[4].content == ()


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


# -- read-only all the way down ---------------------------------------------------


def _frozen_all_the_way_down(value: Any) -> bool:
    if isinstance(value, dict | list):
        return False
    if isinstance(value, FrozenMapping):
        return all(_frozen_all_the_way_down(v) for v in value.values())
    if isinstance(value, tuple):
        return all(_frozen_all_the_way_down(v) for v in value)
    return True


def _mappings(message: Message) -> list[Any]:
    return [
        message.metadata,
        message.extra,
        *(p.extra for p in message.content),
        *(c.arguments for c in message.tool_calls),
        *(c.extra for c in message.tool_calls),
        *([message.usage.extra] if message.usage is not None else []),
    ]


@settings(max_examples=100, deadline=None)
@given(MESSAGES)
def test_loaded_messages_are_read_only_all_the_way_down(message: Message) -> None:
    for m in (message, message_from_dict(json.loads(json.dumps(message_to_dict(message))))):
        for mapping in _mappings(m):
            assert isinstance(mapping, FrozenMapping) and _frozen_all_the_way_down(mapping)
            with pytest.raises(TypeError):
                mapping["x_new"] = 1


@settings(max_examples=100, deadline=None)
@given(JSON_OBJECTS)
def test_freeze_and_thaw_keep_the_json_value(value: dict[str, Any]) -> None:
    frozen = freeze(value)
    assert frozen == value and thaw(frozen) == value
    assert json.loads(json.dumps(thaw(frozen))) == json.loads(json.dumps(value))


def _reply(replies: list[Message | str]) -> FunctionProvider:
    return FunctionProvider(lambda request: replies.pop(0))


def test_editing_a_message_through_any_public_path_raises_and_the_store_keeps_its_copy() -> None:
    store = memory_store()
    assert store.sessions is not None
    args: dict[str, object] = {"items": [1, 2], "opts": {"deep": {"k": 1}}}
    session = create_agent(provider=_reply([calls(("f", args)), "done"]), store=store).session("s")
    meta: dict[str, Any] = {"tags": ["a"], "nested": {"k": 1}}
    session.send([Message.user("hi", metadata=meta)])
    meta["tags"].append("changed after send")  # the caller's dict is not the message's
    first, asked = session.messages[0], session.messages[1]
    metadata: Any = first.metadata  # Mapping has no mutators for mypy; try them at run time
    arguments: Any = asked.tool_calls[0].arguments
    edits: list[Callable[[], object]] = [
        lambda: operator.setitem(metadata, "x", 1),
        lambda: operator.setitem(metadata["nested"], "k", 2),
        lambda: operator.setitem(metadata["tags"], 0, "b"),
        lambda: operator.delitem(metadata, "tags"),
        lambda: metadata.update(x=1),
        lambda: metadata.pop("tags"),
        lambda: metadata.popitem(),
        lambda: metadata.clear(),
        lambda: metadata.setdefault("x", 1),
        lambda: metadata.__ior__({"x": 1}),
        lambda: setattr(metadata, "_data", {}),
        lambda: operator.setitem(cast(Any, first.extra), "x", 1),
        lambda: operator.setitem(cast(Any, first.content[0].extra), "x", 1),
        lambda: operator.setitem(arguments, "items", []),
        lambda: operator.setitem(arguments["opts"]["deep"], "k", 2),
        lambda: operator.setitem(arguments["items"], 0, 9),
        lambda: operator.setitem(cast(Any, asked.tool_calls[0].extra), "x", 1),
    ]
    for edit in edits:
        with pytest.raises(TypeError):
            edit()
    stored = store.sessions.load("s")
    assert stored is not None
    assert stored[0].metadata == {"tags": ["a"], "nested": {"k": 1}}
    assert stored[1].tool_calls[0].arguments == args
    assert thaw(stored[0].metadata) == {"tags": ["a"], "nested": {"k": 1}}


def test_tools_get_plain_mutable_arguments_and_cannot_change_the_call() -> None:
    got: list[tuple[type, ...]] = []

    def needs_approval(args: Mapping[str, Any]) -> bool:
        got.append((type(args), type(args["items"])))
        return False

    @tool(needs_approval=needs_approval)
    def f(items: list[int], opts: dict[str, Any], raw: Any) -> str:
        """Change what it is given."""
        got.append((type(items), type(opts), type(opts["deep"]), type(raw), type(raw["l"])))
        items.append(3)
        opts["deep"]["k"] = 2
        raw["l"].append("x")
        return "ok"

    args: dict[str, object] = {"items": [1, 2], "opts": {"deep": {"k": 1}}, "raw": {"l": [1]}}
    store = memory_store()
    assert store.sessions is not None
    agent = create_agent(provider=_reply([calls(("f", args)), "done"]), store=store, tools=[f])
    agent.session("s").send("go")
    assert got == [(dict, list), (list, dict, dict, dict, list)]
    stored = store.sessions.load("s")
    assert stored is not None and stored[1].tool_calls[0].arguments == args


def test_frozen_mappings_pickle_copy_and_compare_like_dicts() -> None:
    import copy
    import pickle

    message = Message.user("x", metadata={"a": [1, {"b": None}]})
    assert pickle.loads(pickle.dumps(message)) == message
    assert copy.deepcopy(message) == message
    assert message.metadata == {"a": [1, {"b": None}]} and message.metadata != {"a": [1]}
    assert message.metadata == FrozenMapping({"a": (1, {"b": None})})
    with pytest.raises(TypeError):
        hash(message.metadata)
    deep: dict[str, Any] = {}
    inner = deep
    for _ in range(5000):  # deeper than the recursion limit: frozen without recursing
        inner["k"] = {}
        inner = inner["k"]
    assert isinstance(Message.user("x", metadata=deep).metadata["k"], FrozenMapping)
    looped: dict[str, Any] = {}
    looped["self"] = looped
    with pytest.raises(ValueError, match="contains itself"):
        Message.user("x", metadata=looped)


# -- turn checkpoints: the same converter ---------------------------------------------

QUEUED = st.fixed_dictionaries(
    {"input_id": TEXT, "messages": st.lists(MESSAGES.map(message_to_dict), max_size=2)}
)
TURN_STATES = st.builds(
    TurnState,
    run_id=TEXT,
    session_id=st.none() | TEXT,
    turn_id=st.none() | TEXT,
    new=st.lists(MESSAGES, max_size=3),
    base_length=st.integers(0, 10**6),
    base_last_id=st.none() | TEXT,
    status=st.sampled_from(["running", "awaiting-approval", "abandoned"]),
    approval_id=st.none() | TEXT,
    results=st.dictionaries(TEXT, MESSAGES, max_size=2),
    decisions=st.dictionaries(
        TEXT, st.fixed_dictionaries({"approved": st.booleans(), "reason": st.none() | TEXT})
    ),
    steps=st.integers(0, 100),
    tool_calls=st.integers(0, 100),
    usage=USAGE,
    queued=st.lists(QUEUED, max_size=2),
    created_at=TEXT,
    attempts=st.integers(0, 100),
    started=st.lists(TEXT, max_size=3),
    fence=st.none() | st.integers(0, 2**63 - 1),
    extra=UNKNOWN,
)
FIXTURES = Path(__file__).parent / "fixtures"


@settings(max_examples=100, deadline=None)
@given(TURN_STATES, st.lists(MESSAGES, max_size=2))
def test_turn_state_round_trips_through_its_checkpoint(
    state: TurnState, history: list[Message]
) -> None:
    state.history = tuple(history)
    data = json.loads(json.dumps(turn_checkpoint(state)))
    assert (data["format"], data["version"]) == ("lousho.turn", 3)
    assert "history" not in data  # the session store holds it
    again = turn_state_from_checkpoint(data, history, source="test")
    assert again == state
    rewritten = json.loads(json.dumps(turn_checkpoint(again)))
    data.pop("updated_at"), rewritten.pop("updated_at")
    assert rewritten == data  # unknown fields included


@settings(max_examples=100, deadline=None)
@given(TURN_STATES, st.booleans())
def test_the_written_out_checkpoint_fields_are_the_converters(
    state: TurnState, plain: bool
) -> None:
    if plain:  # the written-out path: no decisions, no queued input
        state.decisions, state.queued = {}, []
    fields = _checkpoint_codec._turn_fields(state)
    assert fields == _checkpoint_codec._turn_fields_unstructure(state)
    assert list(fields) == list(
        _checkpoint_codec._turn_fields_unstructure(state)
    )  # the same key order


@settings(max_examples=200, deadline=None)
@given(TURN_STATES, st.sampled_from(["format", "version", "run_id", "new", "results",
       "decisions", "steps", "tool_calls", "usage", "queued", "base_length", "status"]),
       JSON_VALUES)  # fmt: skip
def test_a_malformed_checkpoint_is_a_store_corrupt_error(
    state: TurnState, key: str, junk: Any
) -> None:
    data = json.loads(json.dumps(turn_checkpoint(state)))
    data[key] = junk
    try:
        turn_state_from_checkpoint(data, (), source="checkpoint 's.turn-0'")
    except SchemaVersionError:
        assert key == "version"
    except StoreCorruptError as exc:
        assert "checkpoint 's.turn-0'" in str(exc)


@pytest.mark.parametrize(
    "data",
    [
        [],
        "text",
        {"format": "lousho.turn"},
        {"format": "lousho.turn", "version": 1},
        {"format": "lousho.turn", "version": 1, "run_id": "r", "new": None},
        {"format": "lousho.turn", "version": 1, "run_id": "r", "new": [{"role": 5}]},
        {"format": "lousho.turn", "version": 1, "run_id": "r", "new": [], "results": [1]},
        {"format": "lousho.turn", "version": 1, "run_id": "r", "new": [], "usage": "x"},
        {"format": "lousho.turn", "version": 1, "run_id": "r", "new": [], "steps": "many"},
        {"format": "lousho.turn", "version": 1, "run_id": "r", "new": [], "decisions": [1]},
        {"format": "lousho.turn", "version": 1, "run_id": {"a": 1}, "new": {"a": "b"}},
    ],
)
def test_malformed_checkpoints_name_the_source(data: Any) -> None:
    with pytest.raises(StoreCorruptError, match=r"checkpoint 'x\.turn-0'"):
        turn_state_from_checkpoint(data, (), source="checkpoint 'x.turn-0'")


def test_golden_checkpoint_v1_is_written_back_as_v3_with_the_new_fields_defaulted() -> None:
    golden = json.loads((FIXTURES / "checkpoint-v1.json").read_text())
    state = turn_state_from_checkpoint(golden, (), source="golden")
    assert [m.id for m in state.new] == ["m-user", "m-asst"] and state.steps == 1
    assert state.new[1].tool_calls[0].arguments == {"city": "Paris"}
    assert (state.attempts, state.started, state.fence) == (0, [], None)
    again = turn_checkpoint(state)
    assert again.pop("updated_at") != golden.pop("updated_at")
    assert again == {**golden, "version": 3, "attempts": 0, "started": [], "fence": None}


def test_golden_checkpoint_v2_is_written_back_as_v3_unchanged_otherwise() -> None:
    """Version 2: ``attempts``, ``started`` (the effect ledger's intents), ``fence``."""
    golden = json.loads((FIXTURES / "checkpoint-v2.json").read_text())
    state = turn_state_from_checkpoint(golden, (), source="golden")
    assert (state.attempts, state.started, state.fence) == (2, ["call-1"], 1764633600000000000)
    again = turn_checkpoint(state)
    assert again.pop("updated_at") != golden.pop("updated_at")
    assert again == {**golden, "version": 3}


def test_golden_checkpoint_v3_keeps_reasoning_and_call_places_exactly() -> None:
    """Version 3: reasoning parts (thinking, redacted thinking) and a call's ``after_parts``."""
    golden = json.loads((FIXTURES / "checkpoint-v3.json").read_text())
    state = turn_state_from_checkpoint(golden, (), source="golden")
    assistant = state.new[1]
    thinking, redacted, _, between = assistant.content
    assert isinstance(thinking, ReasoningPart) and thinking.provider == "anthropic"
    assert thinking.signature == "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"
    assert isinstance(redacted, ReasoningPart) and redacted.data and not redacted.text
    assert assistant.text == "Checking." and isinstance(between, ReasoningPart)
    assert assistant.reasoning == thinking.text + between.text
    assert assistant.tool_calls[0].extra == {"after_parts": 3}
    again = turn_checkpoint(state)
    assert again.pop("updated_at") != golden.pop("updated_at")
    assert again == golden


def test_a_previous_release_checkpoint_with_nulls_and_usage_extra_loads() -> None:
    """The first release wrote ``usage`` with an empty ``extra`` and read null fields as empty."""
    golden = json.loads((FIXTURES / "checkpoint-v1.json").read_text())
    golden["usage"]["extra"] = {}
    golden.update(results=None, decisions=None, queued=None, created_at=None)
    del golden["base_length"]
    history = [Message.user("before")]
    state = turn_state_from_checkpoint(golden, history, source="golden")
    assert (state.results, state.decisions, state.queued) == ({}, {}, [])
    assert state.usage == Usage(12, 5, 0.0) and state.base_length == 1
    assert "extra" not in turn_checkpoint(state)["usage"]


@settings(max_examples=100, deadline=None)
@given(JSON_VALUES, st.sampled_from(["", " ", "\n"]))
def test_compact_json_reads_as_json_loads_reads_it(value: Any, pad: str) -> None:
    from lousho_sessions.serde import _loads_compact

    text = pad + json.dumps(value, separators=(",", ":")) + pad
    assert _loads_compact(text) == json.loads(text)
    for broken in (text + "}", "{" + text, text[:-1] if len(text) > 1 else "["):
        try:
            expected: Any = json.loads(broken)
        except ValueError as exc:
            with pytest.raises(ValueError, match=re.escape(str(exc))):
                _loads_compact(broken)
        else:
            assert _loads_compact(broken) == expected


def test_message_ids_are_uuid4_hex() -> None:
    import uuid

    for message in (Message.user("a"), Message.assistant("b")):
        parsed = uuid.UUID(hex=message.id)
        assert (parsed.version, parsed.variant, parsed.hex) == (4, uuid.RFC_4122, message.id)


def test_a_snapshot_carries_every_field_in_containers_of_its_own() -> None:
    """``TurnState.snapshot`` builds the copy by position: every field (a new one too) must
    come out equal, and each list and dict must be a new one the turn can change."""
    state = TurnState.start(
        [Message.user("q")], history=[Message.user("before")], session_id="s", turn_id="s.t"
    )
    names = list(attrs.fields_dict(TurnState))
    for n, name in enumerate(names):
        if name in {"new", "history", "records", "message_dicts"}:
            continue
        value = getattr(state, name)
        if isinstance(value, list):
            value.append(f"item {n}")
        elif isinstance(value, dict):
            value[f"key {n}"] = Message.user("r") if name == "results" else {"n": n}
        elif isinstance(value, bool) or value is None or isinstance(value, (int, str)):
            setattr(state, name, f"{name} {n}" if not isinstance(value, int) else n)
        elif isinstance(value, Usage):
            setattr(state, name, Usage(n, n))
    state.records.append("r-1")
    copy = state.snapshot()
    for name in names:
        mine, theirs = getattr(state, name), getattr(copy, name)
        assert mine == theirs, name
        if isinstance(mine, (list, dict)) and name not in {"message_dicts", "history"}:
            assert mine is not theirs, name
    assert copy.history is state.history and copy.message_dicts is state.message_dicts
