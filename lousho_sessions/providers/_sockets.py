"""Abortable sockets: an abort shuts the request's socket down from the aborting thread.

Closing a requests response from another thread does not reliably wake a thread
blocked in ``recv()``; ``shutdown(SHUT_RDWR)`` on the socket does. The socket is
made deep inside urllib3, so our connection classes hand every socket they make
or reuse to the :class:`AbortScope` of the request running on this thread
(:func:`scoped`); :class:`AbortableAdapter` mounts them on a ``requests.Session``,
and ``_direct`` opens its connections with them.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

import requests.adapters
import urllib3
import urllib3.connection

from ..abort import AbortSignal

__all__ = [
    "AbortScope",
    "AbortableAdapter",
    "AbortableHTTPConnection",
    "AbortableHTTPSConnection",
    "scoped",
]


class AbortScope:
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

    @property
    def current(self) -> socket.socket | None:
        """The socket the request is using now (the last one made or reused)."""
        with self._lock:
            return self._sockets[-1] if self._sockets else None

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


@contextlib.contextmanager
def scoped(scope: AbortScope) -> Iterator[None]:
    """Sockets made or reused on this thread inside the block join ``scope``."""
    _current.scope = scope
    try:
        yield
    finally:
        _current.scope = None


def _register(sock: socket.socket | None) -> None:
    scope: AbortScope | None = getattr(_current, "scope", None)
    if scope is not None:
        scope.add(sock)


class AbortableHTTPConnection(urllib3.connection.HTTPConnection):
    """An urllib3 connection whose sockets join the abort scope of this thread's request."""

    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()
        _register(sock)
        return sock

    def request(self, *args: Any, **kwargs: Any) -> None:
        _register(self.sock)  # a reused keep-alive connection
        super().request(*args, **kwargs)


class AbortableHTTPSConnection(urllib3.connection.HTTPSConnection):
    """The same over TLS (the scope gets the plain socket, before the handshake)."""

    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()
        _register(sock)
        return sock

    def request(self, *args: Any, **kwargs: Any) -> None:
        _register(self.sock)
        super().request(*args, **kwargs)


class _AbortableHTTPPool(urllib3.HTTPConnectionPool):
    ConnectionCls = AbortableHTTPConnection


class _AbortableHTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = AbortableHTTPSConnection


_POOLS = {"http": _AbortableHTTPPool, "https": _AbortableHTTPSPool}


class AbortableAdapter(requests.adapters.HTTPAdapter):
    """An adapter whose connections report their sockets to the request's abort scope."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _POOLS

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if hasattr(manager, "pool_classes_by_scheme"):
            manager.pool_classes_by_scheme = _POOLS
        return manager
