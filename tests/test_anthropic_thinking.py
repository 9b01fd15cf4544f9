"""Extended thinking through ``AnthropicProvider`` against a server that enforces the API's rules.

The server (``tests/anthropic_rules.py``) answers 400, in the API's words, to a follow-up
that drops, alters or moves a thinking block: what the API does. An agent with tools and
``settings={"thinking": ...}`` must finish multi-step tool turns there, streamed or not,
sync or async, on a durable store or in memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from anthropic_rules import FINAL_MUST_START_WITH_THINKING, AnthropicThinkingRules
from provider_server import ProviderServer, SSEReply, sse_events

from lousho_sessions import (
    Message,
    ProviderError,
    ReasoningPart,
    TextPart,
    ToolCall,
    aio,
    create_agent,
    tool,
)
from lousho_sessions.events import Event, ReasoningDeltaEvent, TextDelta
from lousho_sessions.pricing import Pricing
from lousho_sessions.providers import RetryPolicy
from lousho_sessions.providers.anthropic import AnthropicProvider
from lousho_sessions.providers.base import (
    ModelReasoningDelta,
    ModelRequest,
    ModelResponse,
    ModelTextDelta,
    ToolSpec,
)
from lousho_sessions.providers.openai import OpenAIProvider
from lousho_sessions.sqlite import SqliteStore

KEY = "sk-ant-test-0c7f-9a1d-b3e9"
FAST = RetryPolicy(max_retries=1, initial_delay=0.001, max_delay=0.002, jitter=0.0)
THINKING = {"type": "enabled", "budget_tokens": 2048}
STEPS = ("thinking_tool_use", "interleaved_tool_use", "thinking_text")


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return {"Paris": "18C", "Lyon": "16C"}.get(city, "unknown")


@tool
def get_time(zone: str) -> str:
    """The time in a time zone."""
    return f"12:00 in {zone}"


@pytest.fixture
def server() -> Iterator[tuple[ProviderServer, AnthropicThinkingRules]]:
    rules = AnthropicThinkingRules()
    with ProviderServer(rules=rules) as running:
        yield running, rules


def anthropic(server: ProviderServer) -> AnthropicProvider:
    return AnthropicProvider(
        "claude-test",
        api_key=KEY,
        base_url=server.url,
        retry=FAST,
        timeout=(2.0, 5.0),
        pricing={"claude-test": Pricing(3.0, 15.0)},
    )


def replies(server: ProviderServer, *names: str) -> None:
    server.reply(*(SSEReply(sse_events("anthropic", name)) for name in names))


def drain(provider: AnthropicProvider, request: ModelRequest) -> list[Any]:
    return list(provider.stream(request, request.signal))


# -- the stream, captured ----------------------------------------------------------------


def test_thinking_and_its_signature_are_captured_before_the_text_and_call(
    server: tuple[ProviderServer, AnthropicThinkingRules],
) -> None:
    running, _ = server
    replies(running, "thinking_tool_use")
    with anthropic(running) as provider:
        events = drain(provider, ModelRequest(None, (Message.user("Weather in Paris?"),)))
    reasoning = [e.text for e in events if isinstance(e, ModelReasoningDelta)]
    assert reasoning == [
        "The user asks for the weather in Paris. ",
        "I should call get_weather with city Paris.",
    ]
    assert [e.text for e in events if isinstance(e, ModelTextDelta)] == [
        "Let me check the weather."
    ]
    response = events[-1]
    assert isinstance(response, ModelResponse) and response.finish_reason == "tool_calls"
    thinking, text = response.message.content
    assert isinstance(thinking, ReasoningPart) and thinking.provider == "anthropic"
    assert thinking.text == "".join(reasoning)
    assert thinking.signature is not None and thinking.signature.startswith("EqQBCgIYAhIM1gbc")
    assert text == TextPart("Let me check the weather.")
    assert response.message.text == "Let me check the weather."
    assert response.message.tool_calls[0].extra == {}  # it came after every part


def test_redacted_and_interleaved_thinking_keep_their_places(
    server: tuple[ProviderServer, AnthropicThinkingRules],
) -> None:
    running, _ = server
    replies(running, "interleaved_tool_use")
    with anthropic(running) as provider:
        events = drain(provider, ModelRequest(None, (Message.user("Weather and time?"),)))
        message = events[-1].message
        redacted, first, second = message.content
        assert isinstance(redacted, ReasoningPart) and redacted.data and not redacted.text
        assert redacted.signature is None
        assert isinstance(first, ReasoningPart) and first.text.startswith("It is 18C")
        assert isinstance(second, ReasoningPart) and second.text.startswith("Lyon")
        get_time_call, lyon = message.tool_calls
        assert get_time_call.extra == {"after_parts": 2} and lyon.extra == {}
        # sent back exactly as it came: redacted, thinking, tool_use, thinking, tool_use
        body = provider.build_body(ModelRequest(None, (Message.user("Weather and time?"), message)))
    blocks = body["messages"][1]["content"]
    assert [b["type"] for b in blocks] == [
        "redacted_thinking",
        "thinking",
        "tool_use",
        "thinking",
        "tool_use",
    ]
    assert blocks[0] == {"type": "redacted_thinking", "data": redacted.data}
    assert blocks[1] == {"type": "thinking", "thinking": first.text, "signature": first.signature}
    assert [blocks[2]["id"], blocks[4]["id"]] == [get_time_call.id, lyon.id]


# -- the server enforces the rules (so the tests below can fail) --------------------------


def test_the_server_refuses_what_the_api_refuses(
    server: tuple[ProviderServer, AnthropicThinkingRules],
) -> None:
    running, rules = server
    replies(running, "thinking_tool_use")
    with anthropic(running) as provider:
        first = drain(provider, ModelRequest(None, (Message.user("Weather?"),)))[-1].message
        call = first.tool_calls[0]
        result = Message.tool(call.id, "18C")
        settings = {"thinking": THINKING}
        thinking = first.content[0]
        assert isinstance(thinking, ReasoningPart)
        # what today's main sent: the thinking dropped
        dropped = Message.assistant("Let me check the weather.", tool_calls=[call])
        # the signature altered
        altered = Message.assistant(
            [ReasoningPart(thinking.text, "anthropic", signature="EqQBforged")], tool_calls=[call]
        )
        errors = []
        for assistant in (dropped, altered):
            request = ModelRequest(
                None, (Message.user("Weather?"), assistant, result), settings=settings
            )
            with pytest.raises(ProviderError) as caught:
                drain(provider, request)
            assert caught.value.status == 400
            errors.append(str(caught.value))
    assert rules.refusals == [
        FINAL_MUST_START_WITH_THINKING.format(i=1, found="text"),
        "messages.1.content.0: Invalid `signature` in `thinking` block",
    ]
    assert "Expected `thinking` or `redacted_thinking`, but found `text`" in errors[0]
    assert "Invalid `signature` in `thinking` block" in errors[1]


# -- an agent with tools and thinking: multi-step tool turns ------------------------------


def kinds(events: list[Event]) -> list[str]:
    return [e.type for e in events if e.type in ("reasoning.delta", "text.delta", "tool.call")]


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("durable", [False, True])
def test_an_agent_with_thinking_finishes_multi_step_tool_turns(
    server: tuple[ProviderServer, AnthropicThinkingRules],
    tmp_path: Path,
    mode: str,
    streamed: bool,
    durable: bool,
) -> None:
    running, rules = server
    replies(running, *STEPS)
    store = SqliteStore(tmp_path / "s.db") if durable else None
    options: dict[str, Any] = {
        "provider": anthropic(running),
        "tools": [get_weather, get_time],
        "settings": {"thinking": THINKING},
    }
    if store is not None:
        options["store"] = store
    events: list[Event] = []
    if mode == "sync":
        agent = create_agent(**options)
        session = agent.session("trip")
        if streamed:
            run = session.stream("Weather and time in Paris, and Lyon?")
            events = list(run)
            result = run.result()
        else:
            result = session.send("Weather and time in Paris, and Lyon?")
        transcript = session.load()
        agent.close()
    else:

        async def main() -> tuple[Any, tuple[Message, ...]]:
            agent = aio.create_agent(**options)
            session = agent.session("trip")
            if streamed:
                run = session.stream("Weather and time in Paris, and Lyon?")
                events.extend([event async for event in run])
                done = await run.result()
            else:
                done = await session.send("Weather and time in Paris, and Lyon?")
            loaded = await session.load()
            agent.close()
            return done, loaded

        result, transcript = asyncio.run(main())
    assert rules.refusals == []
    assert result.finish_reason == "stop" and result.steps == 3
    assert result.text == "It is 18C in Paris (12:00) and 16C in Lyon."
    assert rules.checked == 2  # both follow-ups carried thinking, and it was right
    assistants = [m for m in transcript if m.role == "assistant"]
    assert [len([p for p in m.content if isinstance(p, ReasoningPart)]) for m in assistants] == [
        1,
        3,
        1,
    ]
    assert assistants[-1].reasoning.startswith("I have the weather")
    # the last request held every block of the turn, in order
    last = running.requests[-1].body["messages"]
    assert [[b["type"] for b in m["content"]] for m in last if m["role"] == "assistant"] == [
        ["thinking", "text", "tool_use"],
        ["redacted_thinking", "thinking", "tool_use", "thinking", "tool_use"],
    ]
    if streamed:
        assert kinds(events)[:2] == ["reasoning.delta", "reasoning.delta"]
        reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDeltaEvent))
        assert reasoning == "".join(m.reasoning for m in assistants)
        text = "".join(e.text for e in events if isinstance(e, TextDelta))
        assert text == "".join(m.text for m in assistants)  # text.delta: text only, as before
    if store is not None:
        store.close()


def test_switching_to_another_family_leaves_the_thinking_out_and_back_sends_it_again(
    server: tuple[ProviderServer, AnthropicThinkingRules],
) -> None:
    running, rules = server
    replies(running, *STEPS)
    agent = create_agent(
        provider=anthropic(running),
        tools=[get_weather, get_time],
        settings={"thinking": THINKING},
    )
    session = agent.session("switch")
    session.send("Weather and time in Paris, and Lyon?")
    agent.close()
    # the same session on a Chat Completions model: no reasoning in its request
    running.reply(SSEReply(sse_events("openai", "text")))
    other = create_agent(
        provider=OpenAIProvider("gpt-test", api_key=KEY, base_url=running.url + "/v1", retry=FAST),
        tools=[get_weather, get_time],
        store=agent.store,
    )
    other.session("switch").send("Thanks!")
    other.close()
    sent = running.requests[-1].body
    assert "EqQB" not in str(sent) and "redacted" not in str(sent)
    # and back on Claude: its thinking goes back as it came
    replies(running, "thinking_text")
    back = create_agent(provider=anthropic(running), store=agent.store)
    assert back.session("switch").send("And tomorrow?").text
    back.close()
    assert rules.refusals == []
    kinds_sent = [
        [b["type"] for b in m["content"]]
        for m in running.requests[-1].body["messages"]
        if m["role"] == "assistant"
    ]
    assert kinds_sent[:2] == [
        ["thinking", "text", "tool_use"],
        ["redacted_thinking", "thinking", "tool_use", "thinking", "tool_use"],
    ]


def test_tool_specs_are_unchanged_by_thinking(
    server: tuple[ProviderServer, AnthropicThinkingRules],
) -> None:
    running, _ = server
    with anthropic(running) as provider:
        spec = ToolSpec("get_weather", "The weather.", {"type": "object", "properties": {}})
        body = provider.build_body(
            ModelRequest(
                None,
                (Message.assistant([], tool_calls=[ToolCall("toolu_1", "get_weather")]),),
                tools=(spec,),
                settings={"thinking": THINKING},
            )
        )
    assert body["thinking"] == THINKING
    # the prompt-cache breakpoint (cache=True by default) is the only addition
    block = {k: v for k, v in body["messages"][0]["content"][0].items() if k != "cache_control"}
    assert block == {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}
    assert len(body["messages"][0]["content"]) == 1
