"""PostgresStore in one process: schema versions, the v1 fixture, leases and fences, pools.

The conformance kit and state machines run in tests/test_store_kit.py, the
multi-process tests in tests/test_postgres_processes.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import psycopg_pool
import pytest
from services_pg import fresh_schema, postgres_url

from lousho_sessions import (
    FunctionProvider,
    Lease,
    LeaseLostError,
    Message,
    SchemaVersionError,
    SessionBusyError,
    StoreClosedError,
    StoreError,
    create_agent,
)
from lousho_sessions import open_store as open_url
from lousho_sessions.postgres import SCHEMA_VERSION, PostgresStore, migration_sql

FIXTURE = Path(__file__).parent / "fixtures" / "postgres-v1.sql"
FIXTURE_V2 = Path(__file__).parent / "fixtures" / "postgres-v2.sql"
FIXTURE_V3 = Path(__file__).parent / "fixtures" / "postgres-v3.sql"
FIXTURE_V4 = Path(__file__).parent / "fixtures" / "postgres-v4.sql"
WAIT = 30.0


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A schema of this test's own on the server, dropped after it."""
    yield from fresh_schema()


def open_store(schema: str, **options: object) -> PostgresStore:
    options.setdefault("max_size", 2)
    return PostgresStore(postgres_url(), schema=schema, **options)  # type: ignore[arg-type]


@pytest.fixture
def pg(pg_schema: str) -> Iterator[PostgresStore]:
    with open_store(pg_schema, lease_ttl=1.0) as store:
        yield store


def sql(statement: str) -> list[tuple[object, ...]]:
    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        cur = conn.execute(statement)
        return cur.fetchall() if cur.description else []


def until(condition: object, what: str) -> None:
    """Poll ``condition()`` until true, failing after ``WAIT`` seconds."""
    deadline = time.monotonic() + WAIT
    pause = threading.Event()
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"not within {WAIT} s: {what}"
        pause.wait(0.02)


def turn(n: int) -> list[Message]:
    return [Message.user(f"q{n}"), Message.assistant(f"a{n}")]


# -- schema versions ----------------------------------------------------------------


def test_the_v1_fixture_pins_the_first_migration() -> None:
    """Editing migration 1 in place would break every database made with it: add one instead."""
    text = FIXTURE.read_text(encoding="utf-8").split("\n", 1)[1]  # past the header line
    version_1 = migration_sql("lousho_v1", since=0).split("\n", 1)[1].split("\n-- version 2")[0]
    assert text.startswith(version_1)


def test_the_v2_fixture_pins_the_second_migration() -> None:
    """Migration 2 (the acquire and append functions) is released: add a version 3 instead."""
    text = FIXTURE_V2.read_text(encoding="utf-8").split("\n", 1)[1]
    version_2 = migration_sql("lousho_v2", since=1).split("\n", 1)[1].split("\n-- version 3")[0]
    assert text.startswith(version_2)
    assert 'CREATE FUNCTION "lousho_v2".acquire(' in text
    assert 'CREATE FUNCTION "lousho_v2".append(' in text


def test_the_v3_fixture_pins_the_third_migration() -> None:
    """Migration 3 (the lease taken with a turn's first checkpoint) is released: add a version 4."""
    text = FIXTURE_V3.read_text(encoding="utf-8").split("\n", 1)[1]
    version_3 = migration_sql("lousho_v3", since=2).split("\n", 1)[1].split("\n-- version 4")[0]
    assert text.startswith(version_3)
    assert 'CREATE FUNCTION "lousho_v3".acquire_saving(' in text
    assert 'CREATE FUNCTION "lousho_v3".append_turn(' in text


def test_the_v4_fixture_pins_the_fourth_migration() -> None:
    """Migration 4 (a fork's parent and fork point) is released: add a version 5 instead."""
    text = FIXTURE_V4.read_text(encoding="utf-8").split("\n", 1)[1]
    version_4 = migration_sql("lousho_v4", since=3).split("\n", 1)[1].split("\n-- version 5")[0]
    assert text.startswith(version_4)
    assert "ADD COLUMN parent text" in text


def test_a_v4_database_with_state_migrates_to_v5_and_keeps_it(pg_schema: str) -> None:
    """A session's state as version 4 kept it (its ``<id>.state`` checkpoint row, written by
    ``save_state``) reads the same after migration 5; it is no pending turn any more (the
    lease comes with the turn's first checkpoint), and a commit writes the next version."""
    from lousho_sessions.serde import message_json
    from lousho_sessions.stores.base import CommitTurn, StartCheckpoint, TakeTurn

    sql(migration_sql(pg_schema).split("\n-- version 5")[0])
    hello = message_json(Message.user("hello from v4"))
    sql(
        f"INSERT INTO \"{pg_schema}\".sessions (id, length, revision) VALUES ('s1', 1, 7);"
        f"INSERT INTO \"{pg_schema}\".messages VALUES ('s1', 0, '{hello}');"
        f'INSERT INTO "{pg_schema}".checkpoints (turn_id, body) VALUES '
        f'(\'s1.state\', \'{{"state":{{"plan":"pro"}},"version":3}}\')'
    )
    with open_store(pg_schema) as store:
        assert store.applied_migrations == SCHEMA_VERSION - 4
        sessions, checkpoints = store.sessions, store.checkpoints
        assert sessions.load_state("s1", checkpoints) == ({"plan": "pro"}, 3)
        start = StartCheckpoint("s1.turn-1", lambda: {"format": "test"})
        request = TakeTurn(
            "s1", checkpoints=checkpoints, held_length=1, held_revision=7, checkpoint=start
        )
        taken = sessions.take_turn(request)
        with taken.lease:
            assert taken.no_checkpoints and taken.saved_checkpoint
            sessions.commit_turn(
                CommitTurn(
                    "s1",
                    turn(1),
                    1,
                    checkpoints,
                    ["s1.turn-1"],
                    taken.lease.fence,
                    state={"plan": "max"},
                )
            )
        assert sessions.load_state("s1", checkpoints) == ({"plan": "max"}, 4)
        assert checkpoints.list() == ["s1.state"]
        assert [m.text for m in sessions.load("s1") or []] == ["hello from v4", "q1", "a1"]
    assert sql(f'SELECT max(version) FROM "{pg_schema}".schema_version') == [(SCHEMA_VERSION,)]


def test_a_v5_database_whose_state_holds_u0000_migrates_to_v6_and_commits_and_forks(
    pg_schema: str,
) -> None:
    """Version 5 read a state record's version with ``->>`` and rebuilt it with ``json_each``,
    which refuse a ``\\u0000`` anywhere in the record: a state holding U+0000 (stored by
    ``save_state``, which v5 could write) failed the next commit with state and every fork.
    Migration 6 works on the record's text; other members, sealed or not, are kept as written."""
    from lousho_sessions.stores.base import CommitTurn, ForkRequest

    sql(migration_sql(pg_schema).split("\n-- version 6")[0])
    sql(
        f"INSERT INTO \"{pg_schema}\".sessions (id, length, revision) VALUES ('s1', 0, 7);"
        f'INSERT INTO "{pg_schema}".checkpoints (turn_id, body) VALUES '
        f'(\'s1.state\', \'{{"state": {{"\\u0000": "a\\u0000", "version": 9}}, '
        f'"version": 3 }}\')'
    )
    with open_store(pg_schema) as store:
        assert store.applied_migrations == SCHEMA_VERSION - 5
        sessions, checkpoints = store.sessions, store.checkpoints
        before = {"\x00": "a\x00", "version": 9}  # a "version" of the state's own is kept
        assert sessions.load_state("s1", checkpoints) == (before, 3)
        sessions.fork(ForkRequest("s1", "s2", checkpoints=checkpoints, state=True))
        assert sessions.load_state("s2", checkpoints) == (before, 1)
        sessions.commit_turn(CommitTurn("s1", turn(1), 0, checkpoints, state={"\x00": "b"}))
        assert sessions.load_state("s1", checkpoints) == ({"\x00": "b"}, 4)
        assert sessions.load_state("s2", checkpoints) == (before, 1)
    # the functions on edge cases of the record's text
    fn = f'"{pg_schema}"'
    assert sql(
        f"SELECT {fn}.state_versioned('{{}}', 2)::text, "
        f"{fn}.state_versioned('{{ \"version\" : 5 }}', 6)::text, "
        f'{fn}.state_versioned(\'{{"a":{{"version":1}}}}\', 2)::text, '
        f'{fn}.state_version(\'{{"a":{{"version":1}}}}\'), '
        f'{fn}.state_version(\'{{"a":1, "version" : 12 }} \')'
    ) == [('{"version":2}', '{"version":6}', '{"a":{"version":1},"version":2}', None, 12)]


def test_a_v2_database_migrates_to_v3_and_keeps_working(pg_schema: str) -> None:
    """A database at version 2 (the v1 fixture's data, then the v2 fixture's migration)."""
    sql(FIXTURE.read_text(encoding="utf-8").replace('"lousho_v1"', f'"{pg_schema}"'))
    sql(FIXTURE_V2.read_text(encoding="utf-8").replace('"lousho_v2"', f'"{pg_schema}"'))
    with open_store(pg_schema) as store:
        assert store.applied_migrations == SCHEMA_VERSION - 2
        assert (store.sessions.load("s1") or [])[0].text == "hello from v1"
        agent = create_agent(provider=FunctionProvider(lambda r: "v3 answer"), store=store)
        session = agent.session("s2")
        for n in range(2):  # the second turn's lease comes with its first checkpoint
            assert session.send(f"q{n}").text == "v3 answer"
        agent.close()
        assert len(store.sessions.load("s2") or []) == 4
    assert sql(f'SELECT max(version) FROM "{pg_schema}".schema_version') == [(SCHEMA_VERSION,)]


def test_a_v1_database_opens_and_keeps_working(pg_schema: str) -> None:
    sql(FIXTURE.read_text(encoding="utf-8").replace('"lousho_v1"', f'"{pg_schema}"'))
    with open_store(pg_schema) as store:
        assert store.applied_migrations == SCHEMA_VERSION - 1
        messages = store.sessions.load("s1") or []
        assert [m.role for m in messages] == ["user", "assistant"]
        assert messages[0].text == "hello from v1"
        assert messages[1].tool_calls[0].arguments == {"q": "x"}
        assert store.checkpoints.load("s1.turn-1") == {
            "version": 1,
            "step": "model",
            "future_field": [1, 2],
        }
        assert store.approvals.get("a1")["future_field"] == "kept"  # type: ignore[index]
        with store.sessions.turn_lock("s1", timeout=WAIT) as lease:
            assert lease.fence > 7  # after the fence the fixture's lease row holds
            store.sessions.append("s1", turn(2), 2, fence=lease.fence)
        with pytest.raises(LeaseLostError):
            store.sessions.append("s1", turn(3), 4, fence=7)
        assert store.approvals.resolve("a1", approved=True)["future_field"] == "kept"
        assert len(store.sessions.load("s1") or []) == 4


def test_a_schema_from_a_newer_release_is_refused(pg_schema: str) -> None:
    open_store(pg_schema).close()
    sql(f"INSERT INTO \"{pg_schema}\".schema_version (version, summary) VALUES (99, 'future')")
    with pytest.raises(SchemaVersionError, match="version 99"):
        open_store(pg_schema)
    with pytest.raises(SchemaVersionError, match="version 99"):
        open_store(pg_schema, migrate=False)


def test_migrate_false_needs_the_printed_sql(pg_schema: str) -> None:
    """Users who migrate with their own tools run ``migration_sql()``, then open with migrate=False."""
    with pytest.raises(SchemaVersionError, match="migration_sql"):
        open_store(pg_schema, migrate=False)
    sql(PostgresStore.migration_sql(pg_schema))
    with open_store(pg_schema, migrate=False) as store:
        store.sessions.append("s1", turn(1), 0)
        assert len(store.sessions.load("s1") or []) == 2
    with open_store(pg_schema) as store:
        assert store.applied_migrations == 0


def test_bad_arguments_are_refused_before_connecting() -> None:
    with pytest.raises(ValueError, match="schema name"):
        PostgresStore(postgres_url(), schema="Robert'); DROP TABLE x;--")
    with pytest.raises(ValueError, match="lease_ttl"):
        PostgresStore(postgres_url(), lease_ttl=0)
    with pytest.raises(TypeError, match="conninfo"):
        PostgresStore(5432)  # type: ignore[arg-type]


def test_an_unreachable_server_is_a_store_error_without_the_password() -> None:
    with pytest.raises(StoreError) as caught:
        PostgresStore("postgresql://u:sekrit@127.0.0.1:1/db?connect_timeout=2")
    assert "127.0.0.1:1/db" in str(caught.value)
    assert "sekrit" not in str(caught.value)


# -- leases and fences --------------------------------------------------------------


def test_the_heartbeat_keeps_a_lease_past_its_ttl(pg: PostgresStore) -> None:
    """A turn longer than the TTL (a slow model call) keeps its session."""
    with pg.sessions.turn_lock("s1", timeout=WAIT) as lease:
        (start,) = sql("SELECT now()")[0]
        until(lambda: sql(f"SELECT now() > '{start}'::timestamptz + interval '3 s'")[0][0], "3 s")
        with pytest.raises(SessionBusyError):
            pg.sessions.turn_lock("s1", timeout=0)
        assert not lease.lost
        pg.sessions.append("s1", turn(1), 0, fence=lease.fence)


def expire(store: PostgresStore, session_id: str) -> None:
    """What a long pause or a partition does to a lease: its row runs out, unrenewed."""
    sql(
        f"UPDATE \"{store.schema}\".leases SET expires_at = now() - interval '1 s' "
        f"WHERE session_id = '{session_id}'"
    )


def elsewhere(store: PostgresStore, session_id: str) -> Lease:
    """The session's lease, taken on another thread (as another worker would)."""
    taken: list[Lease] = []
    thread = threading.Thread(target=lambda: taken.append(store.turn_lock(session_id, timeout=0)))
    thread.start()
    thread.join(WAIT)
    return taken[0]


def test_a_lease_taken_over_refuses_every_write_of_its_turn(pg: PostgresStore) -> None:
    pg.sessions.save("s1", turn(1))
    pg.checkpoints.save("s1.turn-1", {"step": 1})
    old = pg.sessions.turn_lock("s1", timeout=WAIT)
    try:
        expire(pg, "s1")
        new = elsewhere(pg, "s1")  # another worker takes the session
        before = pg.sessions.revision("s1")
        with pytest.raises(LeaseLostError):
            pg.sessions.append("s1", turn(2), 2, fence=old.fence)
        with pytest.raises(LeaseLostError):  # no fence given: the thread's lease is used
            pg.sessions.append("s1", turn(2), 2)
        with pytest.raises(LeaseLostError):
            pg.sessions.save("s1", turn(9))
        with pytest.raises(LeaseLostError):
            pg.checkpoints.save("s1.turn-1", {"step": 2}, fence=old.fence)
        with pytest.raises(LeaseLostError):
            pg.checkpoints.delete("s1.turn-1", fence=old.fence)
        with pytest.raises(LeaseLostError):
            pg.approvals.create({"id": "a1", "session_id": "s1", "status": "pending"})
        assert pg.sessions.revision("s1") == before
        assert [m.text for m in pg.sessions.load("s1") or []] == ["q1", "a1"]
        assert pg.checkpoints.load("s1.turn-1") == {"step": 1}
        assert pg.approvals.get("a1") is None
        until(lambda: old.lost, "the old lease's heartbeat notices the takeover")
        assert not new.lost
        pg.sessions.append("s1", turn(2), 2, fence=new.fence)
        new.release()
    finally:
        old.release()  # releasing a lost lease frees nothing of the new holder's
    assert len(pg.sessions.load("s1") or []) == 4


def test_releasing_a_lost_lease_does_not_free_the_new_holder(pg: PostgresStore) -> None:
    old = pg.sessions.turn_lock("s1", timeout=WAIT)
    expire(pg, "s1")
    new = elsewhere(pg, "s1")
    old.release()
    with pytest.raises(SessionBusyError):
        pg.sessions.turn_lock("s1", timeout=0)
    new.release()


@pytest.mark.parametrize("notify", [True, False], ids=["listen", "poll"])
def test_a_waiter_gets_the_session_on_release(pg_schema: str, notify: bool) -> None:
    """Released with LISTEN/NOTIFY or found by polling with a backoff (PgBouncer)."""
    with open_store(pg_schema, lease_ttl=60.0, notify=notify) as store:
        first = store.sessions.turn_lock("s1", timeout=WAIT)
        got = threading.Event()
        fences: list[int] = []

        def waiter() -> None:
            with store.sessions.turn_lock("s1", timeout=WAIT) as lease:
                fences.append(lease.fence)
                got.set()

        thread = threading.Thread(target=waiter)
        thread.start()
        assert not got.wait(0.2)
        first.release()
        assert got.wait(WAIT)
        thread.join(WAIT)
        assert fences[0] > first.fence


def test_a_pool_of_yours_is_used_and_left_open(pg_schema: str) -> None:
    with psycopg_pool.ConnectionPool(
        postgres_url(), min_size=1, max_size=2, open=True, kwargs={"autocommit": False}
    ) as pool:
        with PostgresStore(pool, schema=pg_schema) as store:
            with store.sessions.turn_lock("s1", timeout=WAIT) as lease:
                store.sessions.append("s1", turn(1), 0, fence=lease.fence)
            store.approvals.create({"id": "a1", "session_id": "s1", "status": "pending"})
            assert store.approvals.resolve("a1", approved=False)["status"] == "denied"
            assert len(store.sessions.load("s1") or []) == 2
        with pool.connection() as conn:  # still open
            assert conn.execute("SELECT 1").fetchone() == (1,)


def test_no_connection_is_held_while_a_turn_holds_its_lease(pg_schema: str) -> None:
    """The lease is a row: a held turn leaves the pool's connections free."""
    with open_store(pg_schema, min_size=1, max_size=1, timeout=2.0) as store:
        leases = [store.sessions.turn_lock(f"s{n}", timeout=WAIT) for n in range(5)]
        for n, lease in enumerate(leases):
            store.sessions.append(f"s{n}", turn(n), 0, fence=lease.fence)
        for lease in leases:
            lease.release()
        assert store._pool.get_stats()["pool_size"] == 1


def test_pooled_connections_keep_no_session_state(pg_schema: str) -> None:
    """What PgBouncer's transaction mode needs: no prepared statement, advisory lock or
    setting outlives a statement (the release turns synchronous_commit off for its own
    transaction only)."""
    with open_store(pg_schema, min_size=1, max_size=1) as store:
        agent = create_agent(
            provider=FunctionProvider(lambda r: Message.assistant("ok")), store=store
        )
        session = agent.session("s1")
        for n in range(8):  # more than psycopg's default prepare_threshold (5)
            session.send(f"q{n}")
        agent.close()
        assert len(store.sessions.load("s1") or []) == 16
        default = sql("SHOW synchronous_commit")
        with store._pool.connection() as conn:  # the only one: every statement ran on it
            assert conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone() == (0,)
            locks = "SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'"
            assert conn.execute(locks).fetchone() == (0,)
            assert [conn.execute("SHOW synchronous_commit").fetchone()] == default


def test_prepare_true_prepares_the_statements_a_connection_repeats(pg_schema: str) -> None:
    with open_store(pg_schema, min_size=1, max_size=1, prepare=True) as store:
        agent = create_agent(
            provider=FunctionProvider(lambda r: Message.assistant("ok")), store=store
        )
        session = agent.session("s1")
        for n in range(4):
            session.send(f"q{n}")
        agent.close()
        assert len(store.sessions.load("s1") or []) == 8
        with store._pool.connection() as conn:  # the only one: every statement ran on it
            prepared = {
                row[0].split(".")[1].split("(")[0]
                for row in conn.execute("SELECT statement FROM pg_prepared_statements")
                if "acquire_saving(" in row[0] or "append_turn(" in row[0]
            }
        assert prepared == {"acquire_saving", "append_turn"}  # the turn's two statements
    url = postgres_url()
    url += ("&" if "?" in url else "?") + f"schema={pg_schema}&prepare=true"
    with open_url(url) as url_store:
        assert url_store.backend.prepare is True


def test_prepare_true_is_refused_for_a_pool_of_yours(pg_schema: str) -> None:
    pool = psycopg_pool.ConnectionPool(postgres_url(), min_size=1, max_size=1, open=True)
    with pool, pytest.raises(ValueError, match="prepare_threshold"):
        PostgresStore(pool, schema=pg_schema, prepare=True)


def test_a_closed_store_refuses_calls(pg: PostgresStore) -> None:
    pg.close()
    pg.close()
    with pytest.raises(StoreClosedError):
        pg.sessions.load("s1")
    with pytest.raises(StoreClosedError):
        pg.sessions.turn_lock("s1")


def test_prune_keeps_what_is_recent_and_pending(pg: PostgresStore) -> None:
    pg.sessions.save("s1", turn(1))
    pg.checkpoints.save("s1.turn-1", {"x": 1})
    pg.approvals.create({"id": "p", "session_id": "s1", "status": "pending"})
    pg.approvals.create({"id": "r", "session_id": "s1", "status": "pending"})
    pg.approvals.resolve("r", approved=True)
    assert pg.prune(3600) == type(pg.prune(3600))(0, 0, 0)
    result = pg.prune(0)
    assert (result.sessions, result.checkpoints, result.approvals) == (1, 1, 1)
    assert [r["id"] for r in pg.approvals.list()] == ["p"]


def test_claim_stale_skips_held_leases_and_rows_another_claimer_is_updating(
    pg: PostgresStore, pg_schema: str
) -> None:
    """A sweep's claim (issue 16): released and never-leased sessions are claimed with new
    fences; a live lease is left out; a row locked by another transaction is skipped
    (``FOR UPDATE SKIP LOCKED``) instead of waited for."""
    old = {}
    for id in ("a", "b", "c"):
        lease = pg.sessions.turn_lock(id)
        old[id] = lease.fence
        lease.release()  # leased once, released: claimable
    held = pg.sessions.turn_lock("held")
    with psycopg.connect(postgres_url()) as conn:  # another claimer, mid-transaction on "c"
        conn.execute(f'SELECT 1 FROM "{pg_schema}".leases WHERE session_id = %s FOR UPDATE', ("c",))
        claimed = pg.sessions.claim_stale(["a", "b", "c", "held", "never"])
        assert sorted(claimed) == ["a", "b", "never"]
        conn.rollback()
    try:
        assert claimed["a"].fence > old["a"] and claimed["b"].fence > old["b"]
        assert pg.sessions.turn_held("a") and not pg.sessions.turn_held("c")
        assert pg.sessions.claim_stale(["a", "b"]) == {}  # held by the first claim now
        claimed.update(pg.sessions.claim_stale(["c"]))  # unlocked again: claimable
        assert claimed["c"].fence > old["c"]
    finally:
        for lease in claimed.values():
            lease.release()
        held.release()
