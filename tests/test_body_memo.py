"""A body built from the session's previous call is the body built afresh, on every wire.

Each provider encodes only the tail of the transcript when the session's previous call
sent the rest (``_body_memo``). These tests replay random sessions — messages appended
a few at a time, reasoning of every family, tool calls with and without signatures,
images, system messages, empty messages, rewinds, edits, several sessions interleaved on
one provider, answers stored at OpenAI (``store=True``) that later calls continue —
and check every call's encoded body against ``build_body``'s, so a cached turn can never
carry a stale Anthropic ``cache_control`` mark (they move every call), a stale Gemini
signature placeholder or a stale function name, and a ``store=True`` call continues
exactly the response a full check of the transcript would.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lousho_sessions import CachePolicy, ImagePart, Message, ReasoningPart, TextPart, ToolCall
from lousho_sessions.providers._body_memo import LIMIT, BodyMemos, splice
from lousho_sessions.providers._gemini_contents import SKIP_SIGNATURE
from lousho_sessions.providers._http_provider import HttpProvider
from lousho_sessions.providers._responses_items import ContextHash
from lousho_sessions.providers.anthropic import AnthropicProvider
from lousho_sessions.providers.base import ModelRequest, OutputSchema, ToolSpec
from lousho_sessions.providers.gemini import GeminiProvider
from lousho_sessions.providers.openai import OpenAIProvider
from lousho_sessions.providers.openai_responses import OpenAIResponsesProvider, stamp

URL = "http://127.0.0.1:9"
TOOLS = (ToolSpec("get_weather", "Weather for a city."),)
ANSWER = OutputSchema(
    "answer", {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
)
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8


def providers() -> list[HttpProvider]:
    return [
        AnthropicProvider("claude-x", api_key="k", base_url=URL),
        AnthropicProvider("claude-x", api_key="k", base_url=URL, cache=CachePolicy(ttl="1h")),
        AnthropicProvider("claude-x", api_key="k", base_url=URL, cache=False),
        OpenAIProvider("gpt-x", api_key="k", base_url=URL),
        OpenAIResponsesProvider("gpt-x", api_key="k", base_url=URL),
        OpenAIResponsesProvider("gpt-x", api_key="k", base_url=URL, store=True),
        GeminiProvider("gemini-3-pro", api_key="k", base_url=URL),
        GeminiProvider("gemini-2.5-flash", api_key="k", base_url=URL),
    ]


texts = st.sampled_from(["", "hi", "the weather?", "é ✓ \u2028", 'say "x"'])
ids = st.sampled_from(["c1", "c2", "c3", "c4"])
families = st.sampled_from(["anthropic", "openai", "gemini", "other"])
signatures = st.sampled_from([None, "", "sig-1", "sig-2"])


@st.composite
def reasoning(draw: st.DrawFn) -> ReasoningPart:
    extra: dict[str, Any] = {}
    if draw(st.booleans()):
        extra = draw(st.sampled_from([{"thought": False}, {"openai_summary": ["a", "b"]}]))
    return ReasoningPart(
        draw(texts),
        draw(families),
        draw(signatures),
        draw(st.sampled_from([None, "enc-data"])),
        draw(st.sampled_from([None, "rs_1"])),
        extra=extra,
    )


images = st.sampled_from(
    [ImagePart(url="https://example.com/a.jpg"), ImagePart(data=PNG, media_type="image/png")]
)


@st.composite
def calls(draw: st.DrawFn) -> ToolCall:
    extra: dict[str, Any] = {}
    signature = draw(signatures)
    if signature is not None:
        extra["thought_signature"] = signature
    if draw(st.booleans()):
        extra["after_parts"] = draw(st.integers(0, 3))
    name = draw(st.sampled_from(["get_weather", "get_time"]))
    return ToolCall(draw(ids), name, {"city": draw(texts)}, extra=extra)


@st.composite
def messages(draw: st.DrawFn) -> Message:
    role = draw(st.sampled_from(["user", "user", "assistant", "assistant", "tool", "system"]))
    if role == "user":
        parts = draw(st.lists(st.one_of(texts.map(TextPart), images), max_size=3))
        return Message.user(parts or "")
    if role == "assistant":
        parts = draw(st.lists(st.one_of(texts.map(TextPart), reasoning()), max_size=3))
        return Message.assistant(parts, tool_calls=draw(st.lists(calls(), max_size=2)))
    if role == "tool":
        return Message.tool(draw(ids), draw(texts), is_error=draw(st.booleans()))
    return Message.system(draw(texts))


#: what a request carries beside its messages (the body's frame): system text, tools,
#: output schema, settings
frames = st.tuples(
    st.sampled_from([None, "Be brief.", "Be long."]),
    st.sampled_from([(), TOOLS, (*TOOLS, ToolSpec("find", "Find a place."))]),
    st.sampled_from([None, ANSWER]),
    st.sampled_from([{}, {"temperature": 0.5, "max_tokens": 100}, {"temperature": 0.2}]),
)

#: one step of a session: append messages, a stored answer (its digest true or stale),
#: rewind, edit one, switch sessions, or change what the requests carry beside messages
steps = st.one_of(
    st.tuples(st.just("frame"), frames),
    st.tuples(st.just("append"), st.lists(messages(), min_size=1, max_size=4)),
    st.tuples(st.just("answer"), st.tuples(messages(), st.booleans())),
    st.tuples(st.just("rewind"), st.integers(1, 4)),
    st.tuples(st.just("edit"), messages()),
    st.tuples(st.just("switch"), st.sampled_from(["s-1", "s-2", None])),
)


def same(provider: HttpProvider, request: ModelRequest) -> None:
    encoded = json.loads(provider.encode_body(request))
    assert encoded == provider.build_body(request), type(provider).__name__
    if isinstance(provider, OpenAIResponsesProvider):  # the body sent after a stale id
        whole = provider._body(request, continuation=False)
        assert json.loads(bytes(provider._encode(request, continuation=False).data)) == whole


def answered(
    wires: list[HttpProvider], request: ModelRequest, reply: Message, true: bool
) -> Message:
    """``reply`` as a ``store=True`` provider records a stored answer to ``request``: its
    digest from the body's memo equals one over the whole transcript (``true``: of what
    the answer saw; else of the transcript before the request's last message)."""
    reply = Message.assistant(reply.content, tool_calls=reply.tool_calls)
    whole = stamp(reply, "resp_1", request.messages, None)
    for provider in wires:
        if isinstance(provider, OpenAIResponsesProvider) and provider.store:
            seen = provider._encode(request, continuation=True).seen
            assert stamp(reply, "resp_1", request.messages, seen) == whole
    if true:
        return whole
    return stamp(reply, "resp_1", request.messages[:-1], None)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(messages(), max_size=6),
    st.lists(steps, min_size=1, max_size=12),
    st.sampled_from([None, "Be brief."]),
    st.sampled_from([(), TOOLS]),
    st.sampled_from([None, ANSWER]),
    st.sampled_from([{}, {"temperature": 0.5, "max_tokens": 100}]),
)
def test_a_body_from_the_previous_call_is_the_body_built_afresh(
    start: list[Message],
    plan: list[Any],
    system: str | None,
    tools: tuple[ToolSpec, ...],
    output: OutputSchema | None,
    options: dict[str, Any],
) -> None:
    wires = providers()
    sessions: dict[str | None, list[Message]] = {"s-1": list(start)}
    current: str | None = "s-1"
    for kind, value in plan:
        transcript = sessions.setdefault(current, list(start))
        if kind == "append":
            transcript += value
        elif kind == "answer":
            asked = ModelRequest(system, tuple(transcript), session_id=current)
            transcript.append(answered(wires, asked, *value))
        elif kind == "rewind":
            del transcript[-value:]
        elif kind == "edit" and transcript:
            transcript[len(transcript) // 2] = value
        elif kind == "switch":
            current = value
            continue
        elif kind == "frame":
            system, tools, output, options = value
        request = ModelRequest(
            system, tuple(transcript), tools, options, output_schema=output, session_id=current
        )
        for provider in wires:
            same(provider, request)


def test_the_tail_is_all_that_is_encoded_again() -> None:
    """A long session's call encodes only the turns its previous call did not send."""
    transcript = (Message.user("q"), Message.assistant("a")) * 200
    for provider in providers():
        if getattr(provider, "store", False):
            continue  # store=True sends only what is new anyway, from the whole transcript
        provider.encode_body(ModelRequest("sys", transcript, session_id="s"))
        sizes: list[int] = []
        real = provider._http.encode

        def counting(value: Any, sizes: list[int] = sizes, real: Any = real) -> bytes:
            data: bytes = real(value)
            sizes.append(len(data))
            return data

        provider._http.encode = counting  # type: ignore[method-assign]
        request = ModelRequest("sys", (*transcript, Message.user("next")), session_id="s")
        body = provider.encode_body(request)
        assert max(sizes) < len(body) / 20, type(provider).__name__
        provider._http.encode = real  # type: ignore[method-assign]
        same(provider, request)


def counted(provider: HttpProvider, request: ModelRequest) -> tuple[bytes, list[int]]:
    """The body for ``request`` and the size of each value encoded to make it."""
    sizes: list[int] = []
    real = provider._http.encode

    def counting(value: Any) -> bytes:
        data: bytes = real(value)
        sizes.append(len(data))
        return data

    provider._http.encode = counting  # type: ignore[method-assign]
    try:
        return provider.encode_body(request), sizes
    finally:
        provider._http.encode = real  # type: ignore[method-assign]


def test_a_long_tool_loop_of_unsigned_gemini_calls_encodes_only_its_tail() -> None:
    """Each unsigned call of the current turn carries the placeholder: the memo keeps
    those turns as sent, so a loop's call encodes only its new turns; once a user turn
    ends the loop, the turns go back to their form without it."""
    provider = GeminiProvider("gemini-3-pro", api_key="k", base_url=URL)
    transcript = [Message.user("q")]
    for n in range(200):
        call = ToolCall(f"c{n}", "get_weather", {"city": "Paris"})
        transcript += [Message.assistant(tool_calls=[call]), Message.tool(f"c{n}", "sunny")]
        request = ModelRequest("sys", tuple(transcript), TOOLS, session_id="s")
        body, sizes = counted(provider, request)
        assert json.loads(body) == provider.build_body(request)
        assert sum(sizes) < 800, n  # the new turns, the last one again, what goes around them
    assert len(body) > 200 * 250
    assert json.dumps(provider.build_body(request)).count(SKIP_SIGNATURE) == 200
    transcript.append(Message.user("and now?"))
    request = ModelRequest("sys", tuple(transcript), TOOLS, session_id="s")
    same(provider, request)
    assert SKIP_SIGNATURE not in provider.encode_body(request).decode()


def test_a_long_tool_loop_continuing_stored_responses_hashes_only_its_tail(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``store=True`` each call continues the answer before it: checking that
    answer's digest and recording the next one hash only the new messages' items."""
    provider = OpenAIResponsesProvider("gpt-x", api_key="k", base_url=URL, store=True)
    hashed: list[int] = []
    real = ContextHash.add

    def counting(self: ContextHash, items: Any) -> None:
        items = list(items)
        hashed.append(len(items))
        real(self, items)

    monkeypatch.setattr(ContextHash, "add", counting)
    transcript = [Message.user("q")]
    for n in range(200):
        request = ModelRequest("sys", tuple(transcript), TOOLS, session_id="s")
        hashed.clear()
        encoded = provider._encode(request, continuation=True)
        call = ToolCall(f"c{n}", "get_weather", {"city": "Paris"})
        reply = stamp(
            Message.assistant(tool_calls=[call]), f"resp_{n}", request.messages, encoded.seen
        )
        assert json.loads(bytes(encoded.data)) == provider.build_body(request)
        assert reply == stamp(reply, f"resp_{n}", request.messages, None)
        if n > 0:
            assert json.loads(bytes(encoded.data))["previous_response_id"] == f"resp_{n - 1}"
            assert sum(hashed) <= 3, (n, hashed)
        transcript += [reply, Message.tool(f"c{n}", "sunny")]
    request = ModelRequest("sys", tuple(transcript), TOOLS, session_id="s")
    _, sizes = counted(provider, request)
    assert len(sizes) < 10


def test_extra_body_fields_win_on_the_fast_path_too() -> None:
    for provider in providers():
        if isinstance(provider, AnthropicProvider) and provider.cache is not None:
            continue  # build_body itself cannot mark turns that extra_body replaced
        key = {AnthropicProvider: "messages", OpenAIProvider: "messages"}.get(
            type(provider), "contents" if isinstance(provider, GeminiProvider) else "input"
        )
        request = ModelRequest(
            None, (Message.user("hi"),), settings={"extra_body": {key: []}}, session_id="s"
        )
        same(provider, request)
        assert json.loads(provider.encode_body(request))[key] == []


def test_memos_are_bounded_and_replaced() -> None:
    memos = BodyMemos()
    provider = OpenAIProvider("gpt-x", api_key="k", base_url=URL)
    for n in range(LIMIT + 5):
        provider.encode_body(ModelRequest(None, (Message.user(str(n)),), session_id=f"s{n}"))
    assert len(provider._memos._memos) == LIMIT
    assert "s0" not in provider._memos._memos and f"s{LIMIT + 4}" in provider._memos._memos
    assert memos.head("none", (Message.user("x"),), 1).turns == []


@pytest.mark.parametrize(
    ("body", "items", "gaps", "expected"),
    [
        ({}, [], False, {"k": []}),
        ({"a": 1}, [b"1", b"2"], False, {"a": 1, "k": [1, 2]}),
        ({"a": 1}, [b"", b"1", b"", b"2", b""], True, {"a": 1, "k": [1, 2]}),
        ({"a": 1}, [b"", b""], True, {"a": 1, "k": []}),
        ({}, [b'{"x":"]}"}'], False, {"k": [{"x": "]}"}]}),
    ],
)
def test_splice_puts_the_array_in_the_body(
    body: dict[str, Any], items: list[bytes], gaps: bool, expected: dict[str, Any]
) -> None:
    encode = OpenAIProvider("gpt-x", api_key="k", base_url=URL)._http.encode
    assert json.loads(splice(encode, dict(body), "k", items, gaps=gaps)) == expected


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
blocks = st.dictionaries(st.sampled_from(["type", "text", "id", "input", "extra"]), json_values)
marks = st.sampled_from([{"type": "ephemeral"}, {"type": "ephemeral", "ttl": "1h"}])


@settings(max_examples=300)
@given(
    content=st.lists(blocks, min_size=1, max_size=4),
    marked=st.lists(st.integers(0, 3), max_size=3),
    earlier=st.lists(st.integers(0, 3), max_size=1),
    mark=marks,
    after=st.booleans(),
)
def test_a_mark_spliced_into_a_turns_text_is_the_marked_turn_encoded(
    content: list[dict[str, Any]], marked: list[int], earlier: list[int], mark: Any, after: bool
) -> None:
    """``marked_turn`` (the turn's text before ``mark_breakpoints``, the mark spliced in) gives
    the bytes encoding the marked turn gives: on the last block, on others, on several, on
    a block that had a mark already, and a turn with a member after ``content``."""
    from lousho_sessions.providers._breakpoints import marked_turn

    encode = AnthropicProvider("claude-x", api_key="k", base_url=URL)._http.encode
    for index in earlier:  # a mark a block held before (from its ``extra``)
        content[index % len(content)]["cache_control"] = {"type": "ephemeral"}
    turn: dict[str, Any] = {"role": "user", "content": content}
    if after:
        turn["extra"] = 1
    plain = encode(turn)
    for index in marked:
        content[index % len(content)]["cache_control"] = dict(mark)
    assert marked_turn(turn, plain, encode) == encode(turn)


def buffered() -> list[HttpProvider]:
    """The wire formats that keep the body itself for the session's next call."""
    wires = (AnthropicProvider, OpenAIProvider, GeminiProvider, OpenAIResponsesProvider)
    return [p for p in providers() if isinstance(p, wires) and not getattr(p, "store", False)]


def test_the_body_is_cut_and_extended_in_place_not_joined_again() -> None:
    """A call writes into the buffer the session's previous call sent from: the same
    buffer, rewritten only from where the turns it reuses end."""
    transcript = (Message.user("q"), Message.assistant("a")) * 200
    for provider in buffered():
        provider.encode_body(ModelRequest("sys", transcript, TOOLS, session_id="s"))
        first = provider._memos._memos["s"].body
        assert first is not None
        kept = first.data
        transcript_2 = (*transcript, Message.user("next"), Message.assistant("ok"))
        request = ModelRequest("sys", transcript_2, TOOLS, session_id="s")
        body = provider.encode_body(request)
        assert json.loads(body) == provider.build_body(request)
        written = provider._memos._memos["s"].body
        assert written is first and written.data is kept, type(provider).__name__
        assert written.data == body


def test_a_view_of_the_last_body_still_held_is_never_changed() -> None:
    """A body the transport (or anyone) still holds a view of stays as it was sent: the
    next call cannot cut that buffer (Python refuses to resize it) and writes a new one."""
    transcript: tuple[Message, ...] = (Message.user("q"), Message.assistant("a")) * 50
    for provider in buffered():
        request = ModelRequest("sys", transcript, TOOLS, session_id="s")
        held = provider._request_body(request)
        assert isinstance(held, memoryview)
        sent = bytes(held)
        for n in range(3):
            more = (*transcript, Message.user(f"q{n}"), Message.assistant(f"a{n}"))
            later = ModelRequest("sys", more, TOOLS, session_id="s")
            same(provider, later)
            assert bytes(held) == sent, type(provider).__name__
        held.release()
        same(provider, ModelRequest("sys", (*transcript, Message.user("z")), session_id="s"))


def test_a_call_for_the_same_session_meanwhile_builds_its_own_body() -> None:
    """A call takes its session's memo out until its body is made: another call for the
    same session in the meantime (another thread) finds none, builds afresh, and writes
    nothing into the buffer the first call owns."""
    transcript = (Message.user("q"), Message.assistant("a")) * 20
    for provider in buffered():
        provider.encode_body(ModelRequest("sys", transcript, session_id="s"))
        first = ModelRequest("sys", (*transcript, Message.user("one")), session_id="s")
        memos = provider._memos
        taken = memos.head("s", first.messages, len(first.messages))  # as the first call does
        assert taken.memo is not None and taken.memo.body is not None
        owned = bytes(taken.memo.body.data)
        assert "s" not in memos._memos
        same(
            provider, ModelRequest("sys", (*first.messages, Message.assistant("x")), session_id="s")
        )
        assert taken.memo.body.data == owned, type(provider).__name__


def test_a_subclass_that_encodes_its_own_body_has_it_sent() -> None:
    """The buffer's view is sent only for the wire's own ``encode_body``: a subclass that
    overrides it is sent what it returns."""
    for provider in buffered():

        class Own(type(provider)):  # type: ignore[misc]
            def encode_body(self, request: ModelRequest) -> bytes:
                return b'{"own": true}'

        own = Own("x", api_key="k", base_url=URL)
        request = ModelRequest("sys", (Message.user("q"),), session_id="s")
        assert own._request_body(request) == b'{"own": true}'
        view = provider._request_body(request)
        assert isinstance(view, memoryview) and json.loads(bytes(view)) == provider.build_body(
            request
        )
