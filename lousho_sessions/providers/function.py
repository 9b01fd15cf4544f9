"""Scripted models: ``FunctionProvider`` (a function is the model) and ``ScriptedProvider``."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Union

from ..abort import AbortSignal
from ..errors import ProviderError
from ..messages import NO_USAGE, Message, TextPart
from .base import (
    ModelEvent,
    ModelReasoningDelta,
    ModelRequest,
    ModelResponse,
    ModelTextDelta,
    ProviderBase,
)

__all__ = ["FunctionProvider", "Reply", "ScriptedProvider"]

Reply = Union[str, Message]


class FunctionProvider(ProviderBase):
    """``fn(request) -> str | Message`` is the model.

    A ``str`` is the assistant's text; a ``Message`` may carry ``tool_calls``,
    ``usage`` and ``ReasoningPart`` s (streamed as one ``reasoning.delta`` first). ``fn`` may also return an iterable of ``str`` chunks (streamed as
    they come) ending, optionally, with a ``Message``. Raising makes the model
    call fail. ``request.signal`` tells ``fn`` when the turn was aborted.
    """

    def __init__(
        self, fn: Callable[[ModelRequest], Reply | Iterable[Reply]], *, name: str = "function"
    ) -> None:
        self.fn = fn
        self.name = name

    def stream(self, request: ModelRequest, signal: AbortSignal) -> Iterator[ModelEvent]:
        reply = self.fn(request)
        if isinstance(reply, (str, Message)):
            yield from _respond(reply)
            return
        if not isinstance(reply, Iterable):
            raise TypeError(
                f"FunctionProvider: fn returned {type(reply).__name__}; expected str or Message"
            )
        chunks: list[str] = []
        final: Message | None = None
        for item in reply:
            if signal.aborted:
                return
            if isinstance(item, Message):
                final = item
            else:
                chunks.append(item)
                yield ModelTextDelta(item)
        text = "".join(chunks)
        if final is None:
            final = Message.assistant(text)
        elif not final.text and text:  # the chunks are its text; its reasoning stays first
            content = [*final.content, TextPart(text)]
            final = Message.assistant(content, tool_calls=final.tool_calls, usage=final.usage)
        yield _response(final)

    def __repr__(self) -> str:
        return f"FunctionProvider({getattr(self.fn, '__name__', self.fn)!r})"


def _respond(reply: Reply) -> Iterator[ModelEvent]:
    message = Message.assistant(reply) if isinstance(reply, str) else reply
    if message.role != "assistant":
        raise TypeError(f"a model reply must be an assistant message, got role {message.role!r}")
    if message.reasoning:
        yield ModelReasoningDelta(message.reasoning)
    if message.text:
        yield ModelTextDelta(message.text)
    yield _response(message)


def _response(message: Message) -> ModelResponse:
    usage = message.usage or NO_USAGE
    return ModelResponse(message, usage, "tool_calls" if message.tool_calls else "stop")


class ScriptedProvider(FunctionProvider):
    """Replies from a list, one per model call; a further call fails."""

    def __init__(self, replies: Sequence[Reply], *, name: str = "scripted") -> None:
        self.replies = list(replies)
        self.calls: list[ModelRequest] = []
        self._lock = threading.Lock()
        super().__init__(self._next, name=name)

    def _next(self, request: ModelRequest) -> Reply:
        with self._lock:
            index = len(self.calls)
            self.calls.append(request)
        if index >= len(self.replies):
            raise ProviderError(
                None,
                f"ScriptedProvider has no reply left for call {index + 1} ({len(self.replies)} scripted)",
            )
        return self.replies[index]
