"""Limits on a model call, through a real local server: event size, total duration, Retry-After.

Also what a request that cannot be sent becomes (a permanent ``ProviderError``
whose ``__cause__`` is the encoding error).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from provider_server import DripReply, ProviderServer, SSEReply, StallReply
from provider_wires import HttpProvider, Wire, fail, request, run

from lousho_sessions.errors import ProviderConfigError
from lousho_sessions.messages import Message
from lousho_sessions.providers.base import ModelRequest

# --- event size ----------------------------------------------------------------------


def test_a_line_over_max_event_size_fails_naming_the_limit(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(SSEReply([b"data: " + b"x" * 5000 + b"\n\n"]))
    error = fail(make(max_event_size=4096))
    assert (error.status, error.retryable) == (None, False)
    assert "line longer than 4096 characters (max_event_size=4096)" in error.message
    assert error.request_id == "req_0001"


def test_an_event_whose_data_lines_add_up_over_the_limit_fails(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(SSEReply([b"data: " + b"y" * 1000 + b"\n" for _ in range(5)] + [b"\n"]))
    error = fail(make(max_event_size=4096))
    assert "event longer than 4096 characters" in error.message


def test_events_under_the_limit_pass(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(wire.sse("text"))
    _, response = run(make(max_event_size=1024))
    assert response.message.text.startswith("Hello")


@pytest.mark.parametrize("option", ["max_event_size", "max_duration"])
def test_limits_must_be_positive(option: str, make: Callable[..., HttpProvider]) -> None:
    with pytest.raises(ProviderConfigError, match=option):
        make(**{option: 0})


# --- total duration ------------------------------------------------------------------


def test_a_slow_drip_stream_is_stopped_at_max_duration(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    # a byte every 10 ms never trips the 2 s read timeout; without a total limit
    # the call would take the whole 8 s drip and then fail as incomplete
    server.reply(DripReply(b"data: " + b"z" * 800 + b"\n\n", interval=0.01))
    error = fail(make(max_duration=0.3))
    assert server.dripping.is_set()
    assert (error.status, error.retryable) == (None, True)
    assert "max_duration=0.3 s" in error.message
    assert "inside the stream" in error.message
    assert error.request_id == "req_0001"


def test_max_duration_covers_waiting_for_the_headers(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(StallReply(), wire.sse("text"))
    error = fail(make(timeout=(2.0, 30.0), max_duration=0.3))
    assert "max_duration=0.3 s" in error.message
    assert server.stalled.is_set()
    assert len(server.requests) == 1  # the deadline passed: no retry


def test_a_retry_that_would_start_after_max_duration_is_not_waited_for(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(wire.error(429, {"Retry-After": "30"}), wire.sse("text"))
    error = fail(make(max_duration=5.0))
    assert "max_duration=5 s" in error.message
    assert "next retry was due in 30 s" in error.message
    assert error.__cause__ is not None and "429" in str(error.__cause__)
    assert len(server.requests) == 1


def test_no_max_duration_by_default(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    assert make()._http.max_duration is None


# --- requests that cannot be sent ----------------------------------------------------


def test_a_lone_surrogate_is_a_permanent_error_caused_by_the_encoding(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    bad = ModelRequest(system="Be \ud800 brief.", messages=(Message.user("hi"),))
    error = fail(make(), bad)
    assert (error.status, error.retryable) == (None, False)
    assert isinstance(error.__cause__, UnicodeEncodeError)
    assert "cannot be encoded as UTF-8" in error.message
    assert "\\ud800" in error.message
    assert server.requests == []


def test_nan_in_settings_is_a_permanent_error(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    error = fail(make(), request(temperature=math.nan))
    assert error.retryable is False
    assert isinstance(error.__cause__, ValueError)
    assert server.requests == []
