"""Reasoning in the transcript: ``ReasoningPart``, ``reasoning.delta``, the order blocks came
in and the replay rule (a part goes back only to the family that made it)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lousho_sessions import (
    FunctionProvider,
    Message,
    ModelRequest,
    ReasoningPart,
    TextPart,
    ToolCall,
    aio,
    create_agent,
    serde,
    tool,
)
from lousho_sessions.abort import AbortSignal
from lousho_sessions.compaction import split_point
from lousho_sessions.events import Event, ReasoningDeltaEvent, TextDelta
from lousho_sessions.providers._reasoning import AFTER_PARTS, ReplyBlocks, replay_blocks
from lousho_sessions.providers.base import (
    ModelEvent,
    ModelReasoningDelta,
    ModelResponse,
    ModelTextDelta,
    ProviderBase,
)
from lousho_sessions.sqlite import SqliteStore

THINKING = ReasoningPart("I should look it up.", "anthropic", signature="sig-1")
REDACTED = ReasoningPart("", "anthropic", data="EmwKAhgBEgy3va3pzix")
ENCRYPTED = ReasoningPart("", "openai", data="gAAAAB", id="rs_1", extra={"summary": []})


def test_text_leaves_reasoning_out_and_reasoning_joins_its_visible_text() -> None:
    message = Message.assistant([THINKING, TextPart("It is 12."), REDACTED, ENCRYPTED])
    assert message.text == "It is 12."
    assert message.reasoning == "I should look it up."
    assert Message.assistant("plain").reasoning == ""
    with pytest.raises(TypeError, match=r"content\[0\]: expected TextPart, ImagePart or Reason"):
        Message("assistant", [object()])  # type: ignore[list-item]
    with pytest.raises(attrs_frozen_error()):
        THINKING.text = "changed"  # type: ignore[misc]


def attrs_frozen_error() -> type[Exception]:
    import attrs

    return attrs.exceptions.FrozenInstanceError


def test_a_reasoning_part_is_written_with_every_field_and_read_back_exactly() -> None:
    message = Message.assistant([THINKING, ENCRYPTED], tool_calls=[ToolCall("c1", "look", {})])
    data = serde.message_to_dict(message)
    assert data["content"][1] == {
        "text": "",
        "provider": "openai",
        "signature": None,
        "data": "gAAAAB",
        "id": "rs_1",
        "type": "reasoning",
        "summary": [],
    }
    assert serde.message_from_dict(data) == message
    assert serde.messages_from_json(serde.messages_to_json([message])) == [message]


# -- the order of blocks, and the replay rule ------------------------------------------

#: A reply as a model streams it: text runs, reasoning of a family, tool calls.
BLOCK = st.one_of(
    st.tuples(st.just("text"), st.text(min_size=1, max_size=5)),
    st.tuples(
        st.just("reasoning"),
        st.sampled_from(["anthropic", "openai", "gemini"]),
        st.text(max_size=5),
        st.none() | st.text(max_size=8),
    ),
    st.tuples(st.just("call")),
)


def build(blocks: list[tuple[Any, ...]]) -> tuple[Message, list[Any]]:
    """The message a provider builds from ``blocks`` (through ``ReplyBlocks``), and the
    blocks as parts and calls in the order they came (consecutive text runs join)."""
    reply = ReplyBlocks()
    calls: dict[int, ToolCall] = {}
    expected: list[Any] = []
    for block in blocks:
        if block[0] == "text":
            reply.text(block[1])
            if expected and isinstance(expected[-1], TextPart):
                expected[-1] = TextPart(expected[-1].text + block[1])
            else:
                expected.append(TextPart(block[1]))
        elif block[0] == "reasoning":
            _, family, text, signature = block
            part = reply.reasoning(family, signature=signature)
            list(reply.add_reasoning_text(part, text))
            expected.append(ReasoningPart(text, family, signature))
        else:
            index = len(calls)
            calls[index] = ToolCall(f"c{index}", "look", {"n": index})
            reply.call(index)
            expected.append(calls[index])
    parts, placed = reply.message_parts(calls)
    return Message.assistant(parts, tool_calls=placed), expected


def same_blocks(got: list[Any], expected: list[Any]) -> bool:
    """Equal, a call's recorded place aside (it is how the order is kept, not what is sent)."""
    strip = [ToolCall(b.id, b.name, b.arguments) if isinstance(b, ToolCall) else b for b in got]
    return strip == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(BLOCK, max_size=8), st.sampled_from(["anthropic", "openai", "gemini", "other"]))
def test_replay_gives_the_blocks_in_the_order_they_came_to_their_family_only(
    blocks: list[tuple[Any, ...]], family: str
) -> None:
    message, expected = build(blocks)
    # through the codec and back: the order survives every store
    message = serde.message_from_dict(serde.message_to_dict(message))
    mine = [b for b in expected if not (isinstance(b, ReasoningPart) and b.provider != family)]
    assert same_blocks(replay_blocks(message, family), mine)
    assert [c.id for c in message.tool_calls] == [f"c{n}" for n in range(len(message.tool_calls))]


def test_a_call_records_its_place_only_when_parts_came_after_it() -> None:
    plain, _ = build([("reasoning", "anthropic", "hm", "s"), ("text", "ok"), ("call",)])
    assert plain.tool_calls[0].extra == {}  # the common shape: nothing extra stored
    interleaved, _ = build(
        [("reasoning", "anthropic", "a", "s1"), ("call",), ("reasoning", "anthropic", "b", "s2")]
    )
    assert interleaved.tool_calls[0].extra == {AFTER_PARTS: 1}
    # a place past the end (the content was edited) puts the call last
    edited = Message.assistant([THINKING], tool_calls=[ToolCall("c", "t", extra={AFTER_PARTS: 5})])
    assert replay_blocks(edited, "anthropic") == [THINKING, edited.tool_calls[0]]


# -- reasoning.delta through a turn ----------------------------------------------------


class Thinker(ProviderBase):
    """A model that streams reasoning, then text, then asks for ``look`` once."""

    name = "thinker"

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    def stream(self, request: ModelRequest, signal: AbortSignal) -> Iterator[ModelEvent]:
        self.requests.append(request)
        step = sum(1 for m in request.messages if m.role == "tool")
        yield ModelReasoningDelta("Think")
        yield ModelReasoningDelta(f"ing {step}")
        thinking = ReasoningPart(f"Thinking {step}", "anthropic", signature=f"sig-{step}")
        if step == 0:
            call = ToolCall("c1", "look", {})
            message = Message.assistant([thinking], tool_calls=[call])
        else:
            yield ModelTextDelta("Done.")
            message = Message.assistant([thinking, TextPart("Done.")])
        yield ModelResponse(message, finish_reason="tool_calls" if step == 0 else "stop")


@tool
def look() -> str:
    """Look."""
    return "seen"


def kinds(events: list[Event]) -> list[str]:
    return [e.type for e in events if e.type in ("reasoning.delta", "text.delta", "tool.call")]


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("durable", [False, True])
def test_reasoning_streams_as_reasoning_delta_and_stays_in_the_transcript(
    mode: str, durable: bool, tmp_path: Path
) -> None:
    provider = Thinker()
    store = SqliteStore(tmp_path / "s.db") if durable else None
    options: dict[str, Any] = {"store": store} if store is not None else {}
    if mode == "sync":
        agent = create_agent(provider=provider, tools=[look], **options)
        run = agent.session("s").stream("go")
        events: list[Event] = list(run)
        result = run.result()
        messages = list(result.messages)
    else:

        async def main() -> tuple[list[Event], Any, list[Message]]:
            agent = aio.create_agent(provider=provider, tools=[look], **options)
            session = agent.session("s")
            run = session.stream("go")
            seen = [event async for event in run]
            result = await run.result()
            return seen, result, list(result.messages)

        events, result, messages = asyncio.run(main())
    assert kinds(events) == [
        "reasoning.delta",
        "reasoning.delta",
        "tool.call",
        "reasoning.delta",
        "reasoning.delta",
        "text.delta",
    ]
    deltas = [e.text for e in events if isinstance(e, ReasoningDeltaEvent)]
    assert deltas == ["Think", "ing 0", "Think", "ing 1"]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Done."]  # unchanged
    assert result.text == "Done."
    assistants = [m for m in messages if m.role == "assistant"]
    assert [m.reasoning for m in assistants] == ["Thinking 0", "Thinking 1"]
    assert assistants[0].content == (ReasoningPart("Thinking 0", "anthropic", "sig-0"),)
    # the second call saw the first reply's reasoning exactly as it was made
    assert provider.requests[1].messages[1].content == assistants[0].content
    if store is not None:
        store.close()


def test_function_provider_streams_a_messages_reasoning_before_its_text() -> None:
    reply = Message.assistant([THINKING, TextPart("Yes.")])
    agent = create_agent(provider=FunctionProvider(lambda request: reply))
    events = list(agent.session().stream("?"))
    assert kinds(events) == ["reasoning.delta", "text.delta"]


# -- compaction ------------------------------------------------------------------------


def test_compaction_keeps_a_tool_cycle_with_the_reasoning_that_made_it() -> None:
    thinking_call = Message.assistant(
        [THINKING, REDACTED], tool_calls=[ToolCall("c1", "look", {}), ToolCall("c2", "look", {})]
    )
    transcript = [
        Message.user("a"),
        Message.assistant("b"),
        Message.user("c"),
        thinking_call,
        Message.tool("c1", "r1"),
        Message.tool("c2", "r2"),
    ]
    # keeping the last 1 or 2 would split the cycle: the tail starts at the call instead
    for keep in (1, 2, 3):
        assert transcript[split_point(transcript, keep)] is thinking_call

    summaries: list[str] = []

    def model(request: ModelRequest) -> str:
        summaries.append(request.messages[-1].text)
        return "summary"

    agent = create_agent(provider=FunctionProvider(model))
    session = agent.session("c")
    agent.store.sessions.save("c", transcript)
    session.compact(keep_last=2)
    kept = session.messages
    assert list(kept[1:]) == transcript[3:]  # the reasoning goes back as it came
    assert "I should look it up" not in summaries[0]  # reasoning is not summarised as text
