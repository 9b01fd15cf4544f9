"""A TCP forwarder on 127.0.0.1 that a test can freeze: a hung server, seen from the client.

``FreezableProxy(port)`` listens on a free port and forwards each connection to
``127.0.0.1:port``. ``freeze()`` stops forwarding in both directions while keeping
every socket open (as a stopped server process, or a proxy or load balancer that
stopped forwarding: the kernel still acknowledges, nothing answers), new
connections included; ``freeze_existing()`` only the connections open now (a load
balancer that lost their flows); ``thaw()`` forwards again, ``cut()`` closes every
connection (a restart, an idle timeout).
Only the test's own connections go through it; the shared server is untouched.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading

__all__ = ["FreezableProxy"]


class FreezableProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self._target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._flowing = threading.Event()
        self._flowing.set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._flows: list[threading.Event] = []  # per connection: set while it forwards
        self._thread = threading.Thread(target=self._accept, name="test-proxy", daemon=True)
        self._thread.start()

    def freeze(self) -> None:
        self._flowing.clear()
        self.freeze_existing()

    def freeze_existing(self) -> None:
        with self._lock:
            for flowing in self._flows:
                flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()
        with self._lock:
            for flowing in self._flows:
                flowing.set()

    def cut(self) -> None:
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for a, b in pairs:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._stop.set()
        self.thaw()
        self.cut()
        with contextlib.suppress(OSError):
            self._listener.close()
        self._thread.join(5)

    def _accept(self) -> None:
        self._listener.settimeout(0.05)  # to see ``close()``: closing does not wake accept()
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            try:
                server = socket.create_connection(self._target)
            except OSError:
                client.close()
                continue
            flowing = threading.Event()
            if self._flowing.is_set():
                flowing.set()
            with self._lock:
                self._pairs.append((client, server))
                self._flows.append(flowing)
            threading.Thread(target=self._pump, args=(client, server, flowing), daemon=True).start()

    def _pump(self, client: socket.socket, server: socket.socket, flowing: threading.Event) -> None:
        peers = {client: server, server: client}
        try:
            while not self._stop.is_set():
                readable, _, _ = select.select(list(peers), [], [], 0.05)
                for sock in readable:
                    while not flowing.wait(0.05):  # frozen: hold the bytes, keep the sockets
                        if self._stop.is_set():
                            return
                    data = sock.recv(65536)
                    if not data:
                        return
                    peers[sock].sendall(data)
        except OSError:
            return
        finally:
            for s in (client, server):
                with contextlib.suppress(OSError):
                    s.close()
