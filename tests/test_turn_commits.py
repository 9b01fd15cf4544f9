"""What keeps a PostgreSQL or Redis turn to few round trips, without giving up a guarantee.

- A turn's commit (``commit_turn``) is one statement / one script: the
  append and the deletion of the turn's checkpoints land together or not at all.
- One heartbeat thread per store renews every lease it holds (no thread per turn),
  and a release waits for a renewal in progress, so no renewal revives a freed lease.
- Redis hands the session's revision out with the lease (``TakenTurn.revision``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from services_pg import fresh_schema, postgres_url
from services_redis import drop_prefix, prefix_for, redis_url, require_redis

from lousho_sessions import (
    FunctionProvider,
    LeaseLostError,
    Message,
    StoreConflictError,
    create_agent,
)
from lousho_sessions.postgres import PostgresStore
from lousho_sessions.redis import RedisStore
from lousho_sessions.stores._heartbeat import Heartbeat
from lousho_sessions.stores.base import CommitTurn, TakeTurn

WAIT = 30.0


def turn(n: int) -> list[Message]:
    return [Message.user(f"q{n}"), Message.assistant(f"a{n}")]


def until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    pause = threading.Event()
    while not condition():
        assert time.monotonic() < deadline, f"not within {WAIT} s: {what}"
        pause.wait(0.02)


class CountingPostgresStore(PostgresStore):
    """Counts the statements the store sends (``fetch`` and ``call`` are where each one goes)."""

    statements = 0

    def fetch(self, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        self.statements += 1
        return super().fetch(query, params)

    def call(self, query: str, params: Sequence[str | None]) -> list[str | None]:
        self.statements += 1
        return super().call(query, params)


@pytest.fixture
def pg() -> Iterator[CountingPostgresStore]:
    for schema in fresh_schema():
        store = CountingPostgresStore(postgres_url(), schema=schema, max_size=2, lease_ttl=1.0)
        yield store
        store.close()


class CountingRedisStore(RedisStore):
    """Records the name of every script it runs, in order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.scripts: list[str] = []

    def run(self, name: str, id: str, *args: object, what: str) -> Any:
        self.scripts.append(name)
        return super().run(name, id, *args, what=what)


@pytest.fixture
def rs(tmp_path: Path) -> Iterator[CountingRedisStore]:
    require_redis()
    store = CountingRedisStore(redis_url(), prefix=prefix_for(tmp_path), lease_ttl=1.0)
    yield store
    store.close()
    drop_prefix(prefix_for(tmp_path))


@pytest.mark.parametrize("kind", ["postgres", "redis"])
def test_a_commit_appends_and_deletes_the_checkpoints_together(
    kind: str, request: pytest.FixtureRequest
) -> None:
    store: PostgresStore | RedisStore = request.getfixturevalue(
        "pg" if kind == "postgres" else "rs"
    )
    store.checkpoints.save("s1.0", {"step": 1})
    store.checkpoints.save("s1.0-r1-1", {"step": 1})
    store.checkpoints.save("s2.0", {"other": "session"})
    first = turn(1)
    revision = store.sessions.commit_turn(
        CommitTurn("s1", first, 0, checkpoints=store.checkpoints, delete=["s1.0-r1-1", "s1.0"])
    )
    assert revision == store.sessions.revision("s1")
    assert store.sessions.load("s1") == first
    assert store.checkpoints.list() == ["s2.0"]
    store.checkpoints.save("s1.2", {"step": 1})
    with pytest.raises(StoreConflictError):  # refused: nothing deleted, nothing appended
        store.sessions.commit_turn(
            CommitTurn("s1", turn(2), 0, checkpoints=store.checkpoints, delete=["s1.2"])
        )
    assert store.checkpoints.list() == ["s1.2", "s2.0"]
    with store.sessions.turn_lock("s1") as old:
        pass
    with store.sessions.turn_lock("s1"), pytest.raises(LeaseLostError):
        # a stale fence: nothing deleted, nothing appended
        store.sessions.commit_turn(
            CommitTurn(
                "s1", turn(2), 2, checkpoints=store.checkpoints, delete=["s1.2"], fence=old.fence
            )
        )
    assert store.checkpoints.list() == ["s1.2", "s2.0"]
    assert store.sessions.load("s1") == first


def test_a_postgres_commit_is_one_statement(pg: CountingPostgresStore) -> None:
    pg.checkpoints.save("s1.0", {"step": 1})
    pg.checkpoints.save("s1.0-r1-1", {"step": 1})
    before = pg.statements
    pg.sessions.commit_turn(
        CommitTurn("s1", turn(1), 0, checkpoints=pg.checkpoints, delete=["s1.0-r1-1", "s1.0"])
    )
    assert pg.statements - before == 1
    assert pg.checkpoints.list() == []


def test_a_durable_postgres_turn_is_two_statements() -> None:
    """Once the session read its transcript: the lease taken with the turn's first checkpoint
    (``acquire_saving``), then the commit that frees it (``append_turn``)."""
    for schema in fresh_schema():
        # a lease far longer than the test: no renewal is counted
        store = CountingPostgresStore(postgres_url(), schema=schema, lease_ttl=600.0)
        try:
            agent = create_agent(provider=FunctionProvider(lambda r: "answer"), store=store)
            session = agent.session("s1")
            session.send("first")  # reads the transcript
            before = store.statements
            for n in range(3):
                assert session.send(f"q{n}").text == "answer"
            agent.close()
            assert store.statements - before == 2 * 3
            assert len(store.sessions.load("s1") or []) == 8
            assert store.checkpoints.list() == []
        finally:
            store.close()


def test_a_store_that_saves_no_start_gets_no_turn_built_before_its_lease(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a store that declares ``saves_start_checkpoint`` is offered the turn's first
    checkpoint; on a file store (it saves none with the lease) a turn builds its state once."""
    from lousho_sessions.engine._turn import TurnState
    from lousho_sessions.stores.files import file_store

    built = 0
    start = TurnState.start

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal built
        built += 1
        return start(*args, **kwargs)

    monkeypatch.setattr(TurnState, "start", counting)
    store = file_store(tmp_path / "a")
    agent = create_agent(provider=FunctionProvider(lambda r: "answer"), store=store)
    session = agent.session("s1")
    session.send("first")  # reads the transcript
    built = 0
    for n in range(3):
        assert session.send(f"q{n}").text == "answer"
    agent.close()
    assert built == 3


def heartbeat_threads(prefix: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(prefix)]


@pytest.mark.parametrize("kind", ["postgres", "redis"])
def test_one_heartbeat_thread_renews_every_lease_of_a_store(
    kind: str, request: pytest.FixtureRequest
) -> None:
    store: PostgresStore | RedisStore = request.getfixturevalue(
        "pg" if kind == "postgres" else "rs"
    )
    name = f"lousho-{kind}-heartbeat"
    before = len(heartbeat_threads(name))
    leases = [store.sessions.turn_lock(f"s{n}") for n in range(4)]
    assert len(heartbeat_threads(name)) == before + 1
    start = time.monotonic()
    # held for three times the lease's ttl: only renewals keep them
    until(lambda: time.monotonic() - start > 3.0, "three lease ttls")
    assert [lease.lost for lease in leases] == [False] * 4
    for lease in leases:
        with pytest.raises(Exception, match="held by another turn"):
            store.sessions.turn_lock(lease.session_id, timeout=0)
        lease.release()
    store.close()
    until(lambda: len(heartbeat_threads(name)) == before, "the heartbeat thread ends")


def test_a_renewal_after_the_release_does_not_revive_the_lease(pg: PostgresStore) -> None:
    lease = pg.sessions.turn_lock("s1")
    lease.release()
    assert lease._beat() is False  # type: ignore[attr-defined]  # as a late renewal would
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        row = conn.execute(
            f'SELECT expires_at FROM "{pg.schema}".leases WHERE session_id = %s', ("s1",)
        ).fetchone()
    assert row == (None,)
    with pg.sessions.turn_lock("s1", timeout=0):
        pass


def test_a_release_waits_for_the_renewal_in_progress() -> None:
    heartbeat = Heartbeat("lousho-test-heartbeat")
    started, go_on, removed = threading.Event(), threading.Event(), threading.Event()
    beats: list[int] = []

    def beat() -> bool:
        beats.append(1)
        started.set()
        assert go_on.wait(WAIT)
        return True

    entry = heartbeat.add(beat, 0.01)
    assert started.wait(WAIT)

    def remove() -> None:
        heartbeat.remove(entry)
        removed.set()

    remover = threading.Thread(target=remove)
    remover.start()
    assert not removed.wait(0.2)  # the beat is still running: remove() waits for it
    go_on.set()
    assert removed.wait(WAIT)
    remover.join()
    count = len(beats)
    done = threading.Event()

    def mark() -> bool:
        done.set()
        return True

    extra = heartbeat.add(mark, 0.01)  # a later entry runs; the removed one does not
    assert done.wait(WAIT)
    heartbeat.remove(extra)
    assert len(beats) == count
    heartbeat.close()


def test_a_beat_that_says_stop_is_dropped() -> None:
    heartbeat = Heartbeat("lousho-test-heartbeat")
    calls: list[int] = []
    stopped = threading.Event()

    def once() -> bool:
        calls.append(1)
        stopped.set()
        return False

    heartbeat.add(once, 0.01)
    assert stopped.wait(WAIT)
    done = threading.Event()

    def mark() -> bool:
        done.set()
        return True

    heartbeat.add(mark, 0.01)
    assert done.wait(WAIT)
    assert calls == [1]
    heartbeat.close()


def test_redis_hands_out_the_revision_with_the_lease(rs: CountingRedisStore) -> None:
    taken = rs.sessions.take_turn(TakeTurn("new"))
    with taken.lease:
        assert taken.revision is None
    rs.sessions.save("s1", turn(1))
    rs.scripts.clear()
    taken = rs.sessions.take_turn(TakeTurn("s1", held_length=0, held_revision="old"))
    with taken.lease:
        assert taken.revision == rs.sessions.revision("s1")
        assert [m.text for m in taken.messages] == ["q1", "a1"] and taken.since is None
    assert rs.scripts[:2] == ["ACQUIRE", "LOAD"]  # the revision came with the lease


def test_an_entry_due_sooner_wakes_the_sleeping_heartbeat() -> None:
    heartbeat = Heartbeat("lousho-test-heartbeat")
    heartbeat.add(lambda: True, 3600.0)  # the thread now sleeps for an hour
    beaten = threading.Event()

    def mark() -> bool:
        beaten.set()
        return True

    heartbeat.add(mark, 0.01)
    assert beaten.wait(WAIT)
    heartbeat.close()
