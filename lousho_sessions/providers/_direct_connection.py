"""One kept-alive connection of the direct HTTP path (``_direct``): its socket, what was
read from it and not used yet, and how it sends and reads.

A plain socket (no TLS, on Linux) blocks, its timeouts set in the kernel
(``SO_SNDTIMEO``, ``SO_RCVTIMEO``) once per value: a send or a read is then one system
call, where Python's own timeouts add a ``poll`` before each and an ``ioctl`` whenever
the timeout changes (twice a request). Right after the process waited for a model, each
system call costs it several microseconds of cold caches; a request's head and body also
go out in one ``sendmsg``. A TLS socket keeps Python's timeouts (``ssl`` would retry a
kernel timeout forever), set only when a read needs the socket; so does every socket
while Python code handles a timer signal (a signal makes Python read again, which would
start the kernel's timeout over).
"""

from __future__ import annotations

import http.client
import signal
import socket
import ssl
import struct
import sys
from typing import Any

from .._signals import getsignal

__all__ = ["DirectConnection"]

_MAX_LINE = 65536
_MAX_HEADERS = 100
_RECV = 65536
#: bodies up to this size go out with the head in one send (TLS; a plain socket sends
#: the two in one system call whatever their size)
_JOIN_BELOW = 65536
#: ``struct timeval`` for ``SO_SNDTIMEO``/``SO_RCVTIMEO``: two C longs on Linux
_TIMEVAL = struct.Struct("@ll")
#: where plain sockets block with kernel timeouts (``DirectConnection``)
_KERNEL_TIMEOUTS = sys.platform.startswith("linux") and _TIMEVAL.size == 16


#: signals a timer sends again and again (see ``DirectConnection.send``)
_TIMER_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGALRM", "SIGPROF", "SIGVTALRM") if hasattr(signal, name)
)


def _timer_handled() -> bool:
    """Whether Python code handles one of the timer signals (a handler other than the
    default or ignoring)."""
    return any(callable(getsignal(signum)) for signum in _TIMER_SIGNALS)


def _timeval(seconds: float | None) -> bytes:
    """``seconds`` as a ``struct timeval``; ``None`` (no timeout) as zero, which the kernel
    reads so, and any other value as at least a microsecond."""
    if seconds is None:
        return _TIMEVAL.pack(0, 0)
    whole = int(max(seconds, 0.0))
    micro = int((max(seconds, 0.0) - whole) * 1_000_000)
    return _TIMEVAL.pack(whole, micro if whole or micro else 1)


class DirectConnection:
    """One kept-alive connection: urllib3's connection (which made the socket and its TLS)
    and the bytes read from it that were not used yet (``buffer`` from ``at`` on).

    ``wait`` is the read timeout, set on the socket just before a read needs it (so a
    timeout changed for a read the buffer serves costs nothing). A plain socket (no TLS,
    on Linux) blocks, its timeouts set in the kernel (``SO_SNDTIMEO``, ``SO_RCVTIMEO``)
    once per value: a send or read is then one system call, where Python's own timeouts
    add a ``poll`` before each and an ``ioctl`` whenever the timeout changes (twice a
    request). An expired kernel timeout raises ``TimeoutError`` as Python's does. While
    Python code handles a timer signal, requests keep Python's timeouts (``send``).
    """

    __slots__ = ("_timeouts", "at", "buffer", "conn", "kernel", "plain", "sock", "wait")

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.sock = conn.sock
        self.buffer = b""
        self.at = 0
        self.wait: float | None = None
        #: whether the socket may keep its timeouts in the kernel (no TLS, Linux)
        self.kernel = _KERNEL_TIMEOUTS and not isinstance(conn.sock, ssl.SSLSocket)
        #: whether it does for the request now sent (``send`` decides, each request)
        self.plain = False
        #: the kernel's send and read timeouts of a plain socket, as last set
        self._timeouts: list[float | None] = [None, None]

    def send(self, head: bytes, body: bytes | memoryview, timeout: float) -> None:
        """Send ``head`` then ``body``; ``timeout`` bounds each wait for the peer to read.
        A peer that stopped reading (``BrokenPipeError``) may have answered why: its
        answer is read next, as urllib3 does.

        A process that handles a timer signal (``SIGALRM``, ``SIGPROF``, ``SIGVTALRM``: a
        sampling profiler, a watchdog) gets Python's timeouts for the request: a signal
        handled while a read waits makes Python read again, which starts a kernel timeout
        over (with timer signals more frequent than the timeout, a silent server would
        never time out) but not Python's, which counts from the first read."""
        self.plain = self.kernel and not _timer_handled()
        try:
            if self.plain:
                self._send_plain(head, body, timeout)
                return
            sock = self.sock
            if sock.gettimeout() != timeout:
                sock.settimeout(timeout)
            if len(body) < _JOIN_BELOW:
                sock.sendall(head + body)
            else:
                sock.sendall(head)
                sock.sendall(body)
        except BrokenPipeError:
            pass

    def _send_plain(self, head: bytes, body: bytes | memoryview, timeout: float) -> None:
        """Both in one ``sendmsg`` (the rest in more if it is cut short: a signal, a timeout)."""
        sock = self.sock
        if sock.gettimeout() is not None:  # blocking: the kernel's timeouts apply
            sock.settimeout(None)
        self._kernel_timeout(0, socket.SO_SNDTIMEO, timeout)
        try:
            sent = sock.sendmsg((head, body))
            if sent == len(head) + len(body):
                return
            rest: tuple[memoryview, ...] = (memoryview(head).cast("B"), memoryview(body).cast("B"))
            while rest:
                if sent >= len(rest[0]):
                    sent -= len(rest[0])
                    rest = rest[1:]
                    continue
                rest = (rest[0][sent:], *rest[1:])
                sent = sock.sendmsg(rest)
        except BlockingIOError:
            raise TimeoutError("timed out") from None

    def recv(self) -> bytes:
        """One read from the socket, within ``wait`` seconds."""
        sock, wait = self.sock, self.wait
        if not self.plain:
            if sock.gettimeout() != wait:
                sock.settimeout(wait)
            return sock.recv(_RECV)  # type: ignore[no-any-return]
        self._kernel_timeout(1, socket.SO_RCVTIMEO, wait)
        try:
            return sock.recv(_RECV)  # type: ignore[no-any-return]
        except BlockingIOError:
            raise TimeoutError("timed out") from None

    def _kernel_timeout(self, at: int, option: int, seconds: float | None) -> None:
        if self._timeouts[at] != seconds:
            self.sock.setsockopt(socket.SOL_SOCKET, option, _timeval(seconds))
            self._timeouts[at] = seconds

    def close(self) -> None:
        self.conn.close()

    @property
    def buffered(self) -> bool:
        return self.at < len(self.buffer)

    def has_line(self) -> bool:
        return self.buffer.find(b"\n", self.at) >= 0

    def line(self) -> bytes:
        """The next line, without its line end; EOF before it ends is ``IncompleteRead``."""
        while True:
            end = self.buffer.find(b"\n", self.at)
            if end >= 0:
                line, self.at = self.buffer[self.at : end], end + 1
                if len(line) > _MAX_LINE:
                    raise http.client.LineTooLong("header or chunk-size line")
                return line[:-1] if line.endswith(b"\r") else line
            rest = self.buffer[self.at :]
            if len(rest) > _MAX_LINE:
                raise http.client.LineTooLong("header or chunk-size line")
            data = self.recv()
            if not data:
                raise http.client.IncompleteRead(rest)
            self.buffer, self.at = rest + data, 0

    def head_lines(self) -> list[str] | None:
        """The header lines up to the blank line, decoded and consumed, when all of them are
        buffered and plainly framed (each ending in CRLF, none too long, not too many);
        ``None``: not here whole or not plain, nothing consumed (read them one by one)."""
        buffer, at = self.buffer, self.at
        if buffer.startswith(b"\r\n", at):
            self.at = at + 2
            return []
        end = buffer.find(b"\r\n\r\n", at)
        if end < 0 or end - at > _MAX_LINE:
            return None
        block = buffer[at:end]
        crlf = block.count(b"\r\n")
        if block.count(b"\n") != crlf or block.count(b"\r") != crlf or crlf >= _MAX_HEADERS:
            return None  # a bare LF or CR, or too many lines: each as ``line`` reads it
        self.at = end + 4
        return block.decode("latin-1").split("\r\n")

    def whole_chunks(self, pieces: list[bytes]) -> None:
        """Add to ``pieces`` the data of the chunks buffered whole (a plain size line, the
        data, CRLF), consuming them; stop before a chunk not all here, the last chunk
        (size 0) and anything ``DirectResponse._chunked`` must judge (extensions, spaces,
        a bad size or line end)."""
        buffer, at = self.buffer, self.at
        while True:
            eol = buffer.find(b"\r\n", at, at + 18)
            if eol <= at:
                break
            text = buffer[at:eol]
            if not text.isalnum():
                break
            try:
                size = int(text, 16)
            except ValueError:
                break
            start = eol + 2
            stop = start + size
            if size == 0 or buffer[stop : stop + 2] != b"\r\n":
                break
            pieces.append(buffer[start:stop])
            at = stop + 2
        self.at = at

    def take(self, limit: int) -> bytes:
        """At most ``limit`` bytes: those buffered, else what one read gives (b"" at EOF)."""
        if self.at < len(self.buffer):
            end = min(len(self.buffer), self.at + limit)
            data, self.at = self.buffer[self.at : end], end
            return data
        data = self.recv()
        if len(data) <= limit:
            return data
        self.buffer, self.at = data, limit
        return data[:limit]
