"""Fixtures shared by the test modules: stores by kind, and HTTP providers on a local server."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from provider_server import ProviderServer
from provider_wires import WIRES, HttpProvider, Wire, provider_factory

pytest.register_assert_rewrite("lousho_sessions.testing")

# CI shares two cores with subprocess-heavy tests: a slow example is load, not a bug.
# Tests that set their own settings keep them; this is the default for the rest.
settings.register_profile("lousho", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("lousho")

from storekit import KINDS, Kit, open_kit  # noqa: E402 - after the rewrite hook


@pytest.fixture(params=KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Kit]:
    """Each store kind in turn, empty, closed after the test."""
    kit = open_kit(request.param, tmp_path / "store")
    yield kit
    kit.close()


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    """A running loopback OpenAI/Anthropic server (tests/provider_server.py)."""
    with ProviderServer() as running:
        yield running
    # every body sent to a wire whose vendor publishes request types must be one of them
    from responses_server import check_chat_request, check_request

    for sent in running.requests:
        if sent.path.endswith("/chat/completions") and isinstance(sent.body, dict):
            check_chat_request(sent.body)
        elif sent.path.endswith("/responses") and isinstance(sent.body, dict):
            check_request(sent.body)


@pytest.fixture(params=sorted(WIRES))
def wire(request: pytest.FixtureRequest) -> Wire:
    """Each wire format in turn: OpenAI, then Anthropic."""
    return WIRES[request.param]


@pytest.fixture
def make(wire: Wire, server: ProviderServer) -> Iterator[Callable[..., HttpProvider]]:
    """Makes providers of ``wire`` pointed at ``server``; closes them after the test."""
    with provider_factory(wire, server) as factory:
        yield factory
