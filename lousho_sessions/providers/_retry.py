"""When to try a failed request again, and when a model call must be over."""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Mapping
from datetime import datetime, timezone

import attrs

from ..errors import ProviderError

__all__ = ["Deadline", "RetryPolicy", "parse_retry_after"]


@attrs.frozen
class RetryPolicy:
    """How often and how long to wait before trying a failed request again.

    The n-th retry (n from 0) waits ``min(initial_delay * 2**n, max_delay)``
    shortened by up to ``jitter`` (a fraction), unless the server gave a
    ``Retry-After``. A ``Retry-After`` longer than ``max_retry_after`` seconds
    ends the call at once with a ``ProviderError`` (``.retry_after`` says how
    long the server asked to wait).
    """

    max_retries: int = 2
    initial_delay: float = 0.5
    max_delay: float = 8.0
    jitter: float = 0.25
    max_retry_after: float = 60.0

    def backoff(self, retry: int) -> float:
        delay = min(self.initial_delay * 2.0**retry, self.max_delay)
        return delay * (1.0 - self.jitter * random.random())


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds the server asks us to wait: ``retry-after-ms``, then ``Retry-After``.

    ``Retry-After`` may be a number of seconds or an HTTP date. Returns
    ``None`` when neither header is there or readable.
    """
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            return max(float(value) / 1000.0, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    current = datetime.now(timezone.utc).timestamp() if now is None else now
    return max(when.timestamp() - current, 0.0)


@attrs.frozen
class Deadline:
    """When a model call must be over (``limit`` seconds after it began), if ever."""

    limit: float | None
    ends: float | None

    @classmethod
    def start(cls, limit: float | None) -> Deadline:
        return cls(limit, None if limit is None else time.monotonic() + limit)

    def remaining(self) -> float | None:
        return None if self.ends is None else self.ends - time.monotonic()

    def passed(self) -> bool:
        return self.ends is not None and time.monotonic() >= self.ends

    def cap(self, seconds: float) -> float:
        """``seconds``, shortened to what is left of the call (at least a millisecond)."""
        remaining = self.remaining()
        return seconds if remaining is None else max(min(seconds, remaining), 0.001)

    def error(self, provider: str, request_id: str | None, during: str) -> ProviderError:
        return ProviderError(
            None,
            f"{provider}: the model call took longer than max_duration={self.limit:g} s "
            f"and was stopped {during}",
            retryable=True,
            request_id=request_id,
        )
