"""Both wire formats as the provider tests use them: providers pointed at the test server."""

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
from lousho_sessions.providers.openai import OpenAIProvider

KEY = "sk-test-0c7f-SECRET-b3e9-4d21"
FAST = RetryPolicy(max_retries=2, initial_delay=0.001, max_delay=0.002, jitter=0.0)
PRICES = {"test-model": Pricing(1.0, 2.0)}
HttpProvider = OpenAIProvider | AnthropicProvider


@dataclass
class Wire:
    """One wire format: how to make its provider and name its fixtures."""

    kind: str
    path: str
    tools_fixture: str
    make_provider: Callable[..., HttpProvider]

    def sse(self, name: str, **kwargs: Any) -> SSEReply:
        return SSEReply(sse_events(self.kind, name), **kwargs)

    def error(self, status: int, headers: dict[str, str] | None = None) -> JSONReply:
        name = {401: "error_401", 429: "error_429", 400: "error_400"}.get(status, "error_500")
        return JSONReply.fixture(self.kind, name, status, headers)


WIRES = {
    "openai": Wire("openai", "/v1/chat/completions", "tool_calls", OpenAIProvider),
    "anthropic": Wire("anthropic", "/v1/messages", "tool_use", AnthropicProvider),
}


@contextlib.contextmanager
def provider_factory(wire: Wire, server: ProviderServer) -> Iterator[Callable[..., HttpProvider]]:
    """Makes providers for ``wire`` pointed at ``server``, fast retries; closes them at exit."""
    made: list[HttpProvider] = []

    def factory(**kwargs: Any) -> HttpProvider:
        options: dict[str, Any] = {
            "api_key": KEY,
            "base_url": server.url + ("/v1" if wire.kind == "openai" else ""),
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
