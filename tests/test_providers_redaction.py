"""The API key never leaves a provider: every path it leaked by, through a real local server.

Each case makes the server put the key where a careless or hostile server
might (an in-stream error event, non-JSON event data, tool arguments, at the
edge of a truncated excerpt) and checks the whole error (message, ``args``,
attributes, the ``__cause__``/``__context__`` chain, traceback, pickle) and
every log line for the key and for any 8-character piece of it.
"""

from __future__ import annotations

import json
import logging
import pickle
import traceback
from collections.abc import Callable
from typing import Any

import pytest
from provider_server import JSONReply, ProviderServer, SSEReply
from provider_wires import KEY, TEXT_ARGUMENT_WIRES, HttpProvider, Wire, fail, run

from lousho_sessions import create_agent, tool
from lousho_sessions.engine._turn import MAX_MALFORMED_TOOL_CALLS
from lousho_sessions.errors import ProviderConfigError, ProviderError
from lousho_sessions.providers._redact import Redactor, Secret, secret_from
from lousho_sessions.serde import messages_to_json


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def _texts(error: BaseException) -> list[str]:
    """Every way an error can be shown, logged or stored, along its whole chain."""
    texts = ["".join(traceback.format_exception(error))]
    if isinstance(error, ProviderError):
        texts.append(repr(pickle.loads(pickle.dumps(error))))
    seen: set[int] = set()
    todo: list[BaseException] = [error]
    while todo:
        exc = todo.pop()
        if id(exc) in seen:
            continue
        seen.add(id(exc))
        texts += [str(exc), repr(exc), repr(exc.args), repr(getattr(exc, "__dict__", {}))]
        if isinstance(exc, UnicodeError):
            texts.append(repr(getattr(exc, "object", "")))
        todo += [e for e in (exc.__cause__, exc.__context__) if e is not None]
        todo += [a for a in exc.args if isinstance(a, BaseException)]
    return texts


def assert_no_key(*texts: str, key: str = KEY) -> None:
    pieces = {key[i : i + 8] for i in range(len(key) - 7)}
    for text in texts:
        assert key not in text
        leaked = [piece for piece in pieces if piece in text]
        assert not leaked, f"key fragments {leaked} in {text[:300]!r}"


def _leaks_nothing(error: ProviderError, caplog: pytest.LogCaptureFixture) -> None:
    assert "***" in error.message  # scrubbed, not silently dropped
    assert_no_key(*_texts(error), caplog.text)


def _data(*events: dict[str, Any]) -> list[bytes]:
    return [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events]


def _error_event(wire: Wire, message: str) -> bytes:
    if wire.kind == "anthropic":
        body = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
        return b"event: error\ndata: " + json.dumps(body).encode() + b"\n\n"
    if wire.kind == "responses":
        event = {"type": "error", "code": "invalid_api_key", "message": message, "param": None}
        return b"event: error\ndata: " + json.dumps(event).encode() + b"\n\n"
    if wire.kind == "gemini":
        (block,) = _data({"error": {"code": 401, "message": message, "status": "UNAUTHENTICATED"}})
        return block
    (block,) = _data({"error": {"message": message, "type": "invalid_request_error"}})
    return block


def _bad_arguments(wire: Wire, text: str) -> list[bytes]:
    """A reply calling ``get_weather`` with ``text`` as its arguments (not JSON)."""
    if wire.kind == "anthropic":
        return _data(
            {"type": "message_start", "message": {"usage": {"input_tokens": 1}}},
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get_weather"},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": text},
            },
            {"type": "message_delta", "delta": {"stop_reason": "tool_use"}},
            {"type": "message_stop"},
        )
    if wire.kind == "responses":
        item = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather"}
        return _data(
            {"type": "response.output_item.added", "output_index": 0, "item": item},
            {"type": "response.function_call_arguments.delta", "output_index": 0, "delta": text},
            {
                "type": "response.output_item.done",
                "output_index": 0,
                "item": {**item, "arguments": text},
            },
            {"type": "response.completed", "response": {"id": "resp_1", "status": "completed"}},
        )
    function = {"name": "get_weather", "arguments": text}
    chunk = {
        "choices": [
            {
                "index": 0,
                "delta": {"tool_calls": [{"index": 0, "id": "call_1", "function": function}]},
                "finish_reason": None,
            }
        ]
    }
    done = {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}
    return [*_data(chunk, done), b"data: [DONE]\n\n"]


@pytest.fixture
def debug_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)  # every logger, urllib3's too
    return caplog


def test_an_error_event_inside_the_stream(
    wire: Wire,
    server: ProviderServer,
    make: Callable[..., HttpProvider],
    debug_logs: pytest.LogCaptureFixture,
) -> None:
    server.reply(SSEReply([_error_event(wire, f"Incorrect API key provided: {KEY}.")]))
    error = fail(make())
    assert "Incorrect API key provided: ***." in error.message
    _leaks_nothing(error, debug_logs)


def test_event_data_that_is_not_json(
    wire: Wire,
    server: ProviderServer,
    make: Callable[..., HttpProvider],
    debug_logs: pytest.LogCaptureFixture,
) -> None:
    server.reply(SSEReply([f"data: key={KEY} and more\n\n".encode()]))
    error = fail(make())
    assert "not JSON" in error.message
    assert isinstance(error.__cause__, json.JSONDecodeError)
    _leaks_nothing(error, debug_logs)


def test_a_key_cut_by_the_excerpt_is_still_masked(
    wire: Wire,
    server: ProviderServer,
    make: Callable[..., HttpProvider],
    debug_logs: pytest.LogCaptureFixture,
) -> None:
    # the message shows the first 200 characters: the key straddles the cut
    data = "x" * 185 + KEY
    server.reply(SSEReply([f"data: {data}\n\n".encode()]))
    error = fail(make())
    assert "not JSON" in error.message
    _leaks_nothing(error, debug_logs)


@pytest.mark.parametrize("wire", TEXT_ARGUMENT_WIRES, ids=lambda w: w.kind)
def test_tool_arguments_that_are_not_json(
    wire: Wire,
    server: ProviderServer,
    make: Callable[..., HttpProvider],
    debug_logs: pytest.LogCaptureFixture,
) -> None:
    """The text is kept for the model to see, scrubbed: in the transcript, the error
    result, the events, the next request and the error at the malformed-call limit."""
    texts = [
        _bad_arguments(wire, '{"city": "' + KEY),
        _bad_arguments(wire, '{"city": ' + repr(KEY) + "}"),  # the key in another spelling
    ]
    server.reply(
        SSEReply(texts[0]),
        SSEReply(texts[1]),
        wire.sse("text"),
        *[SSEReply(texts[0])] * (MAX_MALFORMED_TOOL_CALLS + 1),
    )
    agent = create_agent(provider=make(), tools=[get_weather])
    session = agent.session("s-1")
    events = list(session.stream("Weather?"))
    with pytest.raises(ProviderError) as caught:
        session.send("Again?")
    agent.close()
    calls = [c for m in session.messages for c in m.tool_calls]
    assert [c.raw_arguments for c in calls] == ['{"city": "***', "{\"city\": '***'}"]
    assert "get_weather" in caught.value.message and "not valid JSON" in caught.value.message
    assert "***" in caught.value.message
    assert_no_key(
        *_texts(caught.value),
        debug_logs.text,
        messages_to_json(session.messages),
        *(repr(e) for e in events),
        *(json.dumps(r.body) for r in server.requests),
    )


def test_an_http_error_body_echoing_the_key(
    wire: Wire,
    server: ProviderServer,
    make: Callable[..., HttpProvider],
    debug_logs: pytest.LogCaptureFixture,
) -> None:
    server.reply(*[JSONReply(500, '{"error": {"message": "bad key {api_key}"}}')] * 3)
    error = fail(make())
    assert error.status == 500
    _leaks_nothing(error, debug_logs)


def test_a_key_with_a_trailing_newline_is_stripped(
    wire: Wire,
    server: ProviderServer,
    make: Callable[..., HttpProvider],
    debug_logs: pytest.LogCaptureFixture,
) -> None:
    server.reply(wire.sse("text"), wire.error(401))
    provider = make(api_key=f"  {KEY}\n")
    run(provider)
    sent = server.requests[0].headers
    assert KEY in (
        sent.get("x-api-key", ""),
        sent.get("x-goog-api-key", ""),
        sent.get("authorization", "").removeprefix("Bearer "),
    )
    error = fail(provider)  # the 401 body echoes the key it got
    assert error.status == 401
    _leaks_nothing(error, debug_logs)


@pytest.mark.parametrize(
    "bad",
    [KEY[:10] + "\u2019" + KEY[10:], KEY[:10] + "\x00" + KEY[10:], KEY[:10] + "\n" + KEY[10:]],
    ids=["non-latin-1", "nul", "inner-newline"],
)
def test_a_key_http_cannot_carry_is_refused_without_showing_it(
    bad: str,
    wire: Wire,
    server: ProviderServer,
    make: Callable[..., HttpProvider],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ProviderConfigError) as caught:
        make(api_key=bad)
    assert isinstance(caught.value, ValueError)
    assert "position 10" in caught.value.message
    assert_no_key(*_texts(caught.value), key=bad)
    assert_no_key(*_texts(caught.value))
    if "\x00" not in bad:  # an environment cannot hold NUL
        variable = wire.key_env
        monkeypatch.setenv(variable, bad)
        with pytest.raises(ProviderConfigError, match=f"\\${variable}"):
            make(api_key=None)
    assert server.requests == []


def test_a_header_http_cannot_carry_is_refused_by_name(
    make: Callable[..., HttpProvider],
) -> None:
    with pytest.raises(ProviderConfigError, match="'x-team'") as caught:
        make(headers={"x-team": "caf\u00e9 \u2603"})
    assert "\u2603" not in str(caught.value)


def test_the_redactor_scrubs_a_whole_chain_in_place() -> None:
    redactor = Redactor(Secret(KEY))
    try:
        try:
            try:
                f"Bearer {KEY}\u2019".encode("latin-1")
            except UnicodeEncodeError as exc:
                exc.__notes__ = [f"while sending {KEY}"]  # type: ignore[attr-defined]  # add_note(): 3.11+
                raise OSError(5, f"socket said {KEY!r}") from exc
        except OSError as exc:
            raise ProviderError(401, f"bad key {KEY[:12]}", request_id=KEY) from exc
    except ProviderError as exc:
        error = exc
    redactor.exception(error)
    assert_no_key(*_texts(error))
    cause = error.__cause__
    assert isinstance(cause, OSError) and cause.errno == 5
    unicode_error = cause.__cause__
    assert isinstance(unicode_error, UnicodeEncodeError)
    assert str(unicode_error).startswith("'latin-1' codec can't encode character '\\u2019'")


def test_escaped_spellings_of_the_key_are_masked() -> None:
    key = 'sk-"quoted"/\\slash-\u00e9t\u00e9-0123456789'
    redactor = Redactor(secret_from(key, "api_key"))
    for spelling in (key, repr(key), json.dumps(key), json.dumps(key, ensure_ascii=False)):
        assert_no_key(redactor.text(f"the header was {spelling}."), key=key)
    assert redactor.text("nothing secret here") == "nothing secret here"
    assert Redactor(None).text(f"no key: {KEY}") == f"no key: {KEY}"
