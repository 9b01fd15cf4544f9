"""The client side of the Responses tests: providers pointed at the loopback server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from provider_server import ProviderServer
from provider_wires import FAST, KEY
from responses_server import ResponsesRules

from lousho_sessions.messages import Message
from lousho_sessions.pricing import Pricing
from lousho_sessions.providers.base import ModelRequest, ModelResponse, ToolSpec
from lousho_sessions.providers.openai_responses import OpenAIResponsesProvider

__all__ = ["ask", "make", "rules", "run"]


@pytest.fixture
def make(server: ProviderServer) -> Iterator[Any]:
    made: list[OpenAIResponsesProvider] = []

    def factory(**kwargs: Any) -> OpenAIResponsesProvider:
        options: dict[str, Any] = {
            "api_key": KEY,
            "base_url": server.url + "/v1",
            "retry": FAST,
            "timeout": (2.0, 5.0),
            "pricing": {"test-model": Pricing(1.0, 2.0)},
        }
        options.update(kwargs)
        provider = OpenAIResponsesProvider("test-model", **options)
        made.append(provider)
        return provider

    yield factory
    for provider in made:
        provider.close()


@pytest.fixture
def rules(server: ProviderServer) -> Iterator[ResponsesRules]:
    checked = ResponsesRules(server)
    yield checked
    assert checked.invalid == []  # every body validated against the SDK's request type


def run(
    provider: OpenAIResponsesProvider, request: ModelRequest
) -> tuple[list[Any], ModelResponse]:
    events = list(provider.stream(request, request.signal))
    assert isinstance(events[-1], ModelResponse)
    return events[:-1], events[-1]


def ask(*messages: Message, tools: tuple[ToolSpec, ...] = (), **settings: Any) -> ModelRequest:
    return ModelRequest(
        system="You are terse.",
        messages=messages or (Message.user("Hi, I am Ali."),),
        tools=tools,
        settings=settings,
    )
