"""The HTTP client reads the proxy settings of the environment once per change."""

from __future__ import annotations

import pytest
from provider_server import ProviderServer, SSEReply, sse_events

from lousho_sessions import Message
from lousho_sessions.errors import ProviderError
from lousho_sessions.providers._http import RetryPolicy
from lousho_sessions.providers.base import ModelRequest, complete
from lousho_sessions.providers.openai import OpenAIProvider


def test_a_proxy_set_between_calls_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """The HTTP client keeps the environment's proxy settings between requests (requests
    reads the whole environment every time otherwise), and notices when they change."""
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    request = ModelRequest(None, (Message.user("hi"),), session_id="s")
    with ProviderServer() as server:
        for _ in range(2):
            server.reply(SSEReply(sse_events("openai", "text")))
        provider = OpenAIProvider(
            "gpt-x", api_key="k", base_url=server.url + "/v1", retry=RetryPolicy(max_retries=0)
        )
        complete(provider, request)
        monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # nothing listens there
        with pytest.raises(ProviderError, match=r"(?i)proxy|refused"):
            complete(provider, request)
        monkeypatch.delenv("http_proxy")
        complete(provider, request)
        assert len(server.requests) == 2
        provider.close()
