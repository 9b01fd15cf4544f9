"""A private ``redis-server`` a test starts on a free port (never the shared one), for the
tests that misconfigure, fill or stop a server."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator

import pytest
import redis
from services_redis import require_redis

__all__ = ["private_redis"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def private_redis(*config: str) -> Iterator[str]:
    """A ``redis-server`` of its own with ``config`` (``"--maxmemory", "2mb"``, ...); its URL.

    Skipped without ``redis-server`` (failed under ``LOUSHO_REQUIRE_SERVICES=1``, as the
    shared server's tests are)."""
    binary = shutil.which("redis-server")
    if binary is None:
        require_redis()  # fails under LOUSHO_REQUIRE_SERVICES=1
        pytest.skip("redis-server is not installed")
    with tempfile.TemporaryDirectory() as where:
        for _ in range(5):  # the free port may be taken between looking and binding
            port = _free_port()
            server = subprocess.Popen(
                [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", where, *config],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            url = f"redis://127.0.0.1:{port}/0"
            client = redis.Redis.from_url(url, socket_timeout=1)
            deadline = time.monotonic() + 20
            while server.poll() is None and time.monotonic() < deadline:
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    threading.Event().wait(0.02)
            client.close()
            if server.poll() is None:
                break
        else:
            raise AssertionError("no private redis-server could start")
        try:
            yield url
        finally:
            server.terminate()
            server.wait(20)
