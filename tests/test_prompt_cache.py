"""Prompt caching: the marks and keys each wire sends, and what they make the cache read."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from cache_server import CacheServer
from hypothesis import given, settings
from hypothesis import strategies as st
from provider_server import ProviderServer, SSEReply, sse_events
from provider_wires import FAST, KEY, request, run

from lousho_sessions import CachePolicy, Message, ToolCall, create_agent, memory_store, tool
from lousho_sessions.providers._breakpoints import MAX_BREAKPOINTS
from lousho_sessions.providers.anthropic import AnthropicProvider
from lousho_sessions.providers.base import ModelRequest, ToolSpec
from lousho_sessions.providers.openai import OpenAIProvider

WEATHER = ToolSpec("get_weather", "Weather for a city.")
CLOCK = ToolSpec("get_time", "The time in a zone.")
EPHEMERAL = {"type": "ephemeral"}


def _strip(value: Any) -> Any:
    """``value`` without the cache fields either wire adds."""
    if isinstance(value, dict):
        return {
            k: _strip(v)
            for k, v in value.items()
            if k not in ("cache_control", "prompt_cache_key", "prompt_cache_retention")
        }
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _marks(value: Any) -> list[Any]:
    """Every block of ``value`` that carries ``cache_control``, in order."""
    if isinstance(value, dict):
        found = [value] if "cache_control" in value else []
        return found + [m for v in value.values() for m in _marks(v)]
    if isinstance(value, list):
        return [m for v in value for m in _marks(v)]
    return []


def _turns(n: int) -> tuple[Message, ...]:
    """``n`` finished turns of a tool-using session, then a new user message."""
    messages: list[Message] = []
    for i in range(n):
        messages += [
            Message.user(f"question {i}"),
            Message.assistant("", tool_calls=[ToolCall(f"c{i}", "get_weather", {"city": "X"})]),
            Message.tool(f"c{i}", f"result {i}"),
            Message.assistant(f"answer {i}"),
        ]
    return (*messages, Message.user("next question"))


def test_anthropic_marks_tools_system_the_previous_call_and_the_tail() -> None:
    provider = AnthropicProvider("claude-x", api_key=KEY, base_url="http://127.0.0.1:9")
    body = provider.build_body(
        ModelRequest("You are terse.", _turns(2), tools=(WEATHER, CLOCK), session_id="s-1")
    )
    assert body["tools"][-1]["cache_control"] == EPHEMERAL
    assert "cache_control" not in body["tools"][0]
    assert body["system"] == [
        {"type": "text", "text": "You are terse.", "cache_control": EPHEMERAL}
    ]
    # the previous call ended with turn 1's tool result; this one ends with the new question
    *_, result_turn, answer, question = body["messages"]
    assert result_turn["content"][-1]["type"] == "tool_result"
    assert result_turn["content"][-1]["cache_control"] == EPHEMERAL
    assert "cache_control" not in answer["content"][-1]
    assert question["content"][-1] == {
        "type": "text",
        "text": "next question",
        "cache_control": EPHEMERAL,
    }
    assert len(_marks(body)) == MAX_BREAKPOINTS


def test_anthropic_one_hour_ttl_and_no_caching() -> None:
    hour = AnthropicProvider("c", api_key=KEY, base_url="http://x", cache=CachePolicy(ttl="1h"))
    body = hour.build_body(ModelRequest("sys", _turns(1), tools=(WEATHER,)))
    assert {str(m["cache_control"]) for m in _marks(body)} == {
        str({"type": "ephemeral", "ttl": "1h"})
    }
    off = AnthropicProvider("c", api_key=KEY, base_url="http://x", cache=False)
    assert _marks(off.build_body(ModelRequest("sys", _turns(1), tools=(WEATHER,)))) == []


def test_cache_policy_refuses_what_it_cannot_send() -> None:
    with pytest.raises(ValueError, match="ttl='2h'"):
        CachePolicy(ttl="2h")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="key=''"):
        CachePolicy(key="")
    with pytest.raises(TypeError, match="cache='yes'"):
        OpenAIProvider("m", api_key=KEY, cache="yes")  # type: ignore[arg-type]


ROLES = st.sampled_from(["user", "assistant", "tool", "system"])


@st.composite
def transcripts(draw: st.DrawFn) -> tuple[Message, ...]:
    messages = []
    for n, role in enumerate(draw(st.lists(ROLES, max_size=30))):
        text = draw(st.sampled_from(["", "hi", "a longer piece of text"]))
        if role == "assistant":
            calls = [ToolCall(f"c{n}", "get_weather", {"n": n})] if draw(st.booleans()) else []
            messages.append(Message.assistant(text, tool_calls=calls))
        elif role == "tool":
            messages.append(Message.tool(f"c{n}", text))
        elif role == "system":
            messages.append(Message.system(text))
        else:
            messages.append(Message.user(text))
    return tuple(messages)


@settings(max_examples=200, deadline=None)
@given(
    transcripts(),
    st.sampled_from([None, "Be brief."]),
    st.sampled_from([(), (WEATHER,), (WEATHER, CLOCK)]),
    st.sampled_from([True, CachePolicy(ttl="1h")]),
)
def test_caching_changes_nothing_the_model_sees(
    messages: tuple[Message, ...],
    system: str | None,
    tools: tuple[ToolSpec, ...],
    cache: bool | CachePolicy,
) -> None:
    req = ModelRequest(system, messages, tools=tools, session_id="s-1")
    for kind in (AnthropicProvider, OpenAIProvider):
        on = kind("m", api_key=KEY, base_url="http://127.0.0.1:9", cache=cache).build_body(req)
        off = kind("m", api_key=KEY, base_url="http://127.0.0.1:9", cache=False).build_body(req)
        assert _strip(copy.deepcopy(on)) == off  # only cache fields differ
        assert len(_marks(on)) <= MAX_BREAKPOINTS
        assert _marks(off) == []
        assert all(m.get("type") not in ("thinking", "redacted_thinking") for m in _marks(on))
        if kind is OpenAIProvider:
            assert on["prompt_cache_key"] == "s-1" and "prompt_cache_key" not in off


def test_openai_sends_the_session_id_as_its_prompt_cache_key(server: ProviderServer) -> None:
    for _ in range(3):
        server.reply(SSEReply(sse_events("openai", "text")))
    url = server.url + "/v1"
    with OpenAIProvider("gpt-x", api_key=KEY, base_url=url, retry=FAST) as provider:
        agent = create_agent(provider=provider, store=memory_store())
        agent.session("customer-42").send("hi")
        agent.close()
    with OpenAIProvider(
        "gpt-x", api_key=KEY, base_url=url, retry=FAST,
        cache=CachePolicy(key="tenant-7", retention="24h"),
    ) as keyed:  # fmt: skip
        run(keyed, request())
    with OpenAIProvider("gpt-x", api_key=KEY, base_url=url, retry=FAST) as no_session:
        run(no_session, request())  # a request outside a session: no key to send
    session, keyed_body, plain = (r.body for r in server.requests)
    assert session["prompt_cache_key"] == "customer-42"
    assert (keyed_body["prompt_cache_key"], keyed_body["prompt_cache_retention"]) == (
        "tenant-7",
        "24h",
    )
    assert "prompt_cache_key" not in plain and "prompt_cache_retention" not in plain


@tool
def search(query: str, limit: int) -> str:
    """Search the records."""
    return f"{limit} records for {query}: " + "figures and notes " * 60


SYSTEM = "You are a careful research assistant. " * 160  # about 1,500 tokens


@pytest.fixture
def cache_server() -> Iterator[CacheServer]:
    with CacheServer() as running:
        yield running


@pytest.mark.parametrize("wire", ["anthropic", "openai"])
@pytest.mark.parametrize("cache", [True, False])
def test_each_call_reads_what_the_previous_one_wrote(
    cache_server: CacheServer, wire: str, cache: bool
) -> None:
    if wire == "anthropic":
        provider: Any = AnthropicProvider(
            "claude-x", api_key=KEY, base_url=cache_server.url, cache=cache
        )
    else:
        provider = OpenAIProvider(
            "gpt-x", api_key=KEY, base_url=cache_server.url + "/v1", cache=cache
        )
    agent = create_agent(SYSTEM, provider=provider, tools=[search], store=memory_store())
    session = agent.session("s-1")
    for n in range(4):
        assert session.send(f"question {n}: what changed?").finish_reason == "stop"
    agent.close()
    usages = [m.usage for m in session.messages if m.usage is not None]
    assert len(usages) == 8 == len(cache_server.served)
    later = usages[2:]  # from the second turn on
    read = sum(u.cache_read_tokens for u in later) / sum(u.input_tokens for u in later)
    if cache or wire == "openai":  # OpenAI caches whether asked or not
        assert read > 0.85, read
    else:
        assert read == 0
    for usage, served in zip(usages, cache_server.served, strict=True):  # as the server counted
        counted = served.usage
        if wire == "anthropic":
            assert usage.cache_read_tokens == counted["cache_read_input_tokens"]
            assert usage.cache_write_tokens == counted["cache_creation_input_tokens"]
        else:
            assert usage.input_tokens == counted["prompt_tokens"]
            assert usage.cache_read_tokens == counted["prompt_tokens_details"]["cached_tokens"]
    assert session.usage().cache_read_tokens == sum(u.cache_read_tokens for u in usages)
