"""The Redis server the Redis tests use: where it is, and skipping (or failing) without it.

``LOUSHO_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``) names the server. When
it cannot be reached the tests skip, saying how to run them, unless
``LOUSHO_REQUIRE_SERVICES=1`` (set by ``.ci/run``): then they fail. Each test
works under a key prefix of its own (``prefix_for(tmp_path)``, the same in every
process given the same path), whose keys ``drop_prefix`` deletes afterwards.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

import redis
from helpers import skip_or_fail

DEFAULT_URL = "redis://127.0.0.1:6379/0"

__all__ = ["DEFAULT_URL", "drop_prefix", "prefix_for", "redis_url", "require_redis"]


def redis_url() -> str:
    """The server's URL: ``LOUSHO_REDIS_URL`` or the default."""
    return os.environ.get("LOUSHO_REDIS_URL") or DEFAULT_URL


@functools.cache
def _unreachable() -> str | None:
    """Why the server cannot be reached, or ``None`` (checked once per process)."""
    try:
        with redis.Redis.from_url(redis_url(), socket_connect_timeout=3) as client:
            client.ping()
    except redis.RedisError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def require_redis() -> str:
    """The URL of a reachable server; skip (fail with ``LOUSHO_REQUIRE_SERVICES=1``) otherwise."""
    problem = _unreachable()
    if problem is None:
        return redis_url()
    message = (
        f"Redis at {redis_url()} is unreachable ({problem}). To run these tests start Redis 6+ "
        "or point LOUSHO_REDIS_URL at one, e.g. "
        "LOUSHO_REDIS_URL=redis://127.0.0.1:6379/0 make test"
    )
    skip_or_fail(message)


def prefix_for(path: Path | str) -> str:
    """A key prefix derived from ``path`` (so another process finds the same one)."""
    return "lousho-test-" + hashlib.sha1(str(path).encode()).hexdigest()[:16]


def drop_prefix(prefix: str) -> int:
    """Delete every key under ``prefix`` (``SCAN``, then ``UNLINK``); how many there were."""
    deleted = 0
    with redis.Redis.from_url(redis_url()) as client:
        batch = []
        for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            batch.append(key)
            if len(batch) >= 500:
                deleted += client.unlink(*batch)
                batch = []
        if batch:
            deleted += client.unlink(*batch)
    return deleted
