"""What went wrong with an HTTP call: the cause under a network error, the server's message.

``failure`` follows a network error's causes (``__cause__``, ``__context__`` and
the errors urllib3 wraps in its arguments) to say whether the connection was
refused, the host not resolved, or a timeout hit; ``error_message`` takes the
human message out of an error body; ``request_id`` the id the server gave.
"""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator, Mapping
from urllib.parse import urlsplit

import requests
import urllib3.exceptions

__all__ = [
    "NETWORK_ERRORS",
    "body_retry_delay",
    "error_message",
    "failure",
    "host_port",
    "request_id",
]

NETWORK_ERRORS: tuple[type[BaseException], ...] = (
    requests.RequestException,
    urllib3.exceptions.HTTPError,
    http.client.HTTPException,
    OSError,
)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what caused it: causes, contexts and the errors urllib3 wraps in args."""
    seen: set[int] = set()
    todo = [exc]
    while todo and len(seen) < 20:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                todo.append(linked)
        for arg in current.args:
            if isinstance(arg, BaseException):
                todo.append(arg)
            reason = getattr(arg, "reason", None)
            if isinstance(reason, BaseException):
                todo.append(reason)
        reason = getattr(current, "reason", None)
        if isinstance(reason, BaseException):
            todo.append(reason)


_TIMEOUTS = (requests.Timeout, urllib3.exceptions.TimeoutError, socket.timeout, TimeoutError)


def failure(exc: BaseException) -> tuple[str, bool]:
    """What went wrong underneath a network error, and whether it was a timeout."""
    chain = list(_chain(exc))
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return "connection refused", False
    if any(isinstance(e, socket.gaierror) for e in chain):
        return "host name not resolved", False
    # urllib3's NewConnectionError is a ConnectTimeoutError for old code's sake;
    # only a real timeout underneath it makes it one
    if any(
        isinstance(e, _TIMEOUTS) and not isinstance(e, urllib3.exceptions.NewConnectionError)
        for e in chain
    ):
        return "timed out", True
    return "failed", False


def host_port(url: str) -> str:
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.hostname}:{port}"


def request_id(headers: Mapping[str, str]) -> str | None:
    return headers.get("x-request-id") or headers.get("request-id")


def error_message(text: str) -> str:
    """The human message of an error body: ``error.message`` of the JSON, else the text."""
    try:
        body = json.loads(text)
    except ValueError:
        return text.strip()[:500]
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            # OpenAI and Anthropic name a type; Google a status (its code is the HTTP one)
            kind = error.get("type") or error.get("status") or error.get("code")
            message = error.get("message")
            if isinstance(message, str):
                return f"{message} ({kind})" if isinstance(kind, str) and kind else message
        elif isinstance(error, str):
            return error
    return text.strip()[:500]


def body_retry_delay(text: str) -> float | None:
    """The wait an error body asks for: Google's ``RetryInfo`` detail (``"retryDelay": "37s"``).

    ``None`` when the body names none (then the ``Retry-After`` header, if any, says it).
    """
    try:
        body = json.loads(text)
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    for detail in details if isinstance(details, list) else ():
        if not isinstance(detail, dict) or not str(detail.get("@type", "")).endswith("RetryInfo"):
            continue
        delay = detail.get("retryDelay")
        if isinstance(delay, str) and delay.endswith("s"):
            try:
                seconds = float(delay[:-1])
            except ValueError:
                return None
            return seconds if seconds >= 0 else None
    return None
