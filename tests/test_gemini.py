"""``GeminiProvider`` on the wire: decoding the documented stream shapes, the request body
(checked against the ``google-genai`` types), signatures in place, errors, retries, keys."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from gemini_rules import (
    CORRUPTED_SIGNATURE,
    SKIP,
    Call,
    GeminiRules,
    Think,
    check_request,
)
from provider_server import JSONReply, ProviderServer, SSEReply, sse_events

from lousho_sessions import ImagePart, Message, ReasoningPart, TextPart, ToolCall
from lousho_sessions.errors import ProviderError
from lousho_sessions.providers import GeminiProvider, RetryPolicy
from lousho_sessions.providers._gemini_schema import openapi_schema
from lousho_sessions.providers.base import (
    ModelReasoningDelta,
    ModelRequest,
    ModelResponse,
    ModelTextDelta,
    ModelToolCallDelta,
    OutputSchema,
    ToolSpec,
)
from lousho_sessions.providers.gemini import thinking_config
from lousho_sessions.providers.registry import provider_for

KEY = "AIzaSy-test-0c7f-SECRET-b3e9"
FAST = RetryPolicy(max_retries=2, initial_delay=0.001, max_delay=0.002, jitter=0.0)
MODEL = "gemini-3-pro-preview"
WEATHER = ToolSpec(
    "get_weather",
    "The weather in a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer() as running:
        yield running
        for recorded in running.requests:
            check_request(recorded.body)  # every body sent validates against google-genai


@pytest.fixture
def make(server: ProviderServer) -> Iterator[Any]:
    made: list[GeminiProvider] = []

    def factory(model: str = MODEL, **options: Any) -> GeminiProvider:
        kwargs: dict[str, Any] = {"api_key": KEY, "base_url": server.url, "retry": FAST}
        kwargs.update(options)
        provider = GeminiProvider(model, **kwargs)
        made.append(provider)
        return provider

    yield factory
    for provider in made:
        provider.close()


def gemini(name: str) -> SSEReply:
    return SSEReply(sse_events("gemini", name))


def run(provider: GeminiProvider, request: ModelRequest) -> tuple[list[Any], ModelResponse]:
    events = list(provider.stream(request, request.signal))
    assert isinstance(events[-1], ModelResponse)
    return events[:-1], events[-1]


def ask(*messages: Message, **options: Any) -> ModelRequest:
    return ModelRequest(
        system="You are terse.", messages=messages or (Message.user("Hi, I am Ali."),), **options
    )


# --- decoding the documented stream shapes ---------------------------------------------


def test_text_streams_and_the_trailing_signature_stays_on_its_empty_part(
    server: ProviderServer, make: Any
) -> None:
    server.reply(gemini("text"))
    events, response = run(make(), ask())
    assert [e.text for e in events if isinstance(e, ModelTextDelta)] == [
        "Hello",
        ", Ali! ☀️",
        " How can I help?",
    ]
    message = response.message
    assert message.text == "Hello, Ali! ☀️ How can I help?"
    [text, signed] = message.content
    assert text == TextPart("Hello, Ali! ☀️ How can I help?")
    assert isinstance(signed, ReasoningPart) and signed.provider == "gemini"
    assert (signed.text, signed.extra) == ("", {"thought": False})
    assert signed.signature and signed.signature.startswith("CiQB")
    assert response.finish_reason == "stop" and response.model == "gemini-2.5-flash"
    usage = response.usage
    assert (usage.input_tokens, usage.cache_read_tokens) == (1200, 1024)  # cached inside prompt
    assert (usage.output_tokens, usage.reasoning_tokens) == (300, 40)  # thoughts are output
    [sent] = server.requests
    assert sent.path == f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"
    assert sent.headers["x-goog-api-key"] == KEY


def test_thoughts_stream_as_reasoning_and_only_the_first_parallel_call_is_signed(
    server: ProviderServer, make: Any
) -> None:
    server.reply(gemini("thinking_tool_call"))
    events, response = run(make(), ask(tools=(WEATHER,), settings={"thinking": True}))
    reasoning = [e.text for e in events if isinstance(e, ModelReasoningDelta)]
    assert (
        "".join(reasoning) == "**Checking the weather**\n\nThe user wants Paris and the time there."
    )
    deltas = [e for e in events if isinstance(e, ModelToolCallDelta)]
    assert [(d.index, d.name) for d in deltas] == [(0, "get_weather"), (1, "get_time")]
    message = response.message
    [thought] = message.content
    assert isinstance(thought, ReasoningPart) and thought.signature is None
    first, second = message.tool_calls
    assert (first.name, dict(first.arguments)) == ("get_weather", {"city": "Paris"})
    assert first.extra["thought_signature"].startswith("CikB")
    assert "thought_signature" not in second.extra
    assert response.finish_reason == "tool_calls"
    assert (response.usage.output_tokens, response.usage.reasoning_tokens) == (160, 120)
    body = server.requests[0].body
    assert body["generationConfig"]["thinkingConfig"] == {"includeThoughts": True}
    declaration = body["tools"][0]["functionDeclarations"][0]
    assert declaration["parameters"] == {
        "type": "OBJECT",
        "properties": {"city": {"type": "STRING"}},
        "propertyOrdering": ["city"],
        "required": ["city"],
    }


def test_signatures_on_thought_and_text_parts_go_back_on_those_parts(
    server: ProviderServer, make: Any
) -> None:
    server.reply(gemini("signed_text"), gemini("text"))
    provider = make()
    _, response = run(provider, ask())
    thought, signed, rest = response.message.content
    assert isinstance(thought, ReasoningPart) and thought.signature
    assert isinstance(signed, TextPart) and signed.text == "Paris is "
    assert signed.extra["thought_signature"]
    assert rest == TextPart("lovely.")
    run(provider, ask(Message.user("Hi"), response.message, Message.user("More?")))
    model_turn = server.requests[1].body["contents"][1]
    assert model_turn == {
        "role": "model",
        "parts": [
            {"text": "Thinking about it", "thought": True, "thoughtSignature": thought.signature},
            {"text": "Paris is ", "thoughtSignature": signed.extra["thought_signature"]},
            {"text": "lovely."},
        ],
    }


def test_a_stream_without_a_finish_reason_is_incomplete_and_retryable(
    server: ProviderServer, make: Any
) -> None:
    events = sse_events("gemini", "text")[:-1]
    server.reply(SSEReply(events), SSEReply(events), SSEReply(events))
    with pytest.raises(ProviderError, match="incomplete") as caught:
        run(make(), ask())
    assert caught.value.retryable


@pytest.mark.parametrize(
    ("fixture", "match", "retryable"),
    [
        ("safety", r"withheld \(SAFETY\)", False),
        ("malformed_call", "MALFORMED_FUNCTION_CALL: Malformed function call", True),
        ("error_event", r"overloaded.*\(UNAVAILABLE\)", True),
    ],
)
def test_what_the_stream_says_went_wrong_is_a_provider_error(
    server: ProviderServer, make: Any, fixture: str, match: str, retryable: bool
) -> None:
    server.reply(gemini(fixture))
    with pytest.raises(ProviderError, match=match) as caught:
        run(make(), ask())
    assert caught.value.retryable is retryable


def test_a_blocked_prompt_is_a_provider_error(server: ProviderServer, make: Any) -> None:
    chunk = {"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}, "usageMetadata": {}}
    server.reply(SSEReply([f"data: {json.dumps(chunk)}\n\n".encode()]))
    with pytest.raises(ProviderError, match=r"prompt was blocked \(PROHIBITED_CONTENT\)"):
        run(make(), ask())


def test_crlf_and_gzip_streams_decode_the_same(server: ProviderServer, make: Any) -> None:
    server.reply(SSEReply(sse_events("gemini", "text"), crlf=True, gzip=True))
    _, response = run(make(), ask())
    assert response.message.text == "Hello, Ali! ☀️ How can I help?"


# --- errors, retries, redaction ----------------------------------------------------------


def test_429_is_retried_after_the_retry_info_delay(server: ProviderServer, make: Any) -> None:
    server.reply(JSONReply.fixture("gemini", "error_429", 429), gemini("text"))
    _, response = run(make(), ask())
    assert response.message.text.startswith("Hello")
    assert len(server.requests) == 2


def test_429_retry_info_is_on_the_error(server: ProviderServer, make: Any) -> None:
    server.reply(JSONReply.fixture("gemini", "error_429", 429))
    with pytest.raises(
        ProviderError, match=r"exceeded your current quota.*\(RESOURCE_EXHAUSTED\)"
    ) as caught:
        run(make(retry=RetryPolicy(max_retries=0)), ask())
    assert (caught.value.status, caught.value.retry_after) == (429, 0.01)


@pytest.mark.parametrize(("status", "tries"), [(500, 3), (503, 3), (403, 1), (400, 1)])
def test_server_errors_are_retried_and_client_errors_are_not(
    server: ProviderServer, make: Any, status: int, tries: int
) -> None:
    reply = JSONReply.fixture("gemini", f"error_{status}", status)
    server.reply(reply, reply, reply)
    with pytest.raises(ProviderError) as caught:
        run(make(), ask())
    assert caught.value.status == status and len(server.requests) == tries


def test_the_key_is_scrubbed_from_an_error_that_echoes_it(
    server: ProviderServer, make: Any
) -> None:
    server.reply(JSONReply.fixture("gemini", "error_400", 400))
    with pytest.raises(ProviderError) as caught:
        run(make(), ask())
    assert KEY not in str(caught.value) and "API key not valid" in str(caught.value)
    assert "(INVALID_ARGUMENT)" in str(caught.value)


# --- the request body --------------------------------------------------------------------


def test_the_body_says_everything_in_the_api_s_terms(server: ProviderServer, make: Any) -> None:
    server.reply(gemini("text"))
    png = b"\x89PNG\r\n\x1a\n" + bytes(20)
    call = ToolCall("c1", "get_weather", {"city": "Paris"})
    messages = (
        Message.system("Answer in French."),
        Message.user([TextPart("What is this?"), ImagePart(data=png)]),
        Message.user([ImagePart(url="https://example.com/cat.JPG")]),
        Message.assistant("Let me look.", tool_calls=[call]),
        Message.tool("c1", "18°C", is_error=False),
        Message.user("And Rome?"),
    )
    settings = {"temperature": 0.2, "max_tokens": 100, "stop": "END", "tool_choice": "required"}
    run(make(), ask(*messages, tools=(WEATHER,), settings=settings))
    body = server.requests[0].body
    assert body["systemInstruction"] == {"parts": [{"text": "You are terse.\n\nAnswer in French."}]}
    assert body["contents"][0]["parts"][1] == {
        "inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgoAAAAAAAAAAAAAAAAAAAAAAAAAAA=="}
    }
    assert body["contents"][0]["parts"][2] == {
        "fileData": {"mimeType": "image/jpeg", "fileUri": "https://example.com/cat.JPG"}
    }
    model_turn = body["contents"][1]
    assert model_turn["parts"][1] == {  # a past turn: its calls are not checked
        "functionCall": {"name": "get_weather", "args": {"city": "Paris"}, "id": "c1"}
    }
    assert body["contents"][2] == {
        "role": "user",
        "parts": [
            {
                "functionResponse": {
                    "name": "get_weather",
                    "response": {"output": "18°C"},
                    "id": "c1",
                }
            },
            {"text": "And Rome?"},
        ],
    }
    assert body["generationConfig"] == {
        "temperature": 0.2,
        "maxOutputTokens": 100,
        "stopSequences": ["END"],
    }
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "ANY"}}


def test_an_unsigned_call_of_the_current_turn_gets_the_placeholder(
    server: ProviderServer, make: Any
) -> None:
    server.reply(gemini("text"))
    call = ToolCall("c1", "get_weather", {"city": "Paris"})  # made by another family
    history = (Message.user("Hi"), Message.assistant(tool_calls=[call]), Message.tool("c1", "x"))
    run(make(), ask(*history))
    assert server.requests[0].body["contents"][1]["parts"] == [
        {
            "functionCall": {"name": "get_weather", "args": {"city": "Paris"}, "id": "c1"},
            "thoughtSignature": SKIP,
        }
    ]


def test_older_models_get_no_placeholder_and_the_version_in_the_base_url_is_kept(
    server: ProviderServer, make: Any
) -> None:
    server.reply(gemini("text"))
    call = ToolCall("c1", "get_weather", {"city": "Paris"})
    provider = make("models/gemini-2.5-flash", base_url=server.url + "/v1beta")
    run(
        provider,
        ask(Message.user("Hi"), Message.assistant(tool_calls=[call]), Message.tool("c1", "x")),
    )
    sent = server.requests[0]
    assert sent.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert "thoughtSignature" not in sent.body["contents"][1]["parts"][0]


def test_reasoning_of_another_family_is_left_out(server: ProviderServer, make: Any) -> None:
    server.reply(gemini("text"))
    other = Message.assistant([ReasoningPart("hmm", "anthropic", signature="sig"), TextPart("Hi")])
    run(make(), ask(Message.user("Hi"), other, Message.user("Again")))
    assert server.requests[0].body["contents"][1] == {"role": "model", "parts": [{"text": "Hi"}]}


def test_a_structured_answer_uses_the_native_json_mode(server: ProviderServer, make: Any) -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "Who"},
            "age": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "when": {"type": "string", "format": "date"},
            "kind": {"enum": ["a", "b"]},
        },
        "required": ["name"],
        "additionalProperties": False,
    }
    free = {
        "type": "object",
        "properties": {"tags": {"type": "object", "additionalProperties": {"type": "integer"}}},
    }
    server.reply(gemini("text"), gemini("text"))
    provider = make()
    run(provider, ask(output_schema=OutputSchema("Person", schema)))
    run(provider, ask(output_schema=OutputSchema("Tags", free)))
    first, second = (r.body["generationConfig"] for r in server.requests)
    assert first["responseMimeType"] == "application/json"
    assert first["responseSchema"] == {
        "type": "OBJECT",
        "properties": {
            "name": {"type": "STRING", "description": "Who"},
            "age": {"type": "INTEGER", "nullable": True},
            "when": {"type": "STRING", "description": "(format: date)"},
            "kind": {"type": "STRING", "enum": ["a", "b"], "format": "enum"},
        },
        "propertyOrdering": ["name", "age", "when", "kind"],
        "required": ["name"],
    }
    assert second == {"responseMimeType": "application/json", "responseJsonSchema": free}


def test_schemas_the_subset_cannot_say_are_sent_whole() -> None:
    assert openapi_schema({"type": "array", "prefixItems": [{"type": "integer"}]}) is None
    assert openapi_schema({"enum": [1, 2]}) is None
    assert openapi_schema({"type": "object", "additionalProperties": {"type": "string"}}) is None
    assert openapi_schema({"type": ["string", "null"], "minLength": 1}) == {
        "type": "STRING",
        "nullable": True,
        "minLength": 1,
    }


@pytest.mark.parametrize(
    ("given", "sent"),
    [
        (True, {"includeThoughts": True}),
        (False, {"thinkingBudget": 0}),
        (
            {"type": "enabled", "budget_tokens": 2048},
            {"includeThoughts": True, "thinkingBudget": 2048},
        ),
        ({"type": "disabled"}, {"thinkingBudget": 0}),
        (
            {"thinkingLevel": "low", "includeThoughts": False},
            {"includeThoughts": False, "thinkingLevel": "low"},
        ),
        ({"level": "high"}, {"thinkingLevel": "high", "includeThoughts": True}),
    ],
)
def test_thinking_settings(given: Any, sent: dict[str, Any]) -> None:
    assert thinking_config(given) == sent
    check_request(
        {
            "contents": [{"role": "user", "parts": [{"text": "x"}]}],
            "generationConfig": {"thinkingConfig": sent},
        }
    )


# --- the rules the enforcing server applies ------------------------------------------------


@pytest.fixture
def rules_server() -> Iterator[tuple[GeminiRules, ProviderServer]]:
    rules = GeminiRules()
    with ProviderServer(rules=rules) as running:
        yield rules, running
    assert rules.invalid == []


def test_the_server_refuses_a_dropped_or_altered_signature(
    rules_server: tuple[GeminiRules, ProviderServer],
) -> None:
    rules, server = rules_server
    rules.reply(Think("Weather."), Call("get_weather", {"city": "Paris"}))
    provider = GeminiProvider(MODEL, api_key=KEY, base_url=server.url, retry=FAST)
    with provider:
        _, response = run(provider, ask(tools=(WEATHER,)))
        [call] = response.message.tool_calls
        result = Message.tool(call.id, "18°C")
        dropped = attrs_evolve_call(response.message, {})
        altered = attrs_evolve_call(
            response.message, {"thought_signature": "AAAA" + call.extra["thought_signature"][4:]}
        )
        # the placeholder does not pass for a call the model signed
        with pytest.raises(ProviderError, match=CORRUPTED_SIGNATURE):
            run(provider, ask(Message.user("Hi, I am Ali."), dropped, result, tools=(WEATHER,)))
    # a provider that sends no placeholder (older models) is told the signature is missing
    with GeminiProvider("gemini-2.5-pro", api_key=KEY, base_url=server.url, retry=FAST) as older:
        with pytest.raises(ProviderError, match="missing a thought_signature") as caught:
            run(older, ask(Message.user("Hi, I am Ali."), dropped, result, tools=(WEATHER,)))
        assert caught.value.status == 400 and "position 2" in caught.value.message
        assert "get_weather" in caught.value.message
    with provider, pytest.raises(ProviderError, match=CORRUPTED_SIGNATURE):
        run(provider, ask(Message.user("Hi, I am Ali."), altered, result, tools=(WEATHER,)))


def attrs_evolve_call(message: Message, extra: dict[str, Any]) -> Message:
    import attrs

    calls = [attrs.evolve(c, extra=extra) for c in message.tool_calls]
    return attrs.evolve(message, tool_calls=tuple(calls))


# --- keys and the registry -------------------------------------------------------------------


def test_keys_come_from_gemini_or_google_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GEMINI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    provider = provider_for("gemini/gemini-2.5-flash")
    assert isinstance(provider, GeminiProvider) and provider.needs_key
    assert provider.base_url == "https://generativelanguage.googleapis.com"
    assert provider.name == "gemini/gemini-2.5-flash"
    monkeypatch.setenv("GEMINI_API_KEY", "from-gemini")
    assert GeminiProvider("m")._http._headers["x-goog-api-key"] == "from-gemini"
    monkeypatch.setenv("GOOGLE_API_KEY", "from-google")  # wins, as in Google's SDK
    assert GeminiProvider("m")._http._headers["x-goog-api-key"] == "from-google"
    with pytest.raises(ValueError, match="GEMINI_API_KEY"):
        monkeypatch.delenv("GEMINI_API_KEY")
        monkeypatch.delenv("GOOGLE_API_KEY")
        provider_for("gemini/gemini-2.5-flash", check_key=True)


def test_a_bare_gemini_name_suggests_the_prefix() -> None:
    with pytest.raises(ValueError, match=r"did you mean 'gemini/gemini-2\.5-pro'"):
        provider_for("gemini-2.5-pro")
