"""The HTTP layer the HTTP providers share: retries, errors, limits, abort, redaction.

One :class:`HttpClient` per provider owns one ``_transport.Transport`` (so
connections are reused: straight to the server, or through ``requests`` when a
proxy applies). :meth:`HttpClient.stream` POSTs a JSON body and yields the
server-sent events of the reply:

- Retries: on 408, 409, 429, 5xx and connection errors (including a read
  timeout while waiting for the reply's headers), up to ``max_retries`` times,
  waiting ``Retry-After`` (seconds or an HTTP date) or ``retry-after-ms`` when
  the server says so, otherwise an exponential backoff with jitter. A server
  that asks for a wait longer than ``max_retry_after`` gets no retry: the call
  fails at once with a ``ProviderError`` saying how long it asked for
  (``.retry_after``). ``x-should-retry: true|false`` overrides the status.
  Other 4xx are not retried. Nothing is retried once events flowed.
- Errors: :class:`~lousho_sessions.errors.ProviderError` with ``status``,
  ``message`` (the server's own message when it sent one), ``retryable`` and
  ``request_id``. A request that cannot be encoded is ``retryable=False`` with
  the encoding error as ``__cause__``. Every error leaving a provider passes
  through :meth:`HttpClient.guard`, which scrubs the API key from it (see
  :mod:`._redact`); log lines are scrubbed the same way.
- Limits: ``max_duration`` bounds a whole model call (every attempt, every
  wait and the whole stream), so a server that drips a byte at a time cannot
  hold it open; ``max_event_size`` bounds one line or event of the stream.
- Abort: the signal's callback shuts the request's socket down, so a call
  blocked waiting for headers, reading the stream or sleeping before a retry
  returns at once; the call then raises
  :class:`~lousho_sessions.abort.AbortedError`. (Only the TCP connect itself
  waits for its connect timeout.)
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import requests

from ..abort import AbortedError, AbortSignal
from ..errors import ProviderConfigError, ProviderError
from ._failures import (
    NETWORK_ERRORS,
    body_retry_delay,
    error_message,
    failure,
    host_port,
    request_id,
)
from ._redact import Redactor, Secret
from ._retry import Deadline, RetryPolicy, parse_retry_after
from ._sockets import AbortScope
from ._sse import DEFAULT_MAX_EVENT_SIZE, ServerSentEvent, SSEDecoder
from ._transport import Response, Transport

__all__ = [
    "HttpClient",
    "HttpStream",
    "RetryPolicy",
    "Secret",
    "Timeout",
    "error_message",
    "parse_retry_after",
]

log = logging.getLogger("lousho_sessions.providers")

#: Statuses worth trying again (the anthropic and openai SDKs retry the same).
RETRY_STATUSES = frozenset({408, 409, 429})

T = TypeVar("T")

Timeout = float | tuple[float, float]
"""Seconds: one number for both, or ``(connect, read)``; read is the longest silence allowed."""


#: how request bodies are written: UTF-8 text as it is, NaN and infinities refused
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False)
_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)
_encode_text: Any = json.encoder.encode_basestring


def _dumps(value: Any) -> str:
    """``_ENCODER.encode(value)``, without the stdlib's thirty lines of Python a call: its C
    encoder made directly, as ``JSONEncoder.iterencode`` makes it (circular values refused)."""
    if _make_encoder is None:
        return _ENCODER.encode(value)
    if isinstance(value, str):
        return str(_encode_text(value))
    encoder = _make_encoder(
        {}, _ENCODER.default, _encode_text, None, ": ", ", ", False, False, False
    )
    return "".join(encoder(value, 0))


# --- the client -----------------------------------------------------------------------


class HttpStream:
    """An open streamed reply: its events, status and request id."""

    def __init__(
        self,
        client: HttpClient,
        response: Response,
        signal: AbortSignal,
        scope: AbortScope,
        deadline: Deadline,
    ) -> None:
        self.response = response
        self.request_id = request_id(response.headers)
        self._client = client
        self._signal = signal
        self._scope = scope
        self._deadline = deadline

    def drain(self) -> None:
        """Read the rest of the body after the last event, so the connection is reused.

        Normally only the end of the chunked body is left. A server that keeps
        the stream open is cut off after a grace period (at most a second), and
        nothing read here can fail the call.
        """
        grace = min(1.0, self._client.timeout[1])
        ends = time.monotonic() + grace
        try:
            for _ in self._chunks(lambda: max(ends - time.monotonic(), 0.001)):
                if time.monotonic() >= ends:
                    self._scope.abort()
                    break
        except Exception as exc:
            log.debug("not reusing the connection: %s", type(exc).__name__)

    def events(self) -> Iterator[ServerSentEvent]:
        """The reply's server-sent events as they arrive.

        Raises ``ProviderError`` (``retryable=True``) when the connection fails,
        goes silent longer than the read timeout or the call runs past
        ``max_duration``; ``ProviderError`` (``retryable=False``) for a line or
        event over ``max_event_size``; ``AbortedError`` when the signal aborts.
        """
        provider = self._client.provider
        decoder = SSEDecoder(self._client.max_event_size)
        read = self._client.timeout[1]
        try:
            for chunk in self._chunks(lambda: self._deadline.cap(read)):
                if self._deadline.passed():
                    raise self._deadline.error(provider, self.request_id, "inside the stream")
                yield from decoder.feed(chunk)
        except ProviderError as exc:
            if exc.request_id is not None:
                raise
            raise ProviderError(
                exc.status,
                f"{provider}: {exc.message}",
                retryable=exc.retryable,
                request_id=self.request_id,
            ) from None
        except Exception as exc:
            if self._signal.aborted:
                raise AbortedError(self._signal.reason) from None
            if not isinstance(exc, NETWORK_ERRORS):
                raise
            if self._deadline.passed():
                raise self._deadline.error(provider, self.request_id, "inside the stream") from exc
            what = "timed out" if failure(exc)[1] else "was interrupted"
            raise ProviderError(
                None,
                f"{provider}: the event stream {what}: {type(exc).__name__}: {exc}",
                retryable=True,
                request_id=self.request_id,
            ) from exc
        if self._signal.aborted:
            raise AbortedError(self._signal.reason)
        cut = decoder.pending
        decoder.close()
        if cut:
            log.debug("event stream ended inside an event (request id %s)", self.request_id)

    def _chunks(self, timeout: Any) -> Iterator[bytes]:
        """The body's chunks; before each read the socket's timeout becomes ``timeout()``."""
        body, read_timeout = self.response.chunks(), self.response.read_timeout
        while True:
            read_timeout(timeout())
            chunk = next(body, None)
            if chunk is None:
                return
            yield chunk


#: a header name (RFC 9110 ``token``)
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def _check_headers(provider: str, headers: Mapping[str, str]) -> None:
    """Refuse header names and values HTTP cannot carry, naming the header but never its value."""
    for name, value in headers.items():
        if not isinstance(name, str) or not _TOKEN.fullmatch(name):
            raise ProviderConfigError(
                None, f"{provider}: {name!r} is not a valid HTTP header name", retryable=False
            )
        bad = next((c for c in value if ord(c) > 0xFF or ord(c) < 0x20 or ord(c) == 0x7F), None)
        if bad is not None:
            raise ProviderConfigError(
                None,
                f"{provider}: header {name!r} holds U+{ord(bad):04X}, which an HTTP header "
                "cannot carry (control characters and characters outside latin-1 are refused)",
                retryable=False,
            )


class HttpClient:
    """POSTs JSON and streams server-sent events back, with retries, limits and abort.

    ``headers`` are sent with every request (they may hold the API key, which
    is also given as ``secret`` so that it can be scrubbed from errors and
    logs). ``max_duration`` (seconds, ``None`` for no limit) bounds a whole
    call; ``max_event_size`` (characters, ``None`` for no limit) one line or
    event of the stream.
    """

    def __init__(
        self,
        *,
        provider: str,
        base_url: str,
        headers: Mapping[str, str],
        secret: Secret | None = None,
        timeout: Timeout = (10.0, 600.0),
        retry: RetryPolicy | None = None,
        max_duration: float | None = None,
        max_event_size: int | None = DEFAULT_MAX_EVENT_SIZE,
    ) -> None:
        self.provider = provider
        self.base_url = base_url.rstrip("/")
        self.redactor = Redactor(secret)
        _check_headers(provider, headers)
        self._headers = dict(headers)
        if isinstance(timeout, tuple):
            self.timeout: tuple[float, float] = (float(timeout[0]), float(timeout[1]))
        else:
            self.timeout = (float(timeout), float(timeout))
        self.retry = retry or RetryPolicy()
        if max_duration is not None and max_duration <= 0:
            raise ProviderConfigError(
                None, f"{provider}: max_duration must be positive, not {max_duration!r}"
            )
        if max_event_size is not None and max_event_size <= 0:
            raise ProviderConfigError(
                None, f"{provider}: max_event_size must be positive, not {max_event_size!r}"
            )
        self.max_duration = max_duration
        self.max_event_size = max_event_size
        self._transport = Transport(provider, self._headers)

    def __repr__(self) -> str:
        return f"<HttpClient {self.provider} {self.base_url} timeout={self.timeout}>"

    def close(self) -> None:
        """Close the pooled connections."""
        self._transport.close()

    def redact(self, text: str) -> str:
        """``text`` with the API key (and its escaped forms and fragments) replaced by ``***``."""
        return self.redactor.text(text)

    def guard(self, events: Iterator[T]) -> Iterator[T]:
        """``events``, with every exception they raise scrubbed of the API key first.

        The one place provider errors pass through on their way out: the
        message, ``args``, string attributes and the whole cause chain.
        """
        try:
            yield from events
        except Exception as exc:
            self.redactor.exception(exc)
            raise

    def _log(self, level: int, message: str, *args: object) -> None:
        if log.isEnabledFor(level):
            log.log(level, "%s", self.redactor.log_line(message, *args))

    @contextlib.contextmanager
    def stream(
        self,
        path: str,
        body: Mapping[str, Any] | bytes | memoryview,
        signal: AbortSignal,
        sent: Callable[[], None] | None = None,
    ) -> Iterator[HttpStream]:
        """POST ``body`` (a JSON object, or its UTF-8 JSON text already encoded with
        :meth:`encode`) to ``path`` (retrying as the policy says) and give the open stream.
        ``sent`` is called after each attempt's request has left, before its answer is
        waited for (``ModelRequest.on_sent``).

        The response is closed when the ``with`` block ends, however it ends.
        """
        deadline = Deadline.start(self.max_duration)
        scope = AbortScope()
        remove = signal.add_callback(scope.abort)
        response: Response | None = None
        try:
            response = self._send(path, body, signal, scope, deadline, sent)
            yield HttpStream(self, response, signal, scope, deadline)
        finally:
            remove()
            scope.close()
            if response is not None:
                response.close()

    def encode(self, value: Any) -> bytes:
        """``value`` as UTF-8 JSON text, as a request body carries it; a value that cannot
        be sent is a ``ProviderError`` (``retryable=False``) saying why."""
        try:
            return _dumps(value).encode("utf-8")
        except UnicodeEncodeError as exc:
            near = exc.object[max(exc.start - 20, 0) : exc.end + 20]
            raise ProviderError(
                None,
                f"{self.provider}: the request cannot be encoded as UTF-8 ({exc.reason} at "
                f"character {exc.start} of the JSON body, near {near!r}): "
                "is there a lone surrogate in the text?",
                retryable=False,
            ) from exc
        except (TypeError, ValueError) as exc:
            raise ProviderError(
                None,
                f"{self.provider}: the request cannot be sent as JSON: {str(exc)[:200]}",
                retryable=False,
            ) from exc

    def _send(
        self,
        path: str,
        body: Mapping[str, Any] | bytes | memoryview,
        signal: AbortSignal,
        scope: AbortScope,
        deadline: Deadline,
        sent: Callable[[], None] | None = None,
    ) -> Response:
        url = f"{self.base_url}/{path.lstrip('/')}"
        data = body if isinstance(body, (bytes, memoryview)) else self.encode(body)
        attempt = 0
        while True:
            if signal.aborted:
                raise AbortedError(signal.reason)
            outcome, delay = self._attempt(url, data, signal, scope, deadline, sent)
            if not isinstance(outcome, ProviderError):
                return outcome
            error = outcome
            if deadline.passed():
                raise deadline.error(self.provider, error.request_id, "before a reply") from error
            cap = self.retry.max_retry_after
            if error.retryable and delay is not None and delay > cap:
                raise ProviderError(
                    error.status,
                    f"{error.message} (the server asked to wait {delay:g} s before trying "
                    f"again, longer than max_retry_after={cap:g} s; not retried)",
                    retryable=True,
                    request_id=error.request_id,
                    retry_after=delay,
                ) from error
            if not error.retryable or attempt >= self.retry.max_retries:
                if attempt:
                    self._log(
                        logging.WARNING,
                        "%s: giving up after %d attempts: %s",
                        self.provider,
                        attempt + 1,
                        error,
                    )
                raise error
            wait = self.retry.backoff(attempt) if delay is None else delay
            remaining = deadline.remaining()
            if remaining is not None and wait >= remaining:
                raise deadline.error(
                    self.provider, error.request_id, f"(the next retry was due in {wait:g} s)"
                ) from error
            self._log(
                logging.INFO,
                "%s: retrying in %.3fs (attempt %d of %d) after: %s",
                self.provider,
                wait,
                attempt + 2,
                self.retry.max_retries + 1,
                error,
            )
            attempt += 1
            if signal.wait(wait):
                raise AbortedError(signal.reason)

    def _attempt(
        self,
        url: str,
        data: bytes | memoryview,
        signal: AbortSignal,
        scope: AbortScope,
        deadline: Deadline,
        sent: Callable[[], None] | None = None,
    ) -> tuple[ProviderError | Response, float | None]:
        """One request: the open response, or the error and the wait the server asked for."""
        started = time.monotonic()
        timeout = (deadline.cap(self.timeout[0]), deadline.cap(self.timeout[1]))
        try:
            response = self._transport.post(url, data, timeout, scope, sent)
        except NETWORK_ERRORS as exc:
            if signal.aborted:
                raise AbortedError(signal.reason) from None
            if isinstance(exc, requests.RequestException):
                retryable = isinstance(exc, (requests.ConnectionError, requests.Timeout))
            else:  # straight to the server: connecting, sending or reading the head failed
                retryable = True
            what, _ = failure(exc)
            if what in ("connection refused", "host name not resolved"):
                what = f"failed: {what} ({host_port(url)})"
            message = f"{self.provider}: POST {url} {what}: {type(exc).__name__}: {exc}"
            return ProviderError(None, message, retryable=retryable), None
        self._log(
            logging.DEBUG,
            "%s: POST %s -> %d in %.3fs (request id %s)",
            self.provider,
            url,
            response.status,
            time.monotonic() - started,
            request_id(response.headers),
        )
        if response.status < 300:
            return response, None
        try:
            error = self._error(response, signal, parse_retry_after(response.headers))
            return error, error.retry_after
        finally:
            response.close()

    def _error(self, response: Response, signal: AbortSignal, delay: float | None) -> ProviderError:
        status = response.status
        try:
            text = response.read().decode("utf-8", errors="replace")
        except NETWORK_ERRORS as exc:
            if signal.aborted:
                raise AbortedError(signal.reason) from None
            text = f"(the error body could not be read: {type(exc).__name__})"
        message = error_message(text) or (response.reason or "HTTP error")
        if delay is None:
            delay = body_retry_delay(text)
        should = response.headers.get("x-should-retry")
        if should in ("true", "false"):
            retryable = should == "true"
        else:
            retryable = status in RETRY_STATUSES or status >= 500
        return ProviderError(
            status,
            f"{self.provider}: {message}",
            retryable=retryable,
            request_id=request_id(response.headers),
            retry_after=delay,
        )
