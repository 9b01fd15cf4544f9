"""Cancellation as on the web: an ``AbortController`` owns an ``AbortSignal``."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["AbortController", "AbortSignal"]


class AbortSignal:
    """Tells whether (and why) an operation was aborted; thread-safe.

    ``wait()`` blocks until abort; ``add_callback(fn)`` calls ``fn(signal)`` once on
    abort (at once if already aborted) and returns a function that removes it.
    """

    __slots__ = ("_aborted", "_callbacks", "_event", "_lock", "_reason")

    def __init__(self) -> None:
        self._aborted = False
        self._event: threading.Event | None = None  # made by the first wait(): most never wait
        self._lock = threading.Lock()
        self._reason: Any = None
        self._callbacks: list[Callable[[AbortSignal], None]] = []

    @property
    def aborted(self) -> bool:
        return self._aborted

    @property
    def reason(self) -> Any:
        return self._reason

    def wait(self, timeout: float | None = None) -> bool:
        """Block until aborted or ``timeout`` seconds pass; return ``aborted``."""
        with self._lock:
            if self._aborted:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    def add_callback(self, fn: Callable[[AbortSignal], None]) -> Callable[[], None]:
        with self._lock:
            if not self._aborted:
                self._callbacks.append(fn)

                def remove() -> None:
                    with self._lock:
                        callbacks = self._callbacks
                        if fn in callbacks:  # gone already: aborted, or removed before
                            callbacks.remove(fn)

                return remove
        fn(self)
        return lambda: None

    def _abort(self, reason: Any) -> bool:
        with self._lock:
            if self._aborted:
                return False
            self._reason = reason
            self._aborted = True
            if self._event is not None:
                self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            fn(self)
        return True

    def throw_if_aborted(self) -> None:
        if self.aborted:
            raise AbortedError(self._reason)

    @classmethod
    def any(cls, signals: Iterable[AbortSignal | None]) -> AbortSignal:
        """A signal aborted as soon as any of ``signals`` is."""
        combined = cls()

        def forward(source: AbortSignal) -> None:
            combined._abort(source.reason)

        for signal in signals:
            if signal is not None:
                signal.add_callback(forward)
        return combined

    def __repr__(self) -> str:
        return f"<AbortSignal aborted={self.aborted} reason={self._reason!r}>"


class AbortController:
    """Owns a signal; ``abort(reason)`` aborts it once (later calls do nothing)."""

    __slots__ = ("signal",)

    def __init__(self) -> None:
        self.signal = AbortSignal()

    def abort(self, reason: Any = None) -> None:
        self.signal._abort("aborted" if reason is None else reason)


class AbortedError(Exception):
    """Internal: unwinds a turn that was aborted. Never escapes the SDK."""

    def __init__(self, reason: Any = None) -> None:
        super().__init__(f"aborted: {reason!r}")
        self.reason = reason
