"""Model doubles and small helpers shared by the tests (no test doubles of our own code)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

from lousho_sessions import FunctionProvider, Message, ModelRequest, ToolCall, Usage

WAIT = 10.0  # seconds any Event wait may take before a test fails


def echo(request: ModelRequest) -> str:
    """Replies with the number of messages it saw and the last user text."""
    return f"{len(request.messages)}:{request.messages[-1].text}"


def echo_provider() -> FunctionProvider:
    return FunctionProvider(echo)


def calls(*calls: tuple[str, dict[str, object]], text: str = "") -> Message:
    """An assistant message asking for tool calls."""
    return Message.assistant(
        text,
        tool_calls=[ToolCall(f"c{i}", name, dict(args)) for i, (name, args) in enumerate(calls)],
    )


class Gate:
    """Blocks a model call until opened (or the call is aborted); tells when a call is waiting."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self._cond = threading.Condition()
        self._open = False

    def open(self) -> None:
        with self._cond:
            self._open = True
            self._cond.notify_all()

    def _poke(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def wait_in(self, request: ModelRequest) -> bool:
        """Block until opened (True) or the request is aborted (False)."""
        request.signal.add_callback(lambda s: self._poke())
        self.entered.set()
        with self._cond:
            self._cond.wait_for(lambda: self._open or request.signal.aborted, timeout=WAIT)
            return self._open and not request.signal.aborted


def gated(gate: Gate) -> FunctionProvider:
    """Streams "one ", waits on ``gate`` when the user said "block", then "two" (unless aborted)."""

    def model(request: ModelRequest) -> Iterator[str]:
        yield "one "
        if request.messages[-1].text == "block" and not gate.wait_in(request):
            return
        yield "two"

    return FunctionProvider(model)


def scripted(fn: Callable[[ModelRequest, int], str | Message]) -> FunctionProvider:
    """A FunctionProvider that passes the call number (0-based) too."""
    count = [0]
    lock = threading.Lock()

    def model(request: ModelRequest) -> str | Message:
        with lock:
            n = count[0]
            count[0] += 1
        return fn(request, n)

    return FunctionProvider(model)


def priced(text: str, cost: float) -> Message:
    return Message.assistant(text, usage=Usage(10, 10, cost))
