"""Model doubles and small helpers shared by the tests (no test doubles of our own code)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from lousho_sessions import FunctionProvider, Message, ModelRequest, ToolCall, Usage
from lousho_sessions.stores import _lockfile

WAIT = 10.0  # seconds any Event wait may take before a test fails


def skip_or_fail(message: str) -> NoReturn:
    """Skip the test saying ``message``; under ``LOUSHO_REQUIRE_SERVICES=1`` (``.ci/run``)
    fail instead, so that CI never skips a test silently."""
    if os.environ.get("LOUSHO_REQUIRE_SERVICES") == "1":
        pytest.fail("LOUSHO_REQUIRE_SERVICES=1: " + message, pytrace=False)
    pytest.skip(message)


def needs(condition: bool, message: str) -> None:
    """``skip_or_fail(message)`` unless ``condition`` holds (what this machine must have)."""
    if not condition:
        skip_or_fail(message)


def until(condition: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    """Poll ``condition`` (a state another thread or process brings about) until it
    holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        pause.wait(0.001)


def lock_tickets(path: Path) -> int:
    """The tickets handed out so far on the turn lock file ``path`` (its ticket counter)."""
    at, size = _lockfile._TICKET_AT, _lockfile._TICKET_SIZE
    raw = path.read_bytes()[at : at + size].strip(b"\0 ") if path.exists() else b""
    return int(raw) if raw else 0


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
