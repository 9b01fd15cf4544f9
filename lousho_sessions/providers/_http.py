"""The HTTP layer the HTTP providers share: retries, errors, timeouts, abort.

One :class:`HttpClient` per provider owns one ``requests.Session`` (so
connections are reused). :meth:`HttpClient.stream` POSTs a JSON body and
yields the server-sent events of the reply:

- Retries: on 408, 409, 429, 5xx and connection errors (including a read
  timeout while waiting for the reply's headers), up to ``max_retries`` times,
  waiting ``Retry-After`` (seconds or an HTTP date) or ``retry-after-ms`` when
  the server says so (up to ``max_retry_after`` seconds), otherwise an
  exponential backoff with jitter. ``x-should-retry: true|false`` overrides the
  status. Other 4xx are not retried. Nothing is retried once events flowed.
- Errors: :class:`~lousho_sessions.errors.ProviderError` with ``status``,
  ``message`` (the server's own message when it sent one), ``retryable`` and
  ``request_id``. The API key is replaced by ``***`` in every message and log
  line, and it is kept out of every ``repr``.
- Abort: the signal's callback shuts the request's socket down, so a call
  blocked waiting for headers, reading the stream or sleeping before a retry
  returns at once; the call then raises
  :class:`~lousho_sessions.abort.AbortedError`. (Only the TCP connect itself
  waits for its connect timeout.)
"""

from __future__ import annotations

import contextlib
import email.utils
import http.client
import json
import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timezone
from typing import Any

import attrs
import requests
import requests.adapters
import urllib3
import urllib3.connection
import urllib3.exceptions

from ..abort import AbortedError, AbortSignal
from ..errors import ProviderError
from ._sse import ServerSentEvent, SSEDecoder

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

Timeout = float | tuple[float, float]
"""Seconds: one number for both, or ``(connect, read)``; read is the longest silence allowed."""


@attrs.frozen
class RetryPolicy:
    """How often and how long to wait before trying a failed request again.

    The n-th retry (n from 0) waits ``min(initial_delay * 2**n, max_delay)``
    shortened by up to ``jitter`` (a fraction), unless the server gave a
    ``Retry-After`` of at most ``max_retry_after`` seconds.
    """

    max_retries: int = 2
    initial_delay: float = 0.5
    max_delay: float = 8.0
    jitter: float = 0.25
    max_retry_after: float = 60.0

    def backoff(self, retry: int) -> float:
        delay = min(self.initial_delay * 2.0**retry, self.max_delay)
        return delay * (1.0 - self.jitter * random.random())


class Secret:
    """A string (the API key) that never shows in a ``repr`` or ``str``."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("an API key is not pickled")


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


# --- abort: shut the socket down from the aborting thread ---------------------------
#
# Closing a requests response from another thread does not reliably wake a thread
# blocked in recv(); shutdown(SHUT_RDWR) on the socket does. The socket is made deep
# inside urllib3, so our connection classes hand every socket they make or reuse to
# the abort scope of the request running on this thread.


class _AbortScope:
    """The sockets of one request, shut down when its signal aborts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._aborted = False
        self._closed = False

    def add(self, sock: socket.socket | None) -> None:
        if sock is None:
            return
        with self._lock:
            if self._closed:
                return
            if not self._aborted:
                self._sockets.append(sock)
                return
        _shutdown(sock)

    def abort(self, _signal: AbortSignal | None = None) -> None:
        with self._lock:
            if self._aborted or self._closed:
                return
            self._aborted = True
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _shutdown(sock)

    def close(self) -> None:
        """The request is over: its (maybe pooled) sockets are no longer ours to shut."""
        with self._lock:
            self._closed = True
            self._sockets = []


def _shutdown(sock: socket.socket) -> None:
    # socket.socket.shutdown, not SSLSocket.shutdown: we cut the file descriptor
    # without touching the TLS object another thread may be reading through.
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


_current = threading.local()


def _register(sock: socket.socket | None) -> None:
    scope: _AbortScope | None = getattr(_current, "scope", None)
    if scope is not None:
        scope.add(sock)


class _AbortableConnection(urllib3.connection.HTTPConnection):
    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()
        _register(sock)
        return sock

    def request(self, *args: Any, **kwargs: Any) -> None:
        _register(self.sock)  # a reused keep-alive connection
        super().request(*args, **kwargs)


class _AbortableHTTPSConnection(urllib3.connection.HTTPSConnection):
    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()
        _register(sock)
        return sock

    def request(self, *args: Any, **kwargs: Any) -> None:
        _register(self.sock)
        super().request(*args, **kwargs)


class _AbortableHTTPPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _AbortableConnection


class _AbortableHTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _AbortableHTTPSConnection


_POOLS = {"http": _AbortableHTTPPool, "https": _AbortableHTTPSPool}


class _AbortableAdapter(requests.adapters.HTTPAdapter):
    """An adapter whose connections report their sockets to the request's abort scope."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _POOLS

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if hasattr(manager, "pool_classes_by_scheme"):
            manager.pool_classes_by_scheme = _POOLS
        return manager


# --- the client -----------------------------------------------------------------------

_NETWORK_ERRORS: tuple[type[BaseException], ...] = (
    requests.RequestException,
    urllib3.exceptions.HTTPError,
    http.client.HTTPException,
    OSError,
)


class HttpStream:
    """An open streamed reply: its events, status and request id."""

    def __init__(
        self,
        response: requests.Response,
        signal: AbortSignal,
        redact: Callable[[str], str],
        scope: _AbortScope,
        grace: float,
    ) -> None:
        self.response = response
        self.request_id = _request_id(response.headers)
        self._signal = signal
        self._redact = redact
        self._scope = scope
        self._grace = grace

    def drain(self) -> None:
        """Read the rest of the body after the last event, so the connection is reused.

        Normally only the end of the chunked body is left. A server that keeps
        the stream open is cut off after a grace period (at most a second), and
        nothing read here can fail the call.
        """
        timer = threading.Timer(self._grace, self._scope.abort)
        timer.daemon = True
        timer.start()
        try:
            for _ in _iter_body(self.response):
                pass
        except Exception as exc:
            log.debug("not reusing the connection: %s", type(exc).__name__)
        finally:
            timer.cancel()

    def events(self) -> Iterator[ServerSentEvent]:
        """The reply's server-sent events as they arrive.

        Raises ``ProviderError`` (``retryable=True``) when the connection fails
        or goes silent longer than the read timeout, and ``AbortedError`` when
        the signal aborts.
        """
        decoder = SSEDecoder()
        try:
            for chunk in _iter_body(self.response):
                yield from decoder.feed(chunk)
        except Exception as exc:
            if self._signal.aborted:
                raise AbortedError(self._signal.reason) from None
            if not isinstance(exc, _NETWORK_ERRORS):
                raise
            what = "timed out" if _is_timeout(exc) else "was interrupted"
            raise ProviderError(
                None,
                self._redact(f"the event stream {what}: {type(exc).__name__}: {exc}"),
                retryable=True,
                request_id=self.request_id,
            ) from exc
        if self._signal.aborted:
            raise AbortedError(self._signal.reason)
        cut = decoder.pending
        decoder.close()
        if cut:
            log.debug("event stream ended inside an event (request id %s)", self.request_id)


def _iter_body(response: requests.Response) -> Iterator[bytes]:
    raw = response.raw
    read1 = getattr(raw, "read1", None)
    if read1 is None:  # urllib3 < 2.3: per HTTP chunk when chunked, else may buffer
        yield from raw.stream(65536, decode_content=True)
        return
    while True:
        chunk = read1(65536, decode_content=True)  # requests leaves raw bodies encoded
        if not chunk:
            return
        yield chunk


def _is_timeout(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    for _ in range(10):  # follow the cause chain, as the anthropic SDK does
        if seen is None:
            return False
        if isinstance(
            seen, (requests.Timeout, urllib3.exceptions.TimeoutError, socket.timeout, TimeoutError)
        ):
            return True
        seen = seen.__cause__ or seen.__context__ or _first_arg_exception(seen)
    return False


def _first_arg_exception(exc: BaseException) -> BaseException | None:
    # urllib3 and requests wrap errors as arguments, not always as causes
    for arg in exc.args:
        if isinstance(arg, BaseException):
            return arg
        reason = getattr(arg, "reason", None)
        if isinstance(reason, BaseException):
            return reason
    return None


def _request_id(headers: Mapping[str, str]) -> str | None:
    return headers.get("x-request-id") or headers.get("request-id")


class HttpClient:
    """POSTs JSON and streams server-sent events back, with retries and abort.

    ``headers`` are sent with every request (they may hold the API key, which
    is also given as ``secret`` so that it can be scrubbed from messages).
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
    ) -> None:
        self.provider = provider
        self.base_url = base_url.rstrip("/")
        self._headers = dict(headers)
        self._secret = secret
        if isinstance(timeout, tuple):
            self.timeout: tuple[float, float] = (float(timeout[0]), float(timeout[1]))
        else:
            self.timeout = (float(timeout), float(timeout))
        self.retry = retry or RetryPolicy()
        self._session = requests.Session()
        adapter = _AbortableAdapter()
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)

    def __repr__(self) -> str:
        return f"<HttpClient {self.provider} {self.base_url} timeout={self.timeout}>"

    def close(self) -> None:
        """Close the pooled connections."""
        self._session.close()

    def redact(self, text: str) -> str:
        """``text`` with the API key replaced by ``***``."""
        if self._secret and self._secret.reveal() in text:
            return text.replace(self._secret.reveal(), "***")
        return text

    @contextlib.contextmanager
    def stream(
        self, path: str, body: Mapping[str, Any], signal: AbortSignal
    ) -> Iterator[HttpStream]:
        """POST ``body`` to ``path`` (retrying as the policy says) and give the open stream.

        The response is closed when the ``with`` block ends, however it ends.
        """
        scope = _AbortScope()
        remove = signal.add_callback(scope.abort)
        response: requests.Response | None = None
        try:
            response = self._send(path, body, signal, scope)
            yield HttpStream(response, signal, self.redact, scope, grace=min(1.0, self.timeout[1]))
        finally:
            remove()
            scope.close()
            if response is not None:
                response.close()

    def _send(
        self, path: str, body: Mapping[str, Any], signal: AbortSignal, scope: _AbortScope
    ) -> requests.Response:
        url = f"{self.base_url}/{path.lstrip('/')}"
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        attempt = 0
        while True:
            if signal.aborted:
                raise AbortedError(signal.reason)
            outcome, delay = self._attempt(url, data, signal, scope)
            if isinstance(outcome, requests.Response):
                return outcome
            error = outcome
            if not error.retryable or attempt >= self.retry.max_retries:
                if attempt:
                    log.warning(
                        "%s: giving up after %d attempts: %s", self.provider, attempt + 1, error
                    )
                raise error
            wait = self.retry.backoff(attempt) if delay is None else delay
            log.info(
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
        self, url: str, data: bytes, signal: AbortSignal, scope: _AbortScope
    ) -> tuple[ProviderError | requests.Response, float | None]:
        """One request: the open response, or the error and the wait the server asked for."""
        _current.scope = scope
        started = time.monotonic()
        try:
            response = self._session.post(
                url, data=data, headers=self._headers, stream=True, timeout=self.timeout
            )
        except requests.RequestException as exc:
            if signal.aborted:
                raise AbortedError(signal.reason) from None
            retryable = isinstance(exc, (requests.ConnectionError, requests.Timeout))
            what = "timed out" if _is_timeout(exc) else "failed"
            message = f"POST {url} {what}: {type(exc).__name__}: {exc}"
            return ProviderError(None, self.redact(message), retryable=retryable), None
        finally:
            _current.scope = None
        log.debug(
            "%s: POST %s -> %d in %.3fs (request id %s)",
            self.provider,
            url,
            response.status_code,
            time.monotonic() - started,
            _request_id(response.headers),
        )
        if response.status_code < 300:
            return response, None
        try:
            return self._error(response, signal), self._retry_after(response)
        finally:
            response.close()

    def _retry_after(self, response: requests.Response) -> float | None:
        delay = parse_retry_after(response.headers)
        if delay is not None and delay <= self.retry.max_retry_after:
            return delay
        return None

    def _error(self, response: requests.Response, signal: AbortSignal) -> ProviderError:
        status = response.status_code
        try:
            text = response.content.decode("utf-8", errors="replace")
        except _NETWORK_ERRORS as exc:
            if signal.aborted:
                raise AbortedError(signal.reason) from None
            text = f"(the error body could not be read: {type(exc).__name__})"
        message = error_message(text) or (response.reason or "HTTP error")
        should = response.headers.get("x-should-retry")
        if should in ("true", "false"):
            retryable = should == "true"
        else:
            retryable = status in RETRY_STATUSES or status >= 500
        return ProviderError(
            status,
            self.redact(f"{self.provider}: {message}"),
            retryable=retryable,
            request_id=_request_id(response.headers),
        )


def error_message(text: str) -> str:
    """The human message of an error body: ``error.message`` of the JSON, else the text."""
    try:
        body = json.loads(text)
    except ValueError:
        return text.strip()[:500]
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            kind = error.get("type") or error.get("code")
            message = error.get("message")
            if isinstance(message, str):
                return f"{message} ({kind})" if isinstance(kind, str) and kind else message
        elif isinstance(error, str):
            return error
    return text.strip()[:500]
