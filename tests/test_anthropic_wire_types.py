"""Every request body shape ``AnthropicProvider`` builds validates against the ``anthropic``
SDK's published request types (``MessageCreateParamsStreaming``, through pydantic).

The test server checks every Anthropic body it gets the same way (``wire_types``), so
each provider test checks its bodies too; here every shape is built on purpose.
"""

from __future__ import annotations

from typing import Any

import pytest
from wire_types import anthropic_request_problem

from lousho_sessions import ImagePart, Message, ReasoningPart, TextPart, ToolCall
from lousho_sessions.providers.anthropic import AnthropicProvider
from lousho_sessions.providers.base import ModelRequest, ToolSpec

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 8
WEATHER = ToolSpec(
    "get_weather",
    "Weather for a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
THINKING = ReasoningPart("Weather first.", "anthropic", signature="EqQBCgIYAhIM")
REDACTED = ReasoningPart("", "anthropic", data="EmwKAhgBEgy3va3pzix")
FOREIGN = ReasoningPart("", "openai", data="gAAAAB", id="rs_1")
CALL = ToolCall("toolu_1", "get_weather", {"city": "Paris"})
LATER = ToolCall("toolu_2", "get_weather", {"city": "Lyon"}, extra={"after_parts": 2})

SHAPES: dict[str, tuple[tuple[Message, ...], dict[str, Any]]] = {
    "text": ((Message.user("Hi"),), {}),
    "system messages": ((Message.system("Be brief."), Message.user("Hi")), {}),
    "images": (
        (
            Message.user(
                [
                    TextPart("What are these?"),
                    ImagePart(url="https://example.com/cat.jpg"),
                    ImagePart(data=PNG),
                    ImagePart(data=PNG, media_type="image/webp"),
                ]
            ),
        ),
        {},
    ),
    "tools and results": (
        (
            Message.user("Weather?"),
            Message.assistant("Checking.", tool_calls=[CALL]),
            Message.tool("toolu_1", "18C"),
            Message.assistant(tool_calls=[ToolCall("toolu_3", "get_weather", {"city": "Nice"})]),
            Message.tool("toolu_3", "no such city", is_error=True),
            Message.user("And tomorrow?"),
        ),
        {"tool_choice": {"type": "auto"}, "stop": ["END"], "metadata": {"user_id": "u1"}},
    ),
    "thinking": (
        (
            Message.user("Weather?"),
            Message.assistant([THINKING, TextPart("Checking.")], tool_calls=[CALL]),
            Message.tool("toolu_1", "18C"),
        ),
        {"thinking": {"type": "enabled", "budget_tokens": 2048}, "max_tokens": 8000},
    ),
    "redacted and interleaved thinking": (
        (
            Message.user("Weather?"),
            Message.assistant([REDACTED, THINKING, FOREIGN], tool_calls=[LATER, CALL]),
            Message.tool("toolu_2", "16C"),
            Message.tool("toolu_1", "18C"),
        ),
        {"thinking": {"type": "enabled", "budget_tokens": 2048}},
    ),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_body_shape_validates_against_the_sdk_types(shape: str) -> None:
    messages, settings = SHAPES[shape]
    with AnthropicProvider("claude-sonnet-4-5", api_key="k") as provider:
        body = provider.build_body(
            ModelRequest("You are terse.", messages, tools=(WEATHER,), settings=settings)
        )
    assert anthropic_request_problem(body) is None, body


def test_the_check_catches_what_the_api_would_refuse() -> None:
    base = {"model": "m", "max_tokens": 16, "stream": True}
    unsigned = {"role": "assistant", "content": [{"type": "thinking", "thinking": "x"}]}
    assert anthropic_request_problem({**base, "messages": [unsigned]}) is not None
    stray = {"role": "user", "content": [{"type": "text", "text": "x", "extra_field": 1}]}
    problem = anthropic_request_problem({**base, "messages": [stray]})
    assert problem is not None and "extra_field" in problem
    assert anthropic_request_problem({**base, "messages": [], "bogus": 1}) is not None
    assert anthropic_request_problem({**base, "messages": []}) is None
