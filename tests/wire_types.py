"""Request bodies checked against the vendors' own published request types.

:func:`request_problem` says what is wrong with a body sent to any of our wires
(Anthropic Messages, OpenAI Chat Completions and Responses, Gemini), by its path; the
loopback servers record it and fail the test that sent it.

The ``anthropic`` package (a test-only dependency, the ``dev`` extra) publishes the
Messages API's request as ``TypedDict`` s; pydantic's ``TypeAdapter`` validates a body
against them. Two things are made stricter than a plain ``validate_python``: a key the
types do not name is an error (``extra="forbid"``: a misspelt field would otherwise
pass; the TypedDicts inside a union, and the response models the params accept too,
ignore extras, so the validated value is compared with the body), and every
``Iterable`` field is read to its end (pydantic validates those lazily, so a wrong
block inside ``content`` would otherwise pass).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any

from anthropic.types.message_create_params import MessageCreateParamsStreaming
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

__all__ = ["UNTYPED_SETTINGS", "anthropic_request_problem", "prepare", "request_problem"]

#: Sampling settings the provider forwards from ``settings=`` as the user gave them, which
#: the SDK's 2.x request types no longer list (newer models take none): the user's choice,
#: left out of the check. Everything the provider builds itself is checked.
UNTYPED_SETTINGS = frozenset({"temperature", "top_p", "top_k"})


@cache
def _anthropic() -> TypeAdapter[Any]:
    # the config reaches the TypedDicts through a container (not allowed on them directly)
    return TypeAdapter(tuple[MessageCreateParamsStreaming], config=ConfigDict(extra="forbid"))


def anthropic_request_problem(body: Any) -> str | None:
    """What is wrong with ``body`` as a streamed Messages API request; ``None`` if nothing."""
    if isinstance(body, Mapping):
        body = {k: v for k, v in body.items() if k not in UNTYPED_SETTINGS}
    try:
        (checked,) = _plain(_anthropic().validate_python((body,)))
    except ValidationError as exc:
        return str(exc)
    return _unknown_keys(body, checked, "body")


def _plain(value: Any) -> Any:
    """``value`` with the lazy iterators pydantic leaves in place of ``Iterable`` fields read
    (which validates them) and every mapping a dict, every sequence a list."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, BaseModel):  # a response type the params accept too: its fields only
        fields = type(value).model_fields
        return {k: _plain(getattr(value, k)) for k in value.model_fields_set if k in fields}
    if isinstance(value, (list, tuple, Iterator)):
        return [_plain(v) for v in value]
    return value


def _unknown_keys(sent: Any, checked: Any, path: str) -> str | None:
    """A key of ``sent`` that validation dropped (TypedDicts inside a union ignore extras)."""
    if isinstance(sent, Mapping) and isinstance(checked, Mapping):
        for key, value in sent.items():
            if key not in checked:
                return f"{path}.{key}: not a field of the published request type"
            problem = _unknown_keys(value, checked[key], f"{path}.{key}")
            if problem:
                return problem
    elif isinstance(sent, (list, tuple)) and isinstance(checked, list):
        for n, (a, b) in enumerate(zip(sent, checked, strict=False)):
            problem = _unknown_keys(a, b, f"{path}[{n}]")
            if problem:
                return problem
    return None


def request_problem(path: str, body: Any) -> str | None:
    """What is wrong with ``body`` as a request to ``path`` by the vendor's published
    types; ``None`` if nothing is, or if ``path`` is none of our wires."""
    route = path.split("?", 1)[0]
    if route.endswith("/messages"):
        return anthropic_request_problem(body)
    # the checks for the other wires live beside their loopback servers, which import
    # this module: imported here, when first needed
    check: Any
    if route.endswith("/chat/completions"):
        from responses_server import check_chat_request as check
    elif route.endswith("/responses"):
        from responses_server import check_request as check
    elif ":streamGenerateContent" in route or ":generateContent" in route:
        from gemini_rules import check_request as check
    else:
        return None
    try:
        check(body)
    except Exception as exc:  # pydantic's ValidationError, or ValueError naming the field
        return str(exc)
    return None


@cache
def prepare() -> None:
    """Import every wire's types and build their validators now, once per process: the first
    check of a wire otherwise does it while the client waits for its reply (Gemini's and
    Chat Completions' take over a second on a loaded machine: past the tests' 2 s read
    timeout, the client retries and the scripted reply is gone)."""
    _anthropic()
    for path in ("/v1/chat/completions", "/v1/responses", "/v1beta/models/m:generateContent"):
        with contextlib.suppress(Exception):
            request_problem(path, {})
