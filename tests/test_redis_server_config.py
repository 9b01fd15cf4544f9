"""Redis servers configured against sessions: an evicting ``maxmemory-policy`` (a cache
Redis), a client ``socket_timeout`` shorter than the wake poll, a value over the server's
largest (issue 27 items 10 and 11). Each on a private ``redis-server``, never the shared one."""

from __future__ import annotations

import logging
import threading

import pytest
import redis
from private_redis import private_redis

from lousho_sessions import Message, StoreError, open_store
from lousho_sessions.redis import RedisStore


def test_an_evicting_policy_is_refused_on_first_use() -> None:
    with private_redis("--maxmemory", "8mb", "--maxmemory-policy", "allkeys-lru") as url:
        store = RedisStore(url, prefix="evict")
        try:
            with pytest.raises(StoreError, match="maxmemory-policy is 'allkeys-lru'") as caught:
                store.sessions.save("s1", [Message.user("hi")])
            assert "noeviction" in str(caught.value)
            with pytest.raises(StoreError, match="maxmemory-policy"):
                store.sessions.load("s1")  # still refused: nothing was written
        finally:
            store.close()
        check = redis.Redis.from_url(url)
        assert check.keys("evict:*") == []
        check.close()


def test_an_evicting_policy_with_eviction_warn_logs_and_works(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with private_redis("--maxmemory-policy", "volatile-lru") as url:
        with (
            caplog.at_level(logging.WARNING, "lousho_sessions.stores.redis"),
            open_store(f"{url}?prefix=warned&eviction=warn") as store,
        ):
            assert store.sessions is not None
            store.sessions.save("s1", [Message.user("hi")])
            store.sessions.save("s2", [Message.user("hi")])
            assert [m.text for m in store.sessions.load("s1") or []] == ["hi"]
        warned = [r for r in caplog.records if "volatile-lru" in r.getMessage()]
        assert len(warned) == 1  # once, not per call


def test_noeviction_opens_quietly(caplog: pytest.LogCaptureFixture) -> None:
    with private_redis("--maxmemory-policy", "noeviction") as url:
        with caplog.at_level(logging.WARNING, "lousho_sessions"), RedisStore(url) as store:
            store.sessions.save("s1", [Message.user("hi")])
            assert store.check_server() == "noeviction"
        assert not caplog.records


def test_doctor_fails_an_evicting_policy() -> None:
    from lousho_sessions.admin import main

    with private_redis("--maxmemory", "8mb", "--maxmemory-policy", "allkeys-random") as url:
        import contextlib
        import io
        import json

        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = main(["doctor", "--store", url, "--json"])
        assert code == 1
        checks = {c["check"]: c for c in json.loads(out.getvalue())}
        assert checks["eviction"]["status"] == "fail"
        assert "allkeys-random" in checks["eviction"]["detail"]


def test_a_socket_timeout_under_the_wake_poll_still_lets_a_turn_wait() -> None:
    """``socket_timeout=0.5`` with the default ``wake_poll=2``: each waiting ``BLPOP`` of 2 s
    timed out the socket, and every turn that had to wait failed. The wake poll is
    lowered under the socket timeout instead."""
    with private_redis() as url:
        store = RedisStore(f"{url}?socket_timeout=0.5", prefix="waits")
        try:
            assert store.wake_poll < 0.5
            first = store.turn_lock("s1")
            got = threading.Event()
            errors: list[BaseException] = []

            def second() -> None:
                try:
                    store.turn_lock("s1", timeout=30).release()
                    got.set()
                except BaseException as exc:
                    errors.append(exc)

            thread = threading.Thread(target=second)
            thread.start()
            # the waiter blocks in BLPOP for longer than the socket timeout before the release
            assert not got.wait(1.2), errors
            first.release()
            thread.join(30)
            assert got.is_set(), errors
        finally:
            store.close()


def test_a_value_over_the_servers_limit_is_refused_before_it_is_sent() -> None:
    """The server's largest value is ``proto-max-bulk-len`` (512 MB by default): set to
    1 MB here, so the test need not allocate 512 MB to show the check."""
    with private_redis("--proto-max-bulk-len", "1mb") as url, RedisStore(url) as store:
        store.sessions.save("s1", [Message.user("small")])
        big = Message.user("x" * (2 * 1024 * 1024))
        with pytest.raises(StoreError, match="over the largest Redis takes in one value") as e:
            store.sessions.append("s1", [big], 1)
        assert "1,048,576 bytes" in str(e.value) and "512 MB" in str(e.value)
        assert [m.text for m in store.sessions.load("s1") or []] == ["small"]
        with pytest.raises(StoreError, match="proto-max-bulk-len"):
            store.checkpoints.save("s1.turn-1", {"new": ["x" * (2 * 1024 * 1024)]})
