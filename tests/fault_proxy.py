"""A TCP proxy on 127.0.0.1 that loses the reply to one chosen request (tests only).

``FaultProxy(host, port)`` forwards every connection to the real server. Armed with
``lose_reply_to(marker)``, the first request whose bytes hold ``marker`` is forwarded,
the server's reply is read (so the server did the work and sent its answer) and then
the connection is cut before a byte of that reply reaches the client — the connection
dropping right after a COMMIT or EVALSHA. ``blackout=True`` also cuts every other
connection and refuses new ones from then on (the server unreachable for a while);
``restore()`` ends it. ``drop_before(marker)`` cuts the connection instead of
forwarding the request (the server never saw it).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

__all__ = ["FaultProxy"]

#: PostgreSQL's ReadyForQuery message (idle): the end of the reply to a request.
PG_READY = b"Z\x00\x00\x00\x05I"


class _Pair:
    """One relayed connection: the client's socket and the server's."""

    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client = client
        self.server = server
        self.losing = False  # the reply now coming from the server is to be lost

    def cut(self) -> None:
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class FaultProxy:
    """Relays 127.0.0.1:``port`` (an ephemeral port) to ``host``:``target_port``."""

    def __init__(self, host: str, target_port: int, *, reply_end: bytes | None = None) -> None:
        self.target = (host, target_port)
        #: what ends the reply to lose (``None``: the first bytes of it)
        self.reply_end = reply_end
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: set[_Pair] = set()
        self._marker: bytes | None = None
        self._before = False
        self._blackout_after = False
        self._dark = False
        self._closed = False
        #: set once the chosen request went through (and its reply was lost) or was cut
        self.fired = threading.Event()
        threading.Thread(target=self._accept, daemon=True, name="fault-proxy").start()

    # -- the test's controls --------------------------------------------------------

    def lose_reply_to(self, marker: bytes, *, blackout: bool = False) -> None:
        with self._lock:
            self._marker, self._before, self._blackout_after = marker, False, blackout

    def drop_before(self, marker: bytes) -> None:
        with self._lock:
            self._marker, self._before, self._blackout_after = marker, True, False

    def restore(self) -> None:
        with self._lock:
            self._dark = False

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pairs = list(self._pairs)
        self._listener.close()
        for pair in pairs:
            pair.cut()

    # -- relaying -------------------------------------------------------------------

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                refuse = self._dark or self._closed
            if refuse:
                client.close()
                continue
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            pair = _Pair(client, server)
            with self._lock:
                self._pairs.add(pair)
            for relay in (self._upstream, self._downstream):
                threading.Thread(target=relay, args=(pair,), daemon=True).start()

    def _upstream(self, pair: _Pair) -> None:
        """Client to server, watching for the marked request."""

        def chosen(data: bytes) -> bool:
            with self._lock:
                if self._marker is None or self._marker not in data:
                    return False
                self._marker = None
                if not self._before:
                    pair.losing = True  # before the request goes on: its reply can't be first
                return True

        self._pump(pair.client, pair.server, pair, chosen)

    def _downstream(self, pair: _Pair) -> None:
        """Server to client; the reply to the marked request is read and lost."""
        held = b""

        def losing(data: bytes) -> bool:
            nonlocal held
            if not pair.losing:
                return False
            held += data
            return self.reply_end is None or self.reply_end in held

        self._pump(pair.server, pair.client, pair, losing, lose=True)

    def _pump(
        self,
        source: socket.socket,
        sink: socket.socket,
        pair: _Pair,
        watch: Callable[[bytes], bool],
        *,
        lose: bool = False,
    ) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if lose and pair.losing:
                    if watch(data):  # the whole reply came: cut before it goes on
                        self._fire(pair)
                        return
                    continue
                if not lose and watch(data) and not pair.losing:  # drop_before
                    self._fire(pair)
                    return
                sink.sendall(data)
        except OSError:
            pass
        with self._lock:
            self._pairs.discard(pair)
        pair.cut()

    def _fire(self, pair: _Pair) -> None:
        with self._lock:
            self._pairs.discard(pair)
            others: list[_Pair] = []
            if self._blackout_after:
                self._dark = True
                others = list(self._pairs)
                self._pairs.clear()
        pair.cut()
        for other in others:
            other.cut()
        self.fired.set()
