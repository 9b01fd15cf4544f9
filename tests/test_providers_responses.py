"""``OpenAIResponsesProvider`` against a loopback server that applies OpenAI's rules.

The server (tests/responses_server.py) refuses, with OpenAI's error texts, a
follow-up that drops or alters a reasoning item a ``store=False`` call needs,
and every request body is checked against the ``openai`` package's own request
type. Stream decoding is checked on fixtures in the documented event shapes
(themselves checked against the SDK's event types).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from provider_server import ProviderServer, SSEReply, sse_events
from provider_wires import KEY
from responses_client import ask, make, rules, run
from responses_server import Call, ResponsesRules, Say, Think, check_request, check_stream_event

from lousho_sessions import ProviderError, ReasoningPart
from lousho_sessions.messages import ImagePart, Message, TextPart, ToolCall
from lousho_sessions.providers.base import (
    ModelReasoningDelta,
    ModelTextDelta,
    ModelToolCallDelta,
    ToolSpec,
)
from lousho_sessions.providers.openai_responses import OpenAIResponsesProvider

__all__ = ["make", "rules"]  # fixtures, used by name

FIXTURE_NAMES = ("text", "tool_calls", "incomplete", "bad_arguments", "failed", "error_event")
WEATHER = ToolSpec(
    "get_weather",
    "The weather in a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


# --- the fixtures are what the SDK says a stream is ---------------------------------


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixtures_are_documented_stream_events(name: str) -> None:
    for block in sse_events("responses", name):
        data = next(line for line in block.decode().splitlines() if line.startswith("data: "))
        check_stream_event(json.loads(data[6:]))


def test_generated_streams_are_documented_stream_events(server: ProviderServer) -> None:
    rules = ResponsesRules(server)
    rules.reply(Think(["a", "b"]), Say("hi"), Call("f", {"x": 1}), usage={"input": 3})
    reply = rules.route(
        _recorded(
            {
                "model": "m",
                "input": "hi",
                "stream": True,
                "include": ["reasoning.encrypted_content"],
            }
        )
    )
    assert isinstance(reply, SSEReply)
    for block in reply.events:
        check_stream_event(json.loads(block.decode().split("data: ", 1)[1]))


def _recorded(body: dict[str, Any]) -> Any:
    from provider_server import Recorded

    return Recorded("POST", "/v1/responses", {}, body, 0.0, 0)


# --- decoding -----------------------------------------------------------------------


def test_streamed_text_and_usage(server: ProviderServer, make: Any) -> None:
    server.reply(SSEReply(sse_events("responses", "text")))
    deltas, response = run(make(), ask())
    assert [e.text for e in deltas if isinstance(e, ModelTextDelta)] == [
        "Hello",
        ", Ali",
        "! ☀️ How can I help?",
    ]
    assert response.message.text == "Hello, Ali! ☀️ How can I help?"
    assert response.finish_reason == "stop"
    assert response.model == "gpt-4o-mini-2024-07-18"
    usage = response.usage
    assert (usage.input_tokens, usage.output_tokens) == (1200, 300)
    assert usage.cache_read_tokens == 1024
    assert usage.cost_usd > 0
    [sent] = server.requests
    assert sent.path == "/v1/responses"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    check_request(sent.body)


def test_reasoning_and_calls_are_kept_from_the_completed_items(
    server: ProviderServer, make: Any
) -> None:
    server.reply(SSEReply(sse_events("responses", "tool_calls")))
    deltas, response = run(make(), ask(tools=(WEATHER,)))
    reasoning = [e.text for e in deltas if isinstance(e, ModelReasoningDelta)]
    summary = "**Checking the weather**\n\nThe user wants Paris weather; I should call get_weather."
    assert "".join(reasoning) == summary + "\n\nThen the time with get_time."
    calls = [e for e in deltas if isinstance(e, ModelToolCallDelta)]
    assert calls[0].id == "call_w1Qy8mN3" and calls[0].name == "get_weather"
    message = response.message
    [part] = [p for p in message.content if isinstance(p, ReasoningPart)]
    assert part.provider == "openai"
    assert part.id == "rs_6820f383d7c08191846711c5df8233bc0ac5ba57aafcbac7"
    expected = _fixture_item("tool_calls", "reasoning")
    assert part.data == expected["encrypted_content"]  # from output_item.done, not .added
    assert part.text == summary + "\n\nThen the time with get_time."
    assert message.text == ""
    assert [(c.id, c.name, dict(c.arguments)) for c in message.tool_calls] == [
        ("call_w1Qy8mN3", "get_weather", {"city": "Paris"}),
        ("call_x9Pz2kL7", "get_time", {"zone": "Europe/Paris"}),
    ]
    assert response.finish_reason == "tool_calls"
    assert response.usage.reasoning_tokens == 100


def _fixture_item(name: str, kind: str) -> dict[str, Any]:
    for block in sse_events("responses", name):
        event = json.loads(block.decode().split("data: ", 1)[1])
        if event["type"] == "response.output_item.done" and event["item"]["type"] == kind:
            item: dict[str, Any] = event["item"]
            return item
    raise AssertionError(kind)


def test_replayed_items_are_the_received_ones_byte_for_byte(
    server: ProviderServer, make: Any
) -> None:
    server.reply(
        SSEReply(sse_events("responses", "tool_calls")), SSEReply(sse_events("responses", "text"))
    )
    provider = make()
    user = Message.user("Weather and time in Paris?")
    _, first = run(provider, ask(user, tools=(WEATHER,)))
    results = [Message.tool(c.id, "ok") for c in first.message.tool_calls]
    run(provider, ask(user, first.message, *results, tools=(WEATHER,)))
    body = server.requests[1].body
    check_request(body)
    reasoning = {k: v for k, v in _fixture_item("tool_calls", "reasoning").items()}
    assert body["input"][1] == reasoning  # id, summary parts and encrypted content, verbatim
    assert [i["type"] for i in body["input"]] == [
        "message", "reasoning", "function_call", "function_call",
        "function_call_output", "function_call_output",
    ]  # fmt: skip
    assert body["store"] is False and body["include"] == ["reasoning.encrypted_content"]


def test_incomplete_reply_is_length_and_its_lone_reasoning_is_not_replayed(
    server: ProviderServer, make: Any
) -> None:
    server.reply(
        SSEReply(sse_events("responses", "incomplete")), SSEReply(sse_events("responses", "text"))
    )
    provider = make()
    _, first = run(provider, ask())
    assert first.finish_reason == "length"
    assert [p.type for p in first.message.content] == ["reasoning"]
    run(provider, ask(Message.user("Hi"), first.message, Message.user("Go on")))
    types = [i["type"] for i in server.requests[1].body["input"]]
    assert types == ["message", "message"]  # a reasoning item with nothing after it is refused


@pytest.mark.parametrize(("name", "retryable"), [("failed", True), ("error_event", True)])
def test_errors_in_the_stream(
    server: ProviderServer, make: Any, name: str, retryable: bool
) -> None:
    server.reply(*[SSEReply(sse_events("responses", name))] * 3)
    with pytest.raises(ProviderError) as caught:
        run(make(), ask())
    assert caught.value.retryable is retryable
    assert ("server_error" if name == "failed" else "rate_limit_exceeded") in str(caught.value)


def test_bad_arguments_are_kept_raw(server: ProviderServer, make: Any) -> None:
    server.reply(SSEReply(sse_events("responses", "bad_arguments")))
    _, response = run(make(), ask(tools=(WEATHER,)))
    [call] = response.message.tool_calls
    assert call.raw_arguments == '{"city": "Par' and dict(call.arguments) == {}


def test_cut_stream_is_incomplete(server: ProviderServer, make: Any) -> None:
    server.reply(SSEReply(sse_events("responses", "text"), cut_after=4, terminate=True))
    with pytest.raises(ProviderError, match=r"ended before response\.completed") as caught:
        run(make(), ask())
    assert caught.value.retryable  # the turn may try the call again


# --- the request body -----------------------------------------------------------------


def test_request_body_shapes(server: ProviderServer, make: Any) -> None:
    server.reply(SSEReply(sse_events("responses", "text")))
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8
    assistant = Message.assistant(
        [
            ReasoningPart("thinking", "openai", data="enc-1", id="rs_1"),
            TextPart("Let me look."),
            ReasoningPart("not mine", "anthropic", signature="sig"),
        ],
        tool_calls=[ToolCall("call_1", "get_weather", {"city": "Paris"})],
    )
    request = ask(
        Message.system("Answer in French."),
        Message.user(
            [TextPart("What is this?"), ImagePart(data=png), ImagePart(url="https://x/y.png")]
        ),
        assistant,
        Message.tool("call_1", "18°C", is_error=False),
        tools=(WEATHER,),
        temperature=0.2,
        max_tokens=500,
        reasoning_effort="high",
        unknown_setting=1,
    )
    run(make(reasoning={"summary": "auto"}), request)
    body = server.requests[0].body
    check_request(body)
    assert body["instructions"] == "You are terse."
    assert body["input"] == [
        {"type": "message", "role": "system", "content": "Answer in French."},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "What is this?"},
                {
                    "type": "input_image",
                    "image_url": "data:image/png;base64," + base64.b64encode(png).decode(),
                    "detail": "auto",
                },
                {"type": "input_image", "image_url": "https://x/y.png", "detail": "auto"},
            ],
        },
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "thinking"}],
            "encrypted_content": "enc-1",
        },
        {"type": "message", "role": "assistant", "content": "Let me look."},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city": "Paris"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "18°C"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": dict(WEATHER.parameters),
            "strict": False,
        }
    ]
    assert body["temperature"] == 0.2 and body["max_output_tokens"] == 500
    assert body["reasoning"] == {"summary": "auto", "effort": "high"}
    assert "unknown_setting" not in body and body["stream"] is True


# --- OpenAI's rules, enforced ---------------------------------------------------------


def _first_turn(
    rules: ResponsesRules, make: Any
) -> tuple[OpenAIResponsesProvider, Message, Message]:
    rules.reply(Think(["Need the weather."]), Call("get_weather", {"city": "Paris"}))
    provider = make()
    user = Message.user("Weather in Paris?")
    _, first = run(provider, ask(user, tools=(WEATHER,)))
    return provider, user, first.message


def test_server_refuses_a_follow_up_without_the_reasoning_item(
    rules: ResponsesRules, make: Any
) -> None:
    provider, user, message = _first_turn(rules, make)
    dropped = Message.assistant("", tool_calls=message.tool_calls)  # what Chat Completions keeps
    result = Message.tool(message.tool_calls[0].id, "18°C")
    with pytest.raises(ProviderError) as caught:
        run(provider, ask(user, dropped, result, tools=(WEATHER,)))
    assert caught.value.status == 400
    assert "of type 'function_call' was provided without its required 'reasoning' item" in str(
        caught.value
    )


def test_server_refuses_altered_encrypted_content(rules: ResponsesRules, make: Any) -> None:
    provider, user, message = _first_turn(rules, make)
    part = message.content[0]
    assert isinstance(part, ReasoningPart) and part.data
    import attrs

    altered = attrs.evolve(message, content=(attrs.evolve(part, data=part.data[:-2] + "AA"),))
    result = Message.tool(message.tool_calls[0].id, "18°C")
    with pytest.raises(ProviderError, match="could not be verified"):
        run(provider, ask(user, altered, result, tools=(WEATHER,)))


def test_server_refuses_reasoning_by_id_when_nothing_is_stored(
    rules: ResponsesRules, make: Any
) -> None:
    provider, user, message = _first_turn(rules, make)
    rules.reply(Say("18°C."))
    body = provider.build_body(ask(user, message, Message.tool(message.tool_calls[0].id, "18°C")))
    del body["input"][1]["encrypted_content"]
    import requests

    answer = requests.post(rules.server.url + "/v1/responses", json=body, timeout=5)
    assert answer.status_code == 404
    assert "Items are not persisted when `store` is set to false" in answer.text
