"""Every HTTP wire format as the provider tests use them: providers pointed at the test server.

``WIRES`` holds OpenAI Chat Completions, the Responses API, Anthropic Messages and
Gemini: the shared suites (retries, abort, limits, key redaction, streaming) run over
each of them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from provider_server import JSONReply, ProviderServer, SSEReply, sse_events

from lousho_sessions.abort import AbortSignal
from lousho_sessions.errors import ProviderError
from lousho_sessions.messages import Message
from lousho_sessions.pricing import Pricing
from lousho_sessions.providers import RetryPolicy
from lousho_sessions.providers.anthropic import AnthropicProvider
from lousho_sessions.providers.base import ModelEvent, ModelRequest, ModelResponse, ToolSpec
from lousho_sessions.providers.gemini import GeminiProvider
from lousho_sessions.providers.openai import OpenAIProvider
from lousho_sessions.providers.openai_responses import OpenAIResponsesProvider

KEY = "sk-test-0c7f-SECRET-b3e9-4d21"
FAST = RetryPolicy(max_retries=2, initial_delay=0.001, max_delay=0.002, jitter=0.0)
PRICES = {"test-model": Pricing(1.0, 2.0)}
HttpProvider = OpenAIProvider | OpenAIResponsesProvider | AnthropicProvider | GeminiProvider


@dataclass
class Wire:
    """One wire format: how to make its provider and name its fixtures.

    ``kind`` is the folder of its fixtures (``tests/fixtures/providers/<kind>``) and its
    name in ``WIRES``; ``prefix`` is what its base URL adds to the server's (the API
    version the provider does not add itself); ``bad_request`` a word of its 400 body.
    """

    kind: str
    path: str
    tools_fixture: str
    make_provider: type[HttpProvider]
    prefix: str = ""
    bad_request: str = "invalid_request_error"

    @property
    def key_env(self) -> str:
        """The environment variable its key comes from."""
        return self.make_provider.KEY_ENV

    @property
    def base_url_env(self) -> str:
        """The environment variable its base URL comes from."""
        return self.make_provider.BASE_URL_ENV

    def base_url(self, server_url: str) -> str:
        return server_url + self.prefix

    def sse(self, name: str, **kwargs: Any) -> SSEReply:
        """Fixture ``name`` as a reply. A ``stall_after``/``cut_after`` is kept before the
        last event: a stream stalled or cut there is mid-reply on every wire (Gemini's
        last chunk ends the reply, and its streams are short)."""
        events = sse_events(self.kind, name)
        for option in ("stall_after", "cut_after"):
            if kwargs.get(option) is not None:
                kwargs[option] = min(kwargs[option], len(events) - 1)
        return SSEReply(events, **kwargs)

    def through_first_text(self, name: str = "text") -> int:
        """How many events of fixture ``name`` it takes to stream its first text."""
        events = sse_events(self.kind, name)
        return next(n + 1 for n, event in enumerate(events) if b"Hel" in event)

    def error(self, status: int, headers: dict[str, str] | None = None) -> JSONReply:
        name = {401: "error_401", 429: "error_429", 400: "error_400"}.get(status, "error_500")
        return JSONReply.fixture(self.kind, name, status, headers)


WIRES = {
    "openai": Wire("openai", "/v1/chat/completions", "tool_calls", OpenAIProvider, "/v1"),
    "responses": Wire("responses", "/v1/responses", "tool_calls", OpenAIResponsesProvider, "/v1"),
    "anthropic": Wire("anthropic", "/v1/messages", "tool_use", AnthropicProvider),
    "gemini": Wire(
        "gemini",
        "/v1beta/models/test-model:streamGenerateContent?alt=sse",
        "thinking_tool_call",
        GeminiProvider,
        bad_request="INVALID_ARGUMENT",
    ),
}


@contextlib.contextmanager
def provider_factory(wire: Wire, server: ProviderServer) -> Iterator[Callable[..., HttpProvider]]:
    """Makes providers for ``wire`` pointed at ``server``, fast retries; closes them at exit."""
    made: list[HttpProvider] = []

    def factory(**kwargs: Any) -> HttpProvider:
        options: dict[str, Any] = {
            "api_key": KEY,
            "base_url": wire.base_url(server.url),
            "retry": FAST,
            "timeout": (2.0, 2.0),
            "pricing": PRICES,
        }
        options.update(kwargs)
        provider = wire.make_provider("test-model", **options)
        made.append(provider)
        return provider

    yield factory
    for provider in made:
        provider.close()


def request(*messages: Message, tools: tuple[ToolSpec, ...] = (), **settings: Any) -> ModelRequest:
    return ModelRequest(
        system="You are terse.",
        messages=messages or (Message.user("Hi, I am Ali."),),
        tools=tools,
        settings=settings,
    )


def run(
    provider: HttpProvider, req: ModelRequest | None = None, signal: AbortSignal | None = None
) -> tuple[list[ModelEvent], ModelResponse]:
    req = req or request()
    events = list(provider.stream(req, signal or req.signal))
    assert isinstance(events[-1], ModelResponse)
    assert not any(isinstance(e, ModelResponse) for e in events[:-1])
    return events[:-1], events[-1]


def fail(provider: HttpProvider, req: ModelRequest | None = None) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        run(provider, req)
    return caught.value


#: The wires whose tool-call arguments arrive as JSON text (so may be malformed); Gemini
#: sends them as a JSON object.
TEXT_ARGUMENT_WIRES = [WIRES[kind] for kind in sorted(WIRES) if kind != "gemini"]
