"""Random ids from a pool of the OS's randomness: one system call per 256 ids, not one each.

Every message, turn and run takes a random id (the form of ``uuid.uuid4().hex``), five
or more in a turn. ``os.urandom`` is a system call, and right after the process waited
(for a model, say) a system call costs tens of microseconds, not one: so the bytes come
from a pool that ``os.urandom`` fills 4 KiB at a time. They are the same bytes
``os.urandom`` gives, each used once; a forked child starts with an empty pool (the
parent's unused bytes are the parent's, or both would hand out the same ids).
"""

from __future__ import annotations

import os
import threading

__all__ = ["random_bytes", "uuid4_hex"]

_POOL_SIZE = 4096
_lock = threading.Lock()
_pool = b""
_at = 0


def random_bytes(n: int) -> bytes:
    """``n`` (at most ``_POOL_SIZE``) bytes of ``os.urandom``, taken from the pool."""
    global _pool, _at
    with _lock:
        at = _at
        if at + n > len(_pool):
            _pool, at = os.urandom(_POOL_SIZE), 0
        _at = at + n
        pool = _pool
    return pool[at : at + n]


def uuid4_hex() -> str:
    """``uuid.uuid4().hex``: 16 random bytes with the version 4 and variant bits set."""
    data = bytearray(random_bytes(16))
    data[6] = (data[6] & 0x0F) | 0x40
    data[8] = (data[8] & 0x3F) | 0x80
    return data.hex()


def _forget() -> None:
    """In a forked child: an empty pool and a new lock (another thread may have held it)."""
    global _lock, _pool, _at
    _lock = threading.Lock()
    _pool, _at = b"", 0


if hasattr(os, "register_at_fork"):  # not on Windows
    os.register_at_fork(after_in_child=_forget)
