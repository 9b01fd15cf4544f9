"""HTTP/1.1 straight to the server on kept-alive connections: a model call's usual path.

``requests`` spends about a millisecond of CPU on every request (preparing it, merging
settings, cookies, adapters, urllib3's and ``http.client``'s layers); a model call needs
none of that once its URL is known. A :class:`DirectRoute` is made once per URL (by
``_transport.Transport``, which sends through ``requests`` whenever a proxy or a
``.netrc`` entry applies to the URL, and follows redirects there): it keeps the request
head, written once, and a pool of kept-alive connections. urllib3's connection classes
open the connections (``create_connection``, TLS with the same context, CA bundle and
host-name check ``requests`` would use); what goes over them is written and read here
(a connection's own sends and reads, and their timeouts: ``_direct_connection``):

- the request: the head and ``Content-Length``, then the body;
- the response: status line (informational 1xx responses skipped), headers (at most
  100, lines of at most 64 KiB, obsolete line folding joined), and a body framed as
  RFC 9112 says (chunked, ``Content-Length``, or until the server closes), decoded
  when ``Content-Encoding`` is ``gzip`` or ``deflate``;
- the connection goes back to the pool only after its whole body was read and neither
  side said ``Connection: close``; a pooled connection the server closed meanwhile is
  seen (it reads as readable) and dropped before it is used.

Every failure is an ``OSError``, an urllib3 ``HTTPError`` (from connecting) or an
``http.client.HTTPException``, and the connection it happened on is closed.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import urllib3.response
import urllib3.util
from urllib3.util.wait import wait_for_read

from ._direct_connection import _MAX_HEADERS, _RECV, DirectConnection
from ._sockets import AbortableHTTPConnection, AbortableHTTPSConnection, AbortScope, scoped

__all__ = ["DirectConnection", "DirectPool", "DirectResponse", "DirectRoute"]


#: idle connections kept per server (as urllib3's pools keep)
MAX_IDLE = 10


class DirectPool:
    """The idle connections of one HTTP client, by server; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[Any, list[DirectConnection]] = {}

    def take(self, key: Any) -> DirectConnection | None:
        """An idle connection to ``key`` the server has not closed, if there is one."""
        while True:
            with self._lock:
                idle = self._idle.get(key)
                if not idle:
                    return None
                connection = idle.pop()
            # readable while idle: closed by the server (or it sent what nobody asked for)
            if not connection.buffered and not wait_for_read(connection.sock, timeout=0.0):
                return connection
            connection.close()

    def put(self, key: Any, connection: DirectConnection) -> None:
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if len(idle) < MAX_IDLE:
                idle.append(connection)
                return
        connection.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                connection.close()


class DirectRoute:
    """POSTs to one URL straight to its server: the head written once, pooled connections.

    ``headers`` are sent with every request, after ``Host``; ``tls`` are the keyword
    arguments of urllib3's ``HTTPSConnection`` (``cert_reqs``, ``ca_certs`` or
    ``ca_cert_dir``) for an ``https`` URL.
    """

    def __init__(
        self, url: str, headers: Mapping[str, str], tls: Mapping[str, Any], pool: DirectPool
    ) -> None:
        parsed = urllib3.util.parse_url(url)
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.https = parsed.scheme == "https"
        self.host: str = parsed.host
        default = 443 if self.https else 80
        self.port: int = parsed.port or default
        self._tls = dict(tls) if self.https else {}
        self._pool = pool
        self.key = (parsed.scheme, self.host, self.port, tuple(sorted(self._tls.items())))
        name = f"[{self.host}]" if ":" in self.host else self.host
        host = name if self.port == default else f"{name}:{self.port}"
        lines = [f"POST {parsed.request_uri} HTTP/1.1", f"Host: {host}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        self._head = ("\r\n".join(lines) + "\r\n").encode("latin-1")

    def post(
        self,
        body: bytes | memoryview,
        timeout: tuple[float, float],
        scope: AbortScope,
        extra: Mapping[str, str] | None = None,
        sent: Callable[[], None] | None = None,
    ) -> DirectResponse:
        """Send ``body`` (``extra`` headers too) and read the response's head; ``sent`` is
        called between the two.

        ``timeout`` is (connect, read): connect bounds connecting and sending, read the
        wait for the head. The socket joins ``scope``, so an abort shuts it down.
        """
        head = self._head
        if extra:
            head += "".join(f"{k}: {v}\r\n" for k, v in extra.items()).encode("latin-1")
        head += b"Content-Length: %d\r\n\r\n" % len(body)
        connection = self._pool.take(self.key)
        if connection is None:
            connection = self._connect(timeout[0], scope)
        scope.add(connection.sock)
        try:
            connection.send(head, body, timeout[0])
            if sent is not None:
                sent()
            connection.wait = timeout[1]
            return DirectResponse.read_head(connection, self)
        except BaseException:
            connection.close()
            raise

    def release(self, connection: DirectConnection) -> None:
        self._pool.put(self.key, connection)

    def _connect(self, timeout: float, scope: AbortScope) -> DirectConnection:
        if self.https:
            conn: Any = AbortableHTTPSConnection(self.host, self.port, timeout=timeout, **self._tls)
        else:
            conn = AbortableHTTPConnection(self.host, self.port, timeout=timeout)
        with scoped(scope):  # the socket joins the scope as soon as it exists
            try:
                conn.connect()
            except BaseException:
                conn.close()
                raise
        return DirectConnection(conn)


class DirectResponse:
    """A response read from a :class:`DirectConnection`: status, headers, then the body.

    ``headers`` has lower-case names (repeated headers joined by ``", "``);
    ``set_cookies`` the values of every ``Set-Cookie``.
    """

    def __init__(
        self,
        connection: DirectConnection,
        route: DirectRoute,
        status: int,
        reason: str,
        headers: dict[str, str],
        set_cookies: list[str],
        keep_alive: bool,
    ) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.set_cookies = set_cookies
        self._connection: DirectConnection | None = connection
        self._route = route
        self._keep_alive = keep_alive
        self._complete = False  # the whole body was read
        self._body = self._framed()

    @classmethod
    def read_head(cls, connection: DirectConnection, route: DirectRoute) -> DirectResponse:
        while True:
            try:
                line = connection.line()
            except http.client.IncompleteRead as exc:
                if exc.partial:
                    raise http.client.BadStatusLine(exc.partial.decode("latin-1")) from None
                raise http.client.RemoteDisconnected(
                    "Remote end closed connection without response"
                ) from None
            version, _, rest = line.decode("latin-1").partition(" ")
            code, _, reason = rest.partition(" ")
            if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
                raise http.client.BadStatusLine(line.decode("latin-1"))
            status = int(code)
            headers, set_cookies = _read_headers(connection)
            if not 100 <= status < 200 or status == 101:
                break  # an informational response (103 Early Hints, a stray 100) is skipped
        if status == 101:
            raise http.client.HTTPException("the server switched protocols (101)")
        keep = version == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
        return cls(connection, route, status, reason.strip(), headers, set_cookies, keep)

    def chunks(self) -> Iterator[bytes]:
        """The body, decoded, as it arrives (each piece as soon as it is read)."""
        return self._body

    def read_timeout(self, seconds: float) -> None:
        """The timeout of the body's reads from now on (set on the socket by the next read
        that needs the socket: none for what is buffered already)."""
        if self._connection is not None:
            self._connection.wait = seconds

    def read(self) -> bytes:
        """The rest of the body."""
        return b"".join(self._body)

    def close(self) -> None:
        """Done with the response: its connection goes back to the pool if it can be reused."""
        connection, self._connection = self._connection, None
        if connection is None:
            return
        if self._complete and self._keep_alive and not connection.buffered:
            self._route.release(connection)
        else:
            connection.close()

    def _framed(self) -> Iterator[bytes]:
        headers = self.headers
        if 100 <= self.status < 200 or self.status in (204, 304):
            raw: Iterator[bytes] = iter(())
        elif "transfer-encoding" in headers:
            codings = [c.strip() for c in headers["transfer-encoding"].lower().split(",")]
            raw = self._chunked() if codings[-1] == "chunked" else self._until_close()
        elif "content-length" in headers:
            values = {v.strip() for v in headers["content-length"].split(",")}
            length = values.pop() if len(values) == 1 else ""
            raw = self._length(int(length)) if length.isdigit() else self._until_close()
        else:
            raw = self._until_close()
        coding = headers.get("content-encoding", "").strip().lower()
        if coding in ("gzip", "x-gzip", "deflate"):
            return _decoded(raw, coding)
        return raw

    def _take(self, limit: int) -> bytes:
        connection = self._connection
        if connection is None:
            raise http.client.HTTPException("the response was closed")
        return connection.take(limit)

    def _length(self, length: int) -> Iterator[bytes]:
        left = length
        while left:
            data = self._take(left)
            if not data:
                raise http.client.IncompleteRead(b"", left)
            left -= len(data)
            yield data
        self._complete = True

    def _until_close(self) -> Iterator[bytes]:
        self._keep_alive = False
        while data := self._take(_RECV):
            yield data
        self._complete = True

    def _chunked(self) -> Iterator[bytes]:
        """The chunks' data: what is buffered comes as one piece, given before any read
        that may wait (so each event is seen as soon as it arrives)."""
        connection = self._connection
        assert connection is not None
        pieces: list[bytes] = []
        while True:
            if connection.buffered:  # the chunks here whole, at once
                connection.whole_chunks(pieces)
            if pieces and not connection.has_line():
                yield b"".join(pieces)
                pieces = []
            size = _chunk_size(connection.line())
            if size == 0:
                break
            while size:
                if pieces and not connection.buffered:
                    yield b"".join(pieces)
                    pieces = []
                data = self._take(size)
                if not data:
                    raise http.client.IncompleteRead(b"".join(pieces), size)
                pieces.append(data)
                size -= len(data)
            if pieces and not connection.has_line():
                yield b"".join(pieces)
                pieces = []
            if connection.line():
                raise http.client.HTTPException("chunk data not followed by a line end")
        if pieces:
            yield b"".join(pieces)
        while connection.line():  # trailer fields, up to the blank line
            pass
        self._complete = True


def _chunk_size(line: bytes) -> int:
    text = line.split(b";", 1)[0].strip()
    try:
        size = int(text, 16)
    except ValueError:
        size = -1
    if size < 0 or not text.isalnum():
        raise http.client.HTTPException(f"invalid chunk size line {line[:40]!r}")
    return size


def _read_headers(connection: DirectConnection) -> tuple[dict[str, str], list[str]]:
    headers: dict[str, str] = {}
    set_cookies: list[str] = []
    last = ""
    whole = connection.head_lines()  # all buffered: no call per line
    lines = iter(whole) if whole is not None else None
    for _ in range(_MAX_HEADERS + 1):
        if lines is not None:
            text = next(lines, "")
        else:
            line = connection.line()
            text = line.decode("latin-1")
        if not text:
            return headers, set_cookies
        if text[0] in " \t" and last:  # obsolete line folding: part of the header before
            headers[last] += " " + text.strip()
            continue
        name, colon, value = text.partition(":")
        if not colon:
            raise http.client.HTTPException(f"a header line without a colon: {text[:40]!r}")
        last = name.strip().lower()
        value = value.strip()
        if last == "set-cookie":
            set_cookies.append(value)
        headers[last] = f"{headers[last]}, {value}" if last in headers else value
    raise http.client.HTTPException(f"got more than {_MAX_HEADERS} headers")


def _decoded(raw: Iterator[bytes], coding: str) -> Iterator[bytes]:
    decoder: Any = (
        urllib3.response.DeflateDecoder() if coding == "deflate" else urllib3.response.GzipDecoder()
    )
    for data in raw:
        if out := decoder.decompress(data):
            yield out
    if out := decoder.flush():
        yield out
