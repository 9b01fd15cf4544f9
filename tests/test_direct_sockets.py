"""The direct HTTP path's sockets: a plain socket blocks with its timeouts in the kernel
(``SO_SNDTIMEO``, ``SO_RCVTIMEO``) and sends a request's head and body in one
``sendmsg``; these tests hold it to what Python's own timeouts promised, against real
TCP servers on 127.0.0.1: a send the server never reads times out, a send a signal cuts
short still sends the whole body, a read timeout changed for bytes already buffered
touches nothing, and the socket's timeouts follow each request's."""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from helpers import needs

from lousho_sessions.abort import AbortSignal
from lousho_sessions.providers import _direct_connection
from lousho_sessions.providers._direct import DirectPool, DirectRoute
from lousho_sessions.providers._sockets import AbortScope


@pytest.fixture(autouse=True)
def _kernel_timeouts() -> None:
    needs(_direct_connection._KERNEL_TIMEOUTS, "kernel socket timeouts are used on Linux only")


#: more than loopback's socket buffers hold (a few MB each side), so a send must wait
BIG = 64 * 1024 * 1024


@contextmanager
def listener() -> Iterator[socket.socket]:
    server = socket.create_server(("127.0.0.1", 0))
    try:
        yield server
    finally:
        server.close()
        for pool in POOLS:
            pool.close()
        POOLS.clear()


#: the pools of the routes a test made, closed with its listener
POOLS: list[DirectPool] = []


def _main_thread_signals(call: str) -> None:
    """The test sends itself signals: it needs ``signal.<call>`` and the main thread."""
    needs(hasattr(signal, call), f"needs signal.{call}")
    needs(
        threading.current_thread() is threading.main_thread(),
        "signals are delivered to the main thread",
    )


def _route(server: socket.socket) -> DirectRoute:
    port = server.getsockname()[1]
    pool = DirectPool()
    POOLS.append(pool)
    return DirectRoute(f"http://127.0.0.1:{port}/v1/x", {}, {}, pool)


def _read_request(conn: socket.socket) -> int:
    """Read one request (head and ``Content-Length`` body); the body's length."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    got = len(body)
    while got < length:
        piece = conn.recv(1 << 20)
        if not piece:
            break
        got += len(piece)
    return got


def _answer(conn: socket.socket, text: bytes) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(text), text))


@contextmanager
def silent_server(answer: bytes = b"") -> Iterator[socket.socket]:
    """A listener whose one connection reads a request, writes ``answer`` (the start of a
    response, or nothing) and then stays silent until the test ends."""
    with listener() as server:
        release = threading.Event()

        def serve() -> None:
            conn, _ = server.accept()
            with conn:
                _read_request(conn)
                if answer:
                    conn.sendall(answer)
                release.wait(60)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            yield server
        finally:
            release.set()
            thread.join(10)


def test_a_send_the_server_never_reads_times_out_by_the_send_timeout() -> None:
    with listener() as server:
        accepted: list[socket.socket] = []
        done = threading.Event()

        def accept() -> None:
            conn, _ = server.accept()
            accepted.append(conn)  # kept open, never read
            done.wait(60)
            conn.close()

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        started = time.monotonic()
        try:
            with pytest.raises(TimeoutError):
                _route(server).post(b"x" * BIG, (0.3, 120.0), AbortScope())
        finally:
            done.set()
            thread.join(10)
        assert time.monotonic() - started < 60  # the send timeout, not the read one (120 s)


def test_a_send_a_signal_cuts_short_sends_the_rest_of_the_body() -> None:
    """A blocking ``sendmsg`` interrupted by a signal after part of the request returns
    the part it sent; the rest follows, and the server reads the whole body."""
    _main_thread_signals("pthread_kill")
    with listener() as server:
        reading = threading.Event()
        received: list[int] = []

        def serve() -> None:
            conn, _ = server.accept()
            with conn:
                reading.wait(60)  # the server reads once the signal has come
                received.append(_read_request(conn))
                _answer(conn, b"%d" % received[-1])

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        previous = signal.signal(signal.SIGUSR1, lambda *_: reading.set())
        main = threading.main_thread().ident
        assert main is not None
        kill = threading.Timer(0.3, signal.pthread_kill, args=(main, signal.SIGUSR1))
        kill.start()
        try:
            response = _route(server).post(b"y" * BIG, (60.0, 60.0), AbortScope())
            body = response.read()
            connection = response._connection
            assert connection is not None and connection.plain
            response.close()
        finally:
            kill.cancel()
            kill.join(10)
            signal.signal(signal.SIGUSR1, previous)
            reading.set()
            thread.join(30)
        assert received == [BIG]
        assert body == b"%d" % BIG


def test_a_timer_signal_handler_keeps_pythons_timeouts_and_the_read_timeout_fires() -> None:
    """A timer signal every 20 ms with a Python handler: each would start a kernel
    timeout over, so the request keeps Python's timeouts, and a silent server is cut off
    by the read timeout all the same."""
    _main_thread_signals("setitimer")
    with silent_server() as server:
        ticks: list[int] = []
        previous = signal.signal(signal.SIGALRM, lambda *_: ticks.append(1))
        signal.setitimer(signal.ITIMER_REAL, 0.02, 0.02)
        started = time.monotonic()
        try:
            with pytest.raises(TimeoutError):
                _route(server).post(b"{}", (5.0, 0.5), AbortScope())
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        assert time.monotonic() - started < 30
        assert ticks  # the timer did interrupt the wait


def test_a_read_timeout_set_for_buffered_bytes_costs_no_system_call() -> None:
    """The read timeout reaches the socket only when a read needs the socket; and a
    silent server then times the read out by the new timeout."""
    with silent_server(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"
    ) as server:
        response = _route(server).post(b"{}", (5.0, 30.0), AbortScope())
        connection = response._connection
        assert connection is not None and connection.plain
        chunks = response.chunks()
        assert next(chunks) == b"hello"
        assert connection._timeouts[1] == 30.0  # the head's read set it
        response.read_timeout(0.2)
        assert connection._timeouts[1] == 30.0  # not yet: nothing read since
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            next(chunks)
        assert connection._timeouts[1] == 0.2
        assert time.monotonic() - started < 20
        response.close()


def test_each_request_sets_the_sockets_timeouts_it_asks_for() -> None:
    """Two requests on one kept-alive connection with other timeouts: each request's
    are the socket's (set once each, kept while they stay the same)."""
    with listener() as server:

        def serve() -> None:
            conn, _ = server.accept()
            with conn:
                for _ in range(3):
                    _read_request(conn)
                    _answer(conn, b"ok")

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        route = _route(server)
        seen = []
        for timeout in ((5.0, 30.0), (5.0, 30.0), (2.5, 7.25)):
            response = route.post(b"{}", timeout, AbortScope())
            assert response.read() == b"ok"
            connection = response._connection
            assert connection is not None
            sock = connection.sock
            seen.append(
                (
                    _seconds(sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, 16)),
                    _seconds(sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, 16)),
                    sock.gettimeout(),
                )
            )
            response.close()
        thread.join(10)
        # the kernel keeps a timeout in its clock's ticks (a few ms)
        assert seen == [
            (5.0, 30.0, None),
            (5.0, 30.0, None),
            (2.5, pytest.approx(7.25, abs=0.02), None),
        ]


def test_a_timeval_is_never_zero_for_a_timeout() -> None:
    """Zero means "no timeout" to the kernel: a timeout that small is a microsecond."""
    assert _seconds(_direct_connection._timeval(0.0)) == pytest.approx(1e-6)
    assert _seconds(_direct_connection._timeval(-3.0)) == pytest.approx(1e-6)
    assert _seconds(_direct_connection._timeval(None)) == 0.0
    assert _seconds(_direct_connection._timeval(1.5)) == 1.5


def _seconds(raw: bytes) -> float:
    whole, micro = _direct_connection._TIMEVAL.unpack(raw)
    return float(whole + micro / 1_000_000)


def test_an_abort_wakes_a_read_blocked_in_the_kernel() -> None:
    """A blocking read (no ``poll`` before it) still ends at once when the request aborts:
    the abort shuts the socket down."""
    with silent_server() as server:
        scope = AbortScope()
        timer = threading.Timer(0.2, scope.abort, args=(AbortSignal(),))
        started = time.monotonic()
        timer.start()
        try:
            with pytest.raises(Exception) as caught:
                _route(server).post(b"{}", (5.0, 120.0), scope)
        finally:
            timer.cancel()
        assert time.monotonic() - started < 60  # not the read timeout
        assert not isinstance(caught.value, TimeoutError)
