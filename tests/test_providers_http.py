"""Every HTTP provider against a real local server: failures, retries, abort.

Every case runs for each wire format (``provider_wires.WIRES``): a clear ``ProviderError`` with the right
``status`` and ``retryable``; retry counts; ``Retry-After``; read timeouts;
abort at once (not after the timeout or backoff); the key never leaked.
"""

from __future__ import annotations

import json
import logging
import pickle
import socket
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from provider_server import JSONReply, ProviderServer, SSEReply, StallReply, sse_events
from provider_wires import (
    FAST,
    KEY,
    TEXT_ARGUMENT_WIRES,
    HttpProvider,
    Wire,
    fail,
    request,
    run,
)

from lousho_sessions.abort import AbortController, AbortedError, AbortSignal
from lousho_sessions.errors import ProviderError
from lousho_sessions.providers._http import RetryPolicy, Secret, parse_retry_after
from lousho_sessions.providers.anthropic import AnthropicProvider
from lousho_sessions.providers.base import (
    ModelEvent,
    ModelResponse,
    ModelTextDelta,
)
from lousho_sessions.providers.openai import OpenAIProvider


class _LogEvent(logging.Handler):
    """Sets ``event`` when a record containing ``needle`` is logged."""

    def __init__(self, needle: str) -> None:
        super().__init__(logging.DEBUG)
        self.needle = needle
        self.event = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.needle in record.getMessage():
            self.event.set()


# --- HTTP errors and retries ---------------------------------------------------------


def test_401_is_not_retried(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(wire.error(401))
    error = fail(make())
    assert (error.status, error.retryable) == (401, False)
    assert "invalid" in error.message.lower()
    assert error.request_id == "req_0001"
    assert len(server.requests) == 1


def test_400_is_not_retried(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(wire.error(400), wire.sse("text"))
    error = fail(make())
    assert (error.status, error.retryable) == (400, False)
    assert wire.bad_request in error.message
    assert len(server.requests) == 1


def test_500_then_success(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(wire.error(500), wire.sse("text"))
    _, response = run(make())
    assert response.message.text.startswith("Hello")
    assert len(server.requests) == 2
    assert server.requests[0].body == server.requests[1].body


def test_500_until_retries_run_out(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(*[wire.error(500)] * 5)
    error = fail(make(max_retries=3))
    assert (error.status, error.retryable) == (500, True)
    assert len(server.requests) == 4


@pytest.mark.parametrize("status", [408, 409, 429, 502, 503, 529])
def test_retried_statuses(
    status: int, wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(JSONReply(status, '{"error": {"message": "later"}}'), wire.sse("text"))
    run(make())
    assert len(server.requests) == 2


def test_x_should_retry_false_wins(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(wire.error(500, {"x-should-retry": "false"}), wire.sse("text"))
    error = fail(make())
    assert (error.status, error.retryable) == (500, False)
    assert len(server.requests) == 1


def test_429_retry_after_is_honoured(
    wire: Wire,
    server: ProviderServer,
    make: Callable[..., HttpProvider],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "lousho_sessions.providers")
    server.reply(wire.error(429, {"Retry-After": "0.05"}), wire.sse("text"))
    run(make())
    first, second = server.requests
    assert second.time - first.time >= 0.05
    assert "retrying in 0.050s" in caplog.text


def test_retry_after_ms_wins_over_retry_after(
    wire: Wire,
    server: ProviderServer,
    make: Callable[..., HttpProvider],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "lousho_sessions.providers")
    headers = {"retry-after-ms": "30", "Retry-After": "20"}
    server.reply(wire.error(429, headers), wire.sse("text"))
    run(make())
    assert "retrying in 0.030s" in caplog.text
    assert server.requests[1].time - server.requests[0].time >= 0.03


def test_a_retry_after_beyond_the_cap_fails_at_once(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(wire.error(429, {"Retry-After": "3600"}), wire.sse("text"))
    error = fail(make())
    assert (error.status, error.retryable, error.retry_after) == (429, True, 3600.0)
    assert "asked to wait 3600 s" in error.message
    assert "max_retry_after=60 s" in error.message
    assert len(server.requests) == 1


def test_parse_retry_after() -> None:
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after": "1.5"}) == 1.5
    assert parse_retry_after({"retry-after-ms": "250"}) == 0.25
    assert parse_retry_after({"retry-after-ms": "x", "retry-after": "3"}) == 3.0
    date = "Wed, 21 Oct 2015 07:28:00 GMT"
    assert parse_retry_after({"retry-after": date}, now=1445412470.0) == 10.0
    assert parse_retry_after({"retry-after": date}, now=1445412490.0) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


def test_backoff_grows_and_is_capped() -> None:
    policy = RetryPolicy(initial_delay=0.5, max_delay=4.0, jitter=0.0)
    assert [policy.backoff(n) for n in range(5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    jittered = RetryPolicy(initial_delay=1.0, jitter=0.25)
    assert all(0.75 <= jittered.backoff(0) <= 1.0 for _ in range(50))


def test_connection_refused_is_retried_then_raised(
    wire: Wire, make: Callable[..., HttpProvider], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "lousho_sessions.providers")
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = wire.base_url(f"http://127.0.0.1:{port}")
    error = fail(make(base_url=base))
    assert (error.status, error.retryable) == (None, True)
    assert f"connection refused (127.0.0.1:{port})" in error.message
    assert "timed out" not in error.message
    assert caplog.text.count("retrying in") == 2


# --- broken streams ------------------------------------------------------------------


def test_stream_cut_off_mid_event(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(wire.sse("text", cut_after=3), wire.sse("text"))
    provider = make()
    events: list[ModelEvent] = []
    with pytest.raises(ProviderError) as caught:
        events.extend(provider.stream(request(), AbortSignal()))
    error = caught.value
    assert (error.status, error.retryable) == (None, True)
    assert "interrupted" in error.message
    assert error.request_id == "req_0001"
    assert not any(isinstance(e, ModelResponse) for e in events)
    assert len(server.requests) == 1  # never retried once events flowed


def test_stream_ended_cleanly_mid_event(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(wire.sse("text", cut_after=3, terminate=True))
    error = fail(make())
    assert (error.status, error.retryable) == (None, True)
    assert "ended before" in error.message


def test_malformed_json_in_an_event(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(wire.sse("malformed_json"))
    error = fail(make())
    assert (error.status, error.retryable) == (None, False)
    assert "not JSON" in error.message
    assert error.request_id == "req_0001"


@pytest.mark.parametrize("wire", TEXT_ARGUMENT_WIRES, ids=lambda w: w.kind)
def test_malformed_tool_arguments(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(wire.sse("bad_arguments"))
    _, response = run(make())  # not an error: the turn answers the call (test_tool_malformed.py)
    (call,) = response.message.tool_calls
    assert (call.name, call.arguments) == ("get_weather", {})
    assert call.raw_arguments == '{"city": "Par'
    assert response.finish_reason == "tool_calls"


def test_anthropic_error_event(server: ProviderServer) -> None:
    server.reply(SSEReply(sse_events("anthropic", "error_event")))
    with AnthropicProvider("c", api_key=KEY, base_url=server.url, retry=FAST) as provider:
        error = fail(provider)
    assert (error.status, error.retryable) == (529, True)
    assert "Overloaded" in error.message


def test_openai_error_chunk(server: ProviderServer) -> None:
    server.reply(
        SSEReply([b'data: {"error": {"message": "model crashed", "type": "server_error"}}\n\n'])
    )
    with OpenAIProvider("m", api_key=KEY, base_url=server.url, retry=FAST) as provider:
        error = fail(provider)
    assert error.retryable is True
    assert "model crashed" in error.message


def test_read_timeout_waiting_for_headers_is_retried(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(StallReply(), StallReply())
    error = fail(make(timeout=(2.0, 0.2), max_retries=1))
    assert (error.status, error.retryable) == (None, True)
    assert "timed out" in error.message
    assert len(server.requests) == 2


def test_read_timeout_mid_stream(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(wire.sse("text", stall_after=wire.through_first_text()), wire.sse("text"))
    events: list[ModelEvent] = []
    with pytest.raises(ProviderError) as caught:
        events.extend(make(timeout=(2.0, 0.2)).stream(request(), AbortSignal()))
    assert (caught.value.status, caught.value.retryable) == (None, True)
    assert "timed out" in caught.value.message
    assert [e for e in events if isinstance(e, ModelTextDelta)]
    assert len(server.requests) == 1


# --- abort ---------------------------------------------------------------------------


def _abort_on(event: threading.Event, controller: AbortController) -> list[float]:
    """Abort when ``event`` is set; the returned list gets the abort time."""
    when: list[float] = []

    def go() -> None:
        if event.wait(10):
            when.append(time.perf_counter())
            controller.abort("test")

    threading.Thread(target=go, daemon=True).start()
    return when


#: seconds an aborted call may take to return: far below the 30 s read timeout or
#: Retry-After it would wait out without the abort, so a loaded machine never fails it
PROMPTLY = 5.0


def _aborted_within(
    provider: HttpProvider, controller: AbortController, when: list[float]
) -> float:
    events: list[ModelEvent] = []
    with pytest.raises(AbortedError):
        events.extend(provider.stream(request(), controller.signal))
    returned = time.perf_counter()
    assert when, "the abort never happened"
    assert not any(isinstance(e, ModelResponse) for e in events)
    return returned - when[0]


def test_abort_mid_stream_returns_promptly(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(wire.sse("text", stall_after=4))
    controller = AbortController()
    when = _abort_on(server.stalled, controller)
    assert _aborted_within(make(timeout=(5.0, 30.0)), controller, when) < PROMPTLY


def test_abort_while_waiting_for_headers_returns_promptly(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(StallReply())
    controller = AbortController()
    when = _abort_on(server.stalled, controller)
    assert _aborted_within(make(timeout=(5.0, 30.0)), controller, when) < PROMPTLY
    assert len(server.requests) == 1


def test_abort_during_retry_backoff_returns_promptly(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(wire.error(429, {"Retry-After": "30"}), wire.sse("text"))
    waiting = _LogEvent("retrying in")
    logger = logging.getLogger("lousho_sessions.providers")
    logger.addHandler(waiting)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        controller = AbortController()
        when = _abort_on(waiting.event, controller)
        assert _aborted_within(make(), controller, when) < PROMPTLY
    finally:
        logger.removeHandler(waiting)
        logger.setLevel(old_level)
    assert len(server.requests) == 1


def test_an_aborted_signal_sends_nothing(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    controller = AbortController()
    controller.abort()
    with pytest.raises(AbortedError):
        list(make().stream(request(), controller.signal))
    assert server.requests == []


def test_the_provider_works_after_an_abort(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(wire.sse("text", stall_after=2), wire.sse("text"))
    provider = make()
    controller = AbortController()
    when = _abort_on(server.stalled, controller)
    _aborted_within(provider, controller, when)
    _, response = run(provider)
    assert response.message.text.startswith("Hello")


# --- the key never leaks ---------------------------------------------------------------


def test_the_key_is_never_in_errors_reprs_or_logs(
    wire: Wire,
    server: ProviderServer,
    make: Callable[..., HttpProvider],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, urllib3's too
    provider = make()
    errors: list[ProviderError] = []
    # the 401 body echoes the key back, as a careless server might
    for reply in (
        [wire.error(401)],
        [wire.error(500)] * 3,
        [wire.sse("text", cut_after=2)],
        [wire.sse("malformed_json")],
    ):
        server.reply(*reply)
        errors.append(fail(provider))
    refused = make(base_url="http://127.0.0.1:1")
    errors.append(fail(refused))
    assert server.requests[0].headers  # the key did reach the server
    texts = [repr(provider), str(provider), repr(provider._http), repr(Secret(KEY))]
    for error in errors:
        texts += [str(error), repr(error), "".join(traceback.format_exception(error))]
        texts.append(repr(pickle.loads(pickle.dumps(error))))
    texts.append(caplog.text)
    assert "***" in str(errors[0])  # the echoed key was scrubbed, not dropped silently
    for text in texts:
        assert KEY not in text


_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=12,
)


@given(_JSON_VALUES)
def test_request_bodies_are_encoded_as_the_stdlib_encoder_writes_them(value: object) -> None:
    """``_http._dumps`` makes the C encoder itself (a call of ``json.JSONEncoder.encode``
    runs thirty lines of Python first): the same text for every JSON value."""
    from lousho_sessions.providers._http import _dumps

    assert _dumps(value) == json.JSONEncoder(ensure_ascii=False, allow_nan=False).encode(value)


def test_request_bodies_refuse_what_json_cannot_carry() -> None:
    from lousho_sessions.providers._http import _dumps

    looped: list[object] = []
    looped.append(looped)
    with pytest.raises(ValueError, match="Circular reference"):
        _dumps({"a": looped})
    for bad in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(ValueError, match="Out of range float"):
            _dumps([bad])
    with pytest.raises(TypeError, match="not JSON serializable"):
        _dumps({"a": object()})


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@given(_json_values, st.sampled_from(["", " ", "\n", " \t"]), st.sampled_from(["", " ", "x", "{}"]))
def test_an_event_is_decoded_as_json_loads_decodes_it(value: Any, before: str, after: str) -> None:
    """The events' decoder reads a lone value in one scanner call; space around it, more
    after it or no JSON at all get ``json.loads``'s answer or its error."""
    from lousho_sessions.providers._http_provider import _decode

    text = before + json.dumps(value) + after
    try:
        expected = json.loads(text)
    except ValueError:
        with pytest.raises(ValueError):
            _decode(text)
    else:
        assert _decode(text) == expected
