"""The ``Provider`` Protocol and what flows through it.

A provider turns a ``ModelRequest`` into an iterator of ``ModelEvent``: text,
reasoning and tool-call deltas as they arrive, then exactly one ``ModelResponse``
(the assistant message, its usage and why the model stopped). A non-streamed
call simply drains the iterator (:func:`complete`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar, Literal, Protocol, TypeVar, Union, runtime_checkable

import attrs

from ..abort import AbortSignal
from ..errors import ProviderError
from ..messages import NO_USAGE, Message, Usage

__all__ = [
    "ModelEvent",
    "ModelReasoningDelta",
    "ModelRequest",
    "ModelResponse",
    "ModelTextDelta",
    "ModelToolCallDelta",
    "OutputSchema",
    "Provider",
    "ProviderBase",
    "ToolSpec",
    "complete",
]

FinishReason = Literal["stop", "tool_calls", "length"]

_P = TypeVar("_P", bound="ProviderBase")


@attrs.frozen
class ToolSpec:
    """What the model is told about a tool: its name, description and JSON schema."""

    name: str
    description: str
    parameters: Mapping[str, Any] = attrs.field(
        factory=lambda: {"type": "object", "properties": {}}
    )


@attrs.frozen
class OutputSchema:
    """The shape a turn's final answer must have (``output_type=``), for the model.

    ``schema`` is the JSON schema of the JSON text the answer must be: always an
    object (a type that is not one is wrapped as ``{"value": ...}``). A provider with
    a native structured-output mode uses it (OpenAI ``response_format`` with
    ``strict`` when ``strict`` is true, Anthropic a forced ``name`` tool, Gemini
    ``responseSchema``) and returns the answer as the message's text. ``name`` fits
    ``^[A-Za-z0-9_-]{1,64}$``.
    """

    name: str
    schema: Mapping[str, Any]
    description: str = ""
    strict: bool = True


@attrs.frozen
class ModelRequest:
    """One model call: the system text, the whole conversation the model sees, the tools.

    ``output_schema``: the final answer must be JSON of that schema (``output_type=``);
    ``None`` for free text.
    ``session_id`` is the session the call is made for (``None`` outside one); it is
    not shown to the model — providers use it to route the call to a prompt cache.
    ``on_sent``: called (no arguments, on the calling thread) once the request has left,
    before the provider waits for the answer, by providers whose ``reports_sent`` is
    true; the turn saves its last tool result then, while the model works. It does not
    raise: it stops the call through the signal instead (the turn then raises why).
    """

    system: str | None
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    settings: Mapping[str, Any] = attrs.field(factory=dict)
    signal: AbortSignal = attrs.field(factory=AbortSignal, repr=False, eq=False)
    output_schema: OutputSchema | None = None
    session_id: str | None = attrs.field(default=None, kw_only=True)
    on_sent: Callable[[], None] | None = attrs.field(
        default=None, kw_only=True, repr=False, eq=False
    )


@attrs.frozen
class ModelTextDelta:
    """A piece of the assistant's text."""

    text: str
    type: Literal["text.delta"] = "text.delta"


@attrs.frozen
class ModelReasoningDelta:
    """A piece of the model's visible reasoning (the turn streams it as ``reasoning.delta``).

    The reasoning itself reaches the transcript as ``ReasoningPart`` s of the
    ``ModelResponse`` message; these deltas only show it as it arrives.
    """

    text: str
    type: Literal["reasoning.delta"] = "reasoning.delta"


@attrs.frozen
class ModelToolCallDelta:
    """A piece of a tool call: ``index`` orders calls; ``arguments`` is a JSON text fragment."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""
    type: Literal["tool_call.delta"] = "tool_call.delta"


@attrs.frozen
class ModelResponse:
    """The model's complete answer; the last event of every stream."""

    message: Message
    usage: Usage = NO_USAGE
    finish_reason: FinishReason = "stop"
    type: Literal["response"] = "response"
    #: the model that answered, as the provider names it (traces: ``gen_ai.response.model``)
    model: str | None = None


ModelEvent = Union[ModelTextDelta, ModelReasoningDelta, ModelToolCallDelta, ModelResponse]


@runtime_checkable
class Provider(Protocol):
    """A model. ``stream`` yields ``ModelEvent`` and ends with one ``ModelResponse``.

    It must stop promptly (raising or returning) once ``signal`` is aborted, and
    raise ``ProviderError`` for failures of the model service. ``close()``
    releases what the provider holds (connections); the agent that owns it
    calls it once, when it closes. :class:`ProviderBase` gives a no-op one.
    """

    name: str

    def stream(self, request: ModelRequest, signal: AbortSignal) -> Iterator[ModelEvent]: ...

    def close(self) -> None: ...


class ProviderBase:
    """A base for providers: a ``close()`` that does nothing, and use as a context manager.

    Subclasses set ``name`` and write ``stream``; a provider that holds
    something (a connection pool) overrides ``close``. One that calls
    ``ModelRequest.on_sent`` once its request has left sets ``reports_sent``.
    """

    name: str
    #: this provider calls ``request.on_sent`` once the request has left (else the turn
    #: saves what it owes before the call)
    reports_sent: ClassVar[bool] = False

    def stream(self, request: ModelRequest, signal: AbortSignal) -> Iterator[ModelEvent]:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the provider holds; nothing here."""

    def __enter__(self: _P) -> _P:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def complete(provider: Provider, request: ModelRequest) -> ModelResponse:
    """Drain ``provider.stream`` and return its ``ModelResponse``."""
    response: ModelResponse | None = None
    for event in provider.stream(request, request.signal):
        if isinstance(event, ModelResponse):
            response = event
    if response is None:
        raise ProviderError(None, f"provider {provider.name!r} ended its stream without a response")
    return response
