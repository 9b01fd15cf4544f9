"""A real HTTP server on 127.0.0.1 that speaks the OpenAI and Anthropic wire formats.

Tests script its replies in order (:meth:`ProviderServer.reply`) from the
documented payloads in ``tests/fixtures/providers/`` and read back what the
provider sent (:attr:`ProviderServer.requests`: path, headers, JSON body, and
the monotonic time it arrived). Replies can stream normally, stall before
their headers or mid-stream until :attr:`ProviderServer.release` is set,
cut the connection mid-event, or drip a body one byte at a time. Use it as a context manager (or the
``provider_server`` fixture): leaving it releases stalled handlers and stops
the server.
"""

from __future__ import annotations

import json
import re
import socket
import ssl
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

import pytest
from wire_types import prepare, request_problem

FIXTURES = Path(__file__).parent / "fixtures" / "providers"

__all__ = [
    "FIXTURES",
    "DripReply",
    "JSONReply",
    "ProviderServer",
    "Recorded",
    "Reply",
    "Rules",
    "SSEReply",
    "StallReply",
    "provider_server",
    "sse_events",
]


def sse_events(kind: str, name: str) -> list[bytes]:
    """The event blocks of fixture ``<kind>/<name>.sse``, each ending with its blank line."""
    text = (FIXTURES / kind / f"{name}.sse").read_bytes()
    return [block + b"\n\n" for block in re.split(rb"\n\n+", text.strip(b"\n")) if block]


@dataclass
class SSEReply:
    """A ``text/event-stream`` reply sent one event per HTTP chunk.

    ``stall_after=n`` sends n events (n may be all of them), then waits for ``release``; ``cut_after=n``
    sends n events and half of the next, then drops the connection (or, with
    ``terminate=True``, ends the body cleanly there). ``crlf`` sends CRLF line
    ends; ``gzip`` compresses the body (flushed per event). For benchmarks: ``delay`` paces the events (seconds before each) and
    ``{stamp}`` in an event becomes ``time.perf_counter()`` just before it is sent.
    """

    events: list[bytes]
    stall_after: int | None = None
    cut_after: int | None = None
    terminate: bool = False
    crlf: bool = False
    gzip: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class JSONReply:
    """A JSON reply; ``{api_key}`` in the body becomes the key the request sent."""

    status: int
    body: str = "{}"
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def fixture(
        cls, kind: str, name: str, status: int, headers: Mapping[str, str] | None = None
    ) -> JSONReply:
        return cls(status, (FIXTURES / kind / f"{name}.json").read_text(), dict(headers or {}))


@dataclass
class DripReply:
    """A ``text/event-stream`` reply sent one byte per HTTP chunk, ``interval`` seconds apart.

    The pacing waits on the server's ``stopping`` event, so stopping the
    server ends a drip at once; after the last byte the body ends.
    """

    data: bytes
    interval: float = 0.01


@dataclass
class StallReply:
    """Read the request, send nothing until ``release`` is set (or the client leaves)."""


Reply = SSEReply | JSONReply | StallReply | DripReply


@dataclass
class Recorded:
    """One request the server got."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    time: float
    client_port: int


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: ProviderServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients that hang up mid-reply are expected here


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # each event goes out when written, as a real server sends it
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", errors="replace")
        headers = {k.lower(): v for k, v in self.headers.items()}
        recorded = Recorded(
            "POST", self.path, headers, body, time.monotonic(), self.client_address[1]
        )
        number = owner._record(recorded)
        refusal = owner._conformance(self.path, body)
        if owner.route:
            reply = owner.route(recorded)  # a route checks and answers in the API's words
        else:
            if refusal is None and owner.rules is not None:
                refusal = owner.rules.check(owner.requests[number - 1])
            reply = refusal or owner.next_reply()
            if refusal is None and owner.rules is not None:
                owner.rules.sent(reply)
        request_id = f"req_{number:04d}"
        if isinstance(reply, JSONReply):
            self._json(reply, headers, request_id)
        elif isinstance(reply, SSEReply):
            self._sse(reply, request_id)
        elif isinstance(reply, DripReply):
            self._drip(reply, request_id)
        else:
            owner.stalled.set()
            owner.release.wait(30)
            self.close_connection = True

    def _json(self, reply: JSONReply, headers: Mapping[str, str], request_id: str) -> None:
        key = (
            headers.get("x-api-key")
            or headers.get("x-goog-api-key")
            or headers.get("authorization", "").removeprefix("Bearer ")
        )
        data = reply.body.replace("{api_key}", key).encode("utf-8")
        self.send_response(reply.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-request-id", request_id)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _sse(self, reply: SSEReply, request_id: str) -> None:
        owner = self.server.owner
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-request-id", request_id)
        self.send_header("request-id", request_id)
        if reply.gzip:
            self.send_header("Content-Encoding", "gzip")
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.flush()
        packer = zlib.compressobj(wbits=31) if reply.gzip else None  # 31: gzip framing
        for number, event in enumerate(reply.events):
            if reply.crlf:
                event = event.replace(b"\n", b"\r\n")
            if number == reply.stall_after:
                owner.stalled.set()
                owner.release.wait(30)
                self.close_connection = True
                return
            if number == reply.cut_after:
                self._chunk(self._pack(packer, event[: len(event) // 2]))
                if reply.terminate:
                    self._chunk(b"")
                else:
                    self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            if reply.delay:
                # pacing for the latency benchmark (not synchronisation); ends early on stop()
                self.server.owner.stopping.wait(reply.delay)
            if b"{stamp}" in event:
                event = event.replace(b"{stamp}", b"%.9f" % time.perf_counter())
            self._chunk(self._pack(packer, event))
        if packer is not None:
            self._chunk(packer.flush())
        if reply.stall_after is not None and reply.stall_after >= len(reply.events):
            owner.stalled.set()  # every event sent, the body never ended
            owner.release.wait(30)
            self.close_connection = True
            return
        self._chunk(b"")

    def _drip(self, reply: DripReply, request_id: str) -> None:
        owner = self.server.owner
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-request-id", request_id)
        self.end_headers()
        self.wfile.flush()
        owner.dripping.set()
        for index in range(len(reply.data)):
            if owner.stopping.wait(reply.interval):  # pacing; ends at once on stop()
                break
            try:
                self._chunk(reply.data[index : index + 1])
            except OSError:  # the client gave up
                self.close_connection = True
                return
        self._chunk(b"")

    @staticmethod
    def _pack(packer: Any, data: bytes) -> bytes:
        if packer is None:
            return data
        packed: bytes = packer.compress(data) + packer.flush(zlib.Z_SYNC_FLUSH)
        return packed

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


class Rules(Protocol):
    """What a wire's API checks of a request: ``check`` answers an error reply or ``None``
    (then the next scripted reply goes out and ``sent`` is told it)."""

    def check(self, request: Recorded) -> Reply | None: ...

    def sent(self, reply: Reply) -> None: ...


class ProviderServer:
    """The server; ``url`` is its base URL (``http://127.0.0.1:<port>``).

    ``rules`` (e.g. ``anthropic_rules.AnthropicThinkingRules``) make it answer what the
    real API would refuse with the API's error instead of the next scripted reply.
    ``tls``: serve HTTPS with this context (``url`` is then ``https://``).
    """

    def __init__(self, rules: Rules | None = None, tls: ssl.SSLContext | None = None) -> None:
        self.rules = rules
        #: request bodies that do not match the vendor's published request type (every
        #: wire): each is answered 400 (by ``route`` when set), and leaving the server
        #: (``with``) fails the test that sent it
        self.wire_problems: list[str] = []
        self.requests: list[Recorded] = []
        self.release = threading.Event()  # set: stalled replies may finish
        self.stalled = threading.Event()  # set by a reply when it starts stalling
        self.received = threading.Event()  # set on every request
        self.dripping = threading.Event()  # set when a DripReply starts dripping
        self._replies: deque[Reply] = deque()
        #: when set, answers each request in place of the scripted order (it may call
        #: :meth:`next_reply`): a server that checks what it is sent, as a vendor's does
        self.route: Callable[[Recorded], Reply] | None = None
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        prepare()  # the request checks' imports, before any client waits on them
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self._scheme = "http"
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
            self._scheme = "https"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{self._scheme}://{host!s}:{port}"

    def reply(self, *replies: Reply) -> None:
        """Queue replies, one per coming request, in order."""
        with self._lock:
            self._replies.extend(replies)

    def next_reply(self) -> Reply:
        """The next scripted reply (a 500 when the test scripted none)."""
        with self._lock:
            if self._replies:
                return self._replies.popleft()
        return JSONReply(
            500, '{"error": {"message": "the test scripted no reply", "type": "test"}}'
        )

    def _conformance(self, path: str, body: Any) -> Reply | None:
        """A 400 for a request body that its vendor's published types refuse, else ``None``.

        Every wire is checked (tests/wire_types.py); the problem is kept in
        ``wire_problems``, which fails the test when the server is left.
        """
        problem = request_problem(path, body)
        if problem is None:
            return None
        with self._lock:
            self.wire_problems.append(f"POST {path}: {problem}")
        if "/v1/messages" in path:
            error = {
                "type": "error",
                "error": {"type": "invalid_request_error", "message": problem},
            }
        elif ":" in path.rsplit("/", 1)[-1]:  # Gemini's models/{model}:method
            error = {"error": {"code": 400, "message": problem, "status": "INVALID_ARGUMENT"}}
        else:
            error = {"error": {"message": problem, "type": "invalid_request_error"}}
        return JSONReply(400, json.dumps(error))

    def _record(self, recorded: Recorded) -> int:
        with self._lock:
            self.requests.append(recorded)
            number = len(self.requests)
        self.received.set()
        return number

    def start(self) -> ProviderServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def __enter__(self) -> ProviderServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, *exc_info: object) -> None:
        self.stop()
        if kind is None:
            assert not self.wire_problems, "\n".join(self.wire_problems)


@pytest.fixture
def provider_server() -> Iterator[ProviderServer]:
    """A running :class:`ProviderServer`, stopped after the test."""
    with ProviderServer() as server:
        yield server
