"""PostgresStore's turn commit that frees the lease in the same transaction
(``commit_turn(release=)``, the schema's ``append`` function with ``p_release``).

On the real server, in a schema of this test's own (skipped without a server,
failing under ``LOUSHO_REQUIRE_SERVICES=1``; see tests/services_pg.py). Leases far
longer than the test: only a release frees the session in time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from services_pg import fresh_schema, postgres_url
from storekit import WAIT

from lousho_sessions import FunctionProvider, LeaseLostError, Message, create_agent
from lousho_sessions.postgres import PostgresStore
from lousho_sessions.stores.base import CommitTurn, TakenTurn, TakeTurn

LONG = 600.0


@pytest.fixture
def open_store() -> Iterator[Callable[..., PostgresStore]]:
    made: list[PostgresStore] = []
    schemas = fresh_schema()
    schema = next(schemas)

    def make(**options: Any) -> PostgresStore:
        store = PostgresStore(postgres_url(), schema=schema, **options)
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()
    next(schemas, None)


def test_the_lease_is_free_when_the_commit_returns(
    open_store: Callable[..., PostgresStore],
) -> None:
    store = open_store(lease_ttl=LONG)
    other = open_store(lease_ttl=LONG)
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
        lease.release()  # already freed by the commit: frees nothing
        assert not second.lost
        assert other.sessions.turn_held("s")


def test_a_commit_with_a_lost_lease_frees_nothing(
    open_store: Callable[..., PostgresStore],
) -> None:
    store = open_store(lease_ttl=LONG)
    lease = store.sessions.turn_lock("s")
    store.fetch(
        "UPDATE {s}.leases SET fence = fence + 10, holder = 'someone' WHERE session_id = 's'"
    )
    with pytest.raises(LeaseLostError):
        store.sessions.commit_turn(
            CommitTurn(
                "s",
                [Message.user("late")],
                0,
                checkpoints=store.checkpoints,
                fence=lease.fence,
                release=lease,
            )
        )
    rows = store.fetch("SELECT holder, fence, expires_at IS NOT NULL FROM {s}.leases")
    assert rows == [("someone", lease.fence + 10, True)]
    assert store.sessions.load("s") is None


def test_a_refused_commit_keeps_the_lease_and_its_heartbeat(
    open_store: Callable[..., PostgresStore],
) -> None:
    store = open_store(lease_ttl=0.3)
    other = open_store(lease_ttl=0.3)
    with store.sessions.turn_lock("s") as lease:
        with pytest.raises(Exception, match="expected 5"):
            store.sessions.commit_turn(
                CommitTurn(
                    "s",
                    [Message.user("x")],
                    5,
                    checkpoints=store.checkpoints,
                    fence=lease.fence,
                    release=lease,
                )
            )
        assert not lease.lost
        with pytest.raises(Exception, match="held by another turn"):
            other.sessions.turn_lock("s", timeout=1.2)  # four lease lifetimes: still renewed
        assert not lease.lost
    with other.sessions.turn_lock("s", timeout=WAIT):
        pass


def test_a_session_turn_frees_its_lease_in_the_commit(
    open_store: Callable[..., PostgresStore],
) -> None:
    store = open_store(lease_ttl=LONG)
    other = open_store(lease_ttl=LONG)
    statements: list[str] = []
    original = store.fetch

    def recording(query: str, params: Any = None) -> list[tuple[Any, ...]]:
        statements.append(query)
        return original(query, params)

    store.fetch = recording  # type: ignore[method-assign]
    agent = create_agent(provider=FunctionProvider(lambda r: "answer"), store=store)
    session = agent.session("s")
    for n in range(3):
        assert session.send(f"q{n}").text == "answer"
        with other.sessions.turn_lock("s", timeout=0):
            pass
    agent.close()
    assert not [q for q in statements if ".release(" in q]  # each lease went with its commit
    assert len(store.sessions.load("s") or []) == 6
    assert store.fetch("SELECT count(*) FROM {s}.checkpoints") == [(0,)]


def test_the_lease_brings_the_revision_and_whether_a_turn_is_pending(
    open_store: Callable[..., PostgresStore],
) -> None:
    store = open_store(lease_ttl=LONG)

    def take() -> TakenTurn:
        return store.sessions.take_turn(TakeTurn("s", checkpoints=store.checkpoints))

    taken = take()
    with taken.lease as lease:
        assert taken.revision is None and taken.messages == []  # nothing stored yet
        assert taken.no_checkpoints
        store.sessions.append("s", [Message.user("hi")], 0, fence=lease.fence)
        store.checkpoints.save("s.turn-1", {"turn": 1}, fence=lease.fence)
    taken = take()
    with taken.lease as lease:
        assert taken.revision == store.sessions.revision("s")
        assert [m.text for m in taken.messages] == ["hi"] and taken.since is None
        assert not taken.no_checkpoints  # a checkpoint of "s": look it up
        store.checkpoints.delete("s.turn-1", fence=lease.fence)
        store.checkpoints.save("st.turn-0", {"turn": 0})  # another session's
    taken = take()
    with taken.lease:
        assert taken.no_checkpoints
