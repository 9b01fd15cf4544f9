"""What building a request body costs each provider, per model call, at 10 and 1,000 messages.

A session sends its whole transcript with every model call. Each HTTP provider keeps,
per session, the JSON text of the turns its previous call sent and encodes only the
tail (``lousho_sessions/providers/_body_memo.py``). This replays a tool-using session
(user question, tool call, tool result, answer: two model calls a turn) on top of 10 or
1,000 stored messages and times, per model call, in the same process and interleaved:

- ``fresh``: ``build_body`` then JSON-encoding the whole body (what every call did
  before the memo, and still does on a session's first call);
- ``memo``: ``encode_body``, what a call does now.

Both give equal bodies (checked on every call here; ``tests/test_body_memo.py`` checks
random sessions). Target: the memo's time at 1,000 messages well under a millisecond,
flat in the transcript's length.

Run: ``python benchmarks/request_bodies.py`` (``--turns N``, default 30).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from token_cost import SYSTEM, prefill

from lousho_sessions import Message, ToolCall
from lousho_sessions.providers._http_provider import HttpProvider
from lousho_sessions.providers.anthropic import AnthropicProvider
from lousho_sessions.providers.base import ModelRequest, ToolSpec
from lousho_sessions.providers.gemini import GeminiProvider
from lousho_sessions.providers.openai import OpenAIProvider
from lousho_sessions.providers.openai_responses import OpenAIResponsesProvider

URL = "http://127.0.0.1:9"
TOOLS = (
    ToolSpec(
        "search",
        "Search the records.",
        {
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["query", "limit"],
        },
    ),
)


def providers() -> dict[str, HttpProvider]:
    return {
        "anthropic": AnthropicProvider("claude-sonnet-4-5", api_key="k", base_url=URL),
        "openai-chat": OpenAIProvider("gpt-5", api_key="k", base_url=URL),
        "openai-responses": OpenAIResponsesProvider("gpt-5", api_key="k", base_url=URL),
        "gemini": GeminiProvider("gemini-3-pro-preview", api_key="k", base_url=URL),
    }


def calls(stored: int, turns: int) -> list[ModelRequest]:
    """The requests of ``turns`` turns (two model calls each) after ``stored`` messages."""
    messages = list(prefill(stored))
    requests: list[ModelRequest] = []

    def call() -> None:
        requests.append(ModelRequest(SYSTEM, tuple(messages), TOOLS, session_id="bench"))

    for n in range(turns):
        messages.append(Message.user(f"Question {n}: how did region {n} change?"))
        call()
        arguments = {"query": f"region {n}", "limit": 5}
        messages.append(Message.assistant("", tool_calls=[ToolCall(f"t{n}", "search", arguments)]))
        messages.append(Message.tool(f"t{n}", "a figure, its source and a note. " * 35))
        call()
        messages.append(Message.assistant("The figures rose by a small margin. " * 4))
    return requests


def timed(provider: HttpProvider, requests: list[ModelRequest]) -> tuple[list[float], list[float]]:
    """Seconds per call of the fresh build and of the memo, interleaved call by call."""
    fresh, memo = [], []
    encode = provider._http.encode
    provider.encode_body(requests[0])  # the session's first call encodes everything
    for request in requests[1:]:
        start = time.perf_counter()
        whole = encode(provider.build_body(request))
        middle = time.perf_counter()
        data = provider.encode_body(request)
        end = time.perf_counter()
        fresh.append(middle - start)
        memo.append(end - middle)
        assert json.loads(data) == json.loads(whole)
    return fresh, memo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=30)
    args = parser.parse_args()
    print("request body per model call (ms): median / p90, fresh build vs memo")
    for stored in (10, 1000):
        requests = calls(stored, args.turns)
        for name, provider in providers().items():
            rows: list[Any] = []
            for times in timed(provider, requests):
                times.sort()
                rows.append((statistics.median(times) * 1000, times[int(len(times) * 0.9)] * 1000))
            (fm, fp), (mm, mp) = rows
            print(f"  {name:16} {stored:>5} messages: fresh {fm:7.3f} / {fp:7.3f}   "
                  f"memo {mm:6.3f} / {mp:6.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
