"""RedisStore's turn commit that releases the lease in the same script (``commit_turn(release=)``).

On the real server, under a key prefix of this test's own (skipped without a server,
failing under ``LOUSHO_REQUIRE_SERVICES=1``; see tests/services_redis.py). Leases
and wake-up polls far longer than the test: only a release frees the session in time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from services_redis import drop_prefix, prefix_for, redis_url, require_redis
from storekit import WAIT

from lousho_sessions import FunctionProvider, LeaseLostError, Message, create_agent
from lousho_sessions.providers.base import ModelRequest
from lousho_sessions.redis import RedisStore
from lousho_sessions.stores.base import CommitTurn

LONG = 600.0


@pytest.fixture
def open_store(tmp_path: Path) -> Iterator[Callable[..., RedisStore]]:
    require_redis()
    made: list[RedisStore] = []

    def make(**options: Any) -> RedisStore:
        store = RedisStore(redis_url(), prefix=prefix_for(tmp_path), **options)
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()
    drop_prefix(prefix_for(tmp_path))


def test_the_lease_is_free_when_the_commit_returns(open_store: Callable[..., RedisStore]) -> None:
    store = open_store(lease_ttl=LONG, wake_poll=LONG)
    other = open_store(lease_ttl=LONG, wake_poll=LONG)
    lease = store.sessions.turn_lock("s")
    store.checkpoints.save("s.0", {"turn": 0}, fence=lease.fence)
    store.sessions.commit_turn(
        CommitTurn(
            "s",
            [Message.user("hi"), Message.assistant("hello")],
            0,
            checkpoints=store.checkpoints,
            delete=["s.0"],
            fence=lease.fence,
            release=lease,
        )
    )
    assert lease.lost
    assert not store.sessions.turn_held("s")
    assert store.checkpoints.load("s.0") is None
    assert [m.text for m in store.sessions.load("s") or []] == ["hi", "hello"]
    with other.sessions.turn_lock("s", timeout=0) as second:
        lease.release()  # already released by the commit: frees nothing
        assert not second.lost
        assert other.sessions.turn_held("s")


def test_a_commit_with_a_lost_lease_releases_nothing(
    open_store: Callable[..., RedisStore],
) -> None:
    store = open_store(lease_ttl=LONG, wake_poll=LONG)
    lease = store.sessions.turn_lock("s")
    newer = str(lease.fence + 10)
    store.client.hset(store.key("s", "lease"), mapping={"holder": "someone", "fence": newer})
    with pytest.raises(LeaseLostError):
        store.sessions.commit_turn(
            CommitTurn("s", [Message.user("late")], 0, fence=lease.fence, release=lease)
        )
    holder, fence = store.client.hmget(store.key("s", "lease"), ["holder", "fence"])
    assert (holder, fence) == (b"someone", newer.encode())
    assert store.sessions.load("s") is None


def test_a_refused_commit_keeps_the_lease_and_its_heartbeat(
    open_store: Callable[..., RedisStore],
) -> None:
    store = open_store(lease_ttl=0.3)
    other = open_store(lease_ttl=0.3)
    with store.sessions.turn_lock("s") as lease:
        with pytest.raises(Exception, match="expected 5"):
            store.sessions.commit_turn(
                CommitTurn("s", [Message.user("x")], 5, fence=lease.fence, release=lease)
            )
        assert not lease.lost
        with pytest.raises(Exception, match="held by another turn"):
            other.sessions.turn_lock("s", timeout=1.2)  # four lease lifetimes: still renewed
        assert not lease.lost
    with other.sessions.turn_lock("s", timeout=WAIT):
        pass


def test_a_session_turn_frees_its_lease_in_the_commit(
    open_store: Callable[..., RedisStore],
) -> None:
    store = open_store(lease_ttl=LONG, wake_poll=LONG)
    other = open_store(lease_ttl=LONG, wake_poll=LONG)
    releases: list[str] = []
    original = store.sessions.store.run

    def counting(name: str, id: str, *args: object, what: str) -> Any:
        if name == "RELEASE":
            releases.append(id)
        return original(name, id, *args, what=what)

    store.run = counting  # type: ignore[method-assign]
    agent = create_agent(provider=FunctionProvider(lambda r: "answer"), store=store)
    session = agent.session("s")
    for n in range(3):
        assert session.send(f"q{n}").text == "answer"
        with other.sessions.turn_lock("s", timeout=0):
            pass
    assert releases == []  # every turn's lease went with its commit
    assert len(store.sessions.load("s") or []) == 6
    assert store.client.hlen(store.key("s", "checkpoints")) == 0


def test_a_queued_second_turn_still_runs(open_store: Callable[..., RedisStore]) -> None:
    store = open_store(lease_ttl=LONG, wake_poll=LONG)
    other = open_store(lease_ttl=LONG, wake_poll=LONG)
    started, go = threading.Event(), threading.Event()
    seen: list[int] = []

    def model(request: ModelRequest) -> str:
        seen.append(len(request.messages))
        if len(seen) == 1:
            started.set()
            assert go.wait(WAIT)
        return f"answer {len(seen)}"

    agent = create_agent(provider=FunctionProvider(model), store=store)
    results: dict[str, str] = {}
    session = agent.session("s", turn_policy="queue")
    first = threading.Thread(target=lambda: results.update(a=session.send("a").text))
    first.start()
    assert started.wait(WAIT)
    second = threading.Thread(target=lambda: results.update(b=session.send("b").text))
    second.start()
    go.set()
    first.join(WAIT)
    second.join(WAIT)
    assert set(results) == {"a", "b"}
    stored = store.sessions.load("s") or []
    assert [m.role for m in stored] == ["user", "assistant"] * (len(stored) // 2)
    assert {"a", "b"} <= {m.text for m in stored}
    with other.sessions.turn_lock("s", timeout=0):
        pass
