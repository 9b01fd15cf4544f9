"""OpenAI and Anthropic providers against a real local server: results and request bodies.

Each case runs for both wire formats where it can: streamed text and tool
calls assembled, finish reasons and usage mapped, and the exact JSON sent
(messages, images, tool calls and results, tools, settings, headers, keys).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from provider_server import ProviderServer, SSEReply, sse_events
from provider_wires import (
    FAST,
    KEY,
    WIRES,
    HttpProvider,
    Wire,
    fail,
    request,
    run,
)

from lousho_sessions.messages import ImagePart, Message, TextPart, ToolCall
from lousho_sessions.providers.anthropic import AnthropicProvider
from lousho_sessions.providers.base import (
    ModelTextDelta,
    ModelToolCallDelta,
    Provider,
    ProviderBase,
    ToolSpec,
    complete,
)
from lousho_sessions.providers.demo import DemoProvider
from lousho_sessions.providers.function import FunctionProvider, ScriptedProvider
from lousho_sessions.providers.openai import OpenAIProvider

# --- results ------------------------------------------------------------------------


def test_streamed_text(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(wire.sse("text"))
    deltas, response = run(make())
    texts = [e.text for e in deltas if isinstance(e, ModelTextDelta)]
    assert texts == ["Hello", ", Ali", "! ☀️ How can I help?"]
    assert response.message.role == "assistant"
    assert response.message.text == "".join(texts)
    assert response.message.tool_calls == ()
    assert response.finish_reason == "stop"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (1200, 300)
    assert response.usage.cost_usd == pytest.approx((1200 * 1.0 + 300 * 2.0) / 1e6)
    assert response.message.usage == response.usage
    [sent] = server.requests
    assert sent.path == wire.path
    assert sent.body["model"] == "test-model"
    assert sent.body["stream"] is True


def test_streamed_text_with_crlf_line_ends(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(wire.sse("text", crlf=True))
    _, response = run(make())
    assert response.message.text == "Hello, Ali! ☀️ How can I help?"


def test_gzip_encoded_stream(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(wire.sse("text", gzip=True))
    _, response = run(make())
    assert response.message.text == "Hello, Ali! ☀️ How can I help?"


def test_connections_are_reused(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(wire.sse("text"), wire.sse(wire.tools_fixture), wire.sse("text"))
    provider = make()
    for _ in range(3):
        run(provider)
    assert len({sent.client_port for sent in server.requests}) == 1


def test_a_body_left_open_after_the_last_event_does_not_hold_the_call(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    events = sse_events(wire.kind, "text")
    server.reply(SSEReply(events, stall_after=len(events)), wire.sse("text"))
    provider = make(timeout=(2.0, 30.0))
    started = time.monotonic()
    _, response = run(provider)
    assert (
        time.monotonic() - started < 10
    )  # the drain gives up after 1 s, not the 30 s read timeout
    assert response.message.text.startswith("Hello")
    run(provider)  # and the next call gets a fresh connection
    assert server.requests[0].client_port != server.requests[1].client_port


def test_close_releases_the_connections_and_the_provider_still_works(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(wire.sse("text"), wire.sse("text"))
    with make() as provider:
        assert isinstance(provider, Provider)
        run(provider)
        provider.close()
        run(provider)
    first, second = server.requests
    assert first.client_port != second.client_port  # the pool was closed in between


def test_every_provider_has_close() -> None:
    made: list[ProviderBase] = [
        FunctionProvider(lambda request: "hi"),
        ScriptedProvider(["hi"]),
        DemoProvider(),
    ]
    for provider in made:
        assert isinstance(provider, Provider)
        with provider:
            provider.close()
        provider.close()  # twice is fine


def test_streamed_tool_calls(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(wire.sse(wire.tools_fixture))
    deltas, response = run(make())
    assert response.finish_reason == "tool_calls"
    calls = response.message.tool_calls
    assert [(c.name, dict(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"}),
        ("get_time", {"zone": "Europe/Paris"}),
    ]
    assert all(c.id for c in calls) and calls[0].id != calls[1].id
    call_deltas = [e for e in deltas if isinstance(e, ModelToolCallDelta)]
    assert {e.index for e in call_deltas} == {0, 1}
    first = "".join(e.arguments for e in call_deltas if e.index == 0)
    assert first == '{"city": "Paris"}'
    assert [e.name for e in call_deltas if e.name] == ["get_weather", "get_time"]


def test_complete_drains_the_stream(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(wire.sse("text"))
    assert complete(make(), request()).message.text.startswith("Hello, Ali")


@pytest.mark.parametrize(
    ("kind", "events", "finish"),
    [
        (
            "openai",
            [
                b'data: {"choices":[{"index":0,"delta":{"content":"cut"},"finish_reason":"length"}]}\n\n',
                b"data: [DONE]\n\n",
            ],
            "length",
        ),
        (
            # a compatible server that says "stop" after a tool call
            "openai",
            [
                b'data: {"choices":[{"index":0,"delta":{"tool_calls":[{"id":"c1","type":"function",'
                b'"function":{"name":"f","arguments":{"x":1}}}]},"finish_reason":"stop"}]}\n\n',
                b"data: [DONE]\n\n",
            ],
            "tool_calls",
        ),
        (
            "anthropic",
            [
                b'event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":3,"output_tokens":1}}}\n\n',
                b'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":"cut"}}\n\n',
                b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":9}}\n\n',
                b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
            ],
            "length",
        ),
    ],
)
def test_finish_reason_mapping(
    kind: str, events: list[bytes], finish: str, server: ProviderServer
) -> None:
    server.reply(SSEReply(events))
    base = server.url + ("/v1" if kind == "openai" else "")
    with WIRES[kind].make_provider("m", api_key=KEY, base_url=base, retry=FAST) as provider:
        _, response = run(provider)
    assert response.finish_reason == finish
    assert response.message.text == ("" if finish == "tool_calls" else "cut")


# --- what the provider sends ---------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8
WEATHER = ToolSpec(
    "get_weather",
    "Weather for a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
CONVERSATION = (
    Message.user(
        [
            TextPart("What is in these?"),
            ImagePart(url="https://example.com/cat.jpg"),
            ImagePart(data=PNG),
        ]
    ),
    Message.assistant(
        "Checking.",
        tool_calls=[
            ToolCall("call_1", "get_weather", {"city": "Paris"}),
            ToolCall("call_2", "get_weather", {"city": "Oslo"}),
        ],
    ),
    Message.tool("call_1", "18°C"),
    Message.tool("call_2", "no such city", is_error=True),
    Message.user("Thanks."),
)
PNG_B64 = "iVBORw0KGgoAAAAAAAAAAA=="


def test_openai_request_body(server: ProviderServer) -> None:
    server.reply(SSEReply(sse_events("openai", "text")))
    with OpenAIProvider("gpt-x", api_key=KEY, base_url=server.url + "/v1", retry=FAST) as p:
        req = request(*CONVERSATION, tools=(WEATHER,), temperature=0.2, session_hint="x")
        run(p, req)
    [sent] = server.requests
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    body = sent.body
    assert body["stream_options"] == {"include_usage": True}
    assert body["temperature"] == 0.2
    assert "session_hint" not in body
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather for a city.",
                "parameters": dict(WEATHER.parameters),
            },
        }
    ]
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in these?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_B64}"}},
            ],
        },
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18°C"},
        {"role": "tool", "tool_call_id": "call_2", "content": "no such city"},
        {"role": "user", "content": "Thanks."},
    ]


def test_anthropic_request_body(server: ProviderServer) -> None:
    server.reply(SSEReply(sse_events("anthropic", "text")))
    # without caching: the cache_control marks are tested in test_prompt_cache.py
    with AnthropicProvider(
        "claude-x", api_key=KEY, base_url=server.url, retry=FAST, cache=False
    ) as p:
        req = request(*CONVERSATION, tools=(WEATHER,), temperature=0.2, stop=["END"], bogus=1)
        run(p, req)
    [sent] = server.requests
    assert sent.headers["x-api-key"] == KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in sent.headers
    body = sent.body
    assert body["system"] == [{"type": "text", "text": "You are terse."}]
    assert body["max_tokens"] == 4096
    assert body["temperature"] == 0.2
    assert body["stop_sequences"] == ["END"]
    assert "bogus" not in body
    assert body["tools"] == [
        {
            "name": "get_weather",
            "description": "Weather for a city.",
            "input_schema": dict(WEATHER.parameters),
        }
    ]
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in these?"},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64},
                },
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {
                    "type": "tool_use",
                    "id": "call_1",
                    "name": "get_weather",
                    "input": {"city": "Paris"},
                },
                {
                    "type": "tool_use",
                    "id": "call_2",
                    "name": "get_weather",
                    "input": {"city": "Oslo"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "call_1",
                    "content": [{"type": "text", "text": "18°C"}],
                },
                {
                    "type": "tool_result",
                    "tool_use_id": "call_2",
                    "content": [{"type": "text", "text": "no such city"}],
                    "is_error": True,
                },
                {"type": "text", "text": "Thanks."},
            ],
        },
    ]


def test_anthropic_max_tokens_setting_wins(server: ProviderServer) -> None:
    server.reply(SSEReply(sse_events("anthropic", "text")))
    with AnthropicProvider("c", api_key=KEY, base_url=server.url, max_tokens=100) as p:
        run(p, request(max_tokens=7))
    assert server.requests[0].body["max_tokens"] == 7


def test_keys_and_base_urls_come_from_the_environment(
    wire: Wire, server: ProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = wire.kind.upper()
    monkeypatch.setenv(f"{prefix}_API_KEY", KEY)
    monkeypatch.setenv(f"{prefix}_BASE_URL", server.url + ("/v1" if wire.kind == "openai" else ""))
    server.reply(wire.sse("text"))
    with wire.make_provider("test-model") as provider:
        run(provider)
    headers = server.requests[0].headers
    assert KEY in (
        headers.get("x-api-key"),
        headers.get("authorization", "").removeprefix("Bearer "),
    )


def test_a_keyless_server_gets_no_authorization_header(server: ProviderServer) -> None:
    server.reply(SSEReply(sse_events("openai", "text")))
    with OpenAIProvider("llama3.2", api_key="", base_url=server.url + "/v1") as p:
        run(p)
    assert "authorization" not in server.requests[0].headers


def test_the_public_endpoint_without_a_key_fails_before_any_request(
    wire: Wire, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = wire.kind.upper()
    monkeypatch.delenv(f"{prefix}_API_KEY", raising=False)
    monkeypatch.delenv(f"{prefix}_BASE_URL", raising=False)
    with wire.make_provider("test-model") as provider:
        error = fail(provider)
    assert error.retryable is False
    assert f"{prefix}_API_KEY" in str(error)
