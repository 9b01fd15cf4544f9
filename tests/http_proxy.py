"""A forwarding HTTP proxy on 127.0.0.1 for tests: ``CONNECT`` tunnels and absolute-form requests.

``ForwardProxy()`` listens on a free port (``url``). A ``CONNECT host:port`` is answered
``200`` and the bytes are relayed both ways (the client's TLS goes through untouched); a
request in absolute form (``POST http://host:port/path``) is relayed as it is to that
host, whose server reads the absolute form as HTTP/1.1 requires. The first line of each
connection is kept in ``lines``; ``Proxy-Authorization`` headers in ``auths``. Use it as
a context manager.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from urllib.parse import urlsplit

__all__ = ["ForwardProxy"]


class ForwardProxy:
    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.lines: list[str] = []
        self.auths: list[str] = []
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, name="test-http-proxy", daemon=True)

    def __enter__(self) -> ForwardProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self._thread.join(5)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self._sockets.append(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            data = client.recv(65536)
            if not data:
                return
            head += data
        first, _, _ = head.partition(b"\r\n")
        line = first.decode("latin-1")
        auth = [
            h.split(b":", 1)[1].strip().decode("latin-1")
            for h in head.split(b"\r\n")
            if h.lower().startswith(b"proxy-authorization:")
        ]
        with self._lock:
            self.lines.append(line)
            self.auths.extend(auth)
        method, target, _ = line.split(" ", 2)
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            upstream = socket.create_connection((host, int(port)))
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            rest = head.partition(b"\r\n\r\n")[2]
        else:
            parts = urlsplit(target)
            upstream = socket.create_connection((parts.hostname, parts.port or 80))
            rest = head
        with self._lock:
            self._sockets.append(upstream)
        if rest:
            upstream.sendall(rest)
        threading.Thread(target=_relay, args=(upstream, client), daemon=True).start()
        _relay(client, upstream)


def _relay(source: socket.socket, target: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            target.sendall(data)
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)
