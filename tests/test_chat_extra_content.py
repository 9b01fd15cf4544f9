"""Fields a Chat Completions-compatible server adds to a tool call go back with it.

Gemini's OpenAI-compatible endpoint puts a function call's thought signature in the
call's ``extra_content`` (``{"google": {"thought_signature": ...}}``) and refuses a
follow-up that drops it. The provider keeps any field of a streamed tool call that
Chat Completions does not define in ``ToolCall.extra`` and sends it back as it came,
through every store (here: SQLite, read back by another agent).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from provider_server import ProviderServer, SSEReply

from lousho_sessions import OpenAIProvider, create_agent, tool
from lousho_sessions.providers.openai import ECHO
from lousho_sessions.sqlite import SqliteStore

SIGNATURE = "c2lnbmF0dXJlLW9mLXRoZS1jYWxs"  # opaque, base64 as Gemini sends it
EXTRA = {"google": {"thought_signature": SIGNATURE}}
BASE = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gemini-compat"}


def _sse(data: Any) -> bytes:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    return _sse({**BASE, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


def call_reply() -> SSEReply:
    """A tool call whose first chunk carries ``extra_content``, its arguments in two pieces."""
    first = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "lookup", "arguments": '{"q": '},
        "extra_content": EXTRA,
    }
    rest = {"index": 0, "function": {"arguments": '"paris"}'}}
    return SSEReply(
        [
            _chunk({"role": "assistant", "content": None, "tool_calls": [first]}),
            _chunk({"tool_calls": [rest]}),
            _chunk({}, "tool_calls"),
            _sse("[DONE]"),
        ]
    )


def text_reply(text: str) -> SSEReply:
    return SSEReply(
        [_chunk({"role": "assistant", "content": text}), _chunk({}, "stop"), _sse("[DONE]")]
    )


@tool
def lookup(q: str) -> str:
    """Looks ``q`` up."""
    return f"found {q}"


def sent_calls(server: ProviderServer, number: int) -> list[dict[str, Any]]:
    """The assistant tool calls in request ``number``'s body."""
    body = server.requests[number].body
    return [
        c for m in body["messages"] if m["role"] == "assistant" for c in m.get("tool_calls", [])
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_extra_content_of_a_tool_call_is_sent_back_unchanged(
    server: ProviderServer, tmp_path: Path, stream: bool
) -> None:
    server.reply(call_reply(), text_reply("Paris it is."), text_reply("Still Paris."))
    store = SqliteStore(tmp_path / "s.db")
    provider = OpenAIProvider("gemini-compat", api_key="k", base_url=server.url + "/v1")
    agent = create_agent(provider=provider, tools=[lookup], store=store)
    try:
        session = agent.session("s1")
        result = session.stream("Where?").result() if stream else session.send("Where?")
        assert result.text == "Paris it is."
        [call] = sent_calls(server, 1)
        assert call["extra_content"] == EXTRA
        assert call["function"] == {"name": "lookup", "arguments": '{"q": "paris"}'}
        stored = [m for m in store.sessions.load("s1") or [] if m.tool_calls]
        assert stored[0].tool_calls[0].extra[ECHO] == {"extra_content": EXTRA}
    finally:
        agent.close()
    # another agent on the stored transcript sends it back too (the store kept it)
    again = create_agent(
        provider=OpenAIProvider("gemini-compat", api_key="k", base_url=server.url + "/v1"),
        store=SqliteStore(tmp_path / "s.db"),
    )
    try:
        assert again.session("s1").send("And now?").text == "Still Paris."
        [call] = sent_calls(server, 2)
        assert call["extra_content"] == EXTRA
    finally:
        again.close()
        store.close()


def test_a_plain_tool_call_sends_nothing_extra(server: ProviderServer) -> None:
    plain = SSEReply(
        [
            _chunk(
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"index": 0, "id": "call_1", "type": "function",
                         "function": {"name": "lookup", "arguments": '{"q": "x"}'}}
                    ],
                }
            ),
            _chunk({}, "tool_calls"),
            _sse("[DONE]"),
        ]
    )  # fmt: skip
    server.reply(plain, text_reply("ok"))
    provider = OpenAIProvider("m", api_key="k", base_url=server.url + "/v1")
    agent = create_agent(provider=provider, tools=[lookup])
    try:
        agent.session("s").send("go")
        [call] = sent_calls(server, 1)
        assert set(call) == {"id", "type", "function"}
    finally:
        agent.close()
