"""A turn's state is committed in the same write as its messages (issue 31 item 4): on SQLite
one transaction, on PostgreSQL one statement (``commit_turn`` of schema v5), on Redis one
script; a crash or a refused commit leaves neither. A session's state record is no pending
turn: a durable turn keeps its two round trips on a session that has state."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from helpers import WAIT, calls
from history_stores import KINDS, SHARED, cleanup, open_store, require
from services_pg import fresh_schema, postgres_url, schema_for
from services_redis import prefix_for, redis_url
from test_turn_commits import CountingPostgresStore, CountingRedisStore

from lousho_sessions import (
    FunctionProvider,
    Message,
    ScriptedProvider,
    StateTooLargeError,
    StoreConflictError,
    ToolContext,
    create_agent,
    tool,
)
from lousho_sessions.sqlite import SqliteStore
from lousho_sessions.stores.adapters import adapt_sessions, store_parts
from lousho_sessions.stores.base import CommitTurn, SaveState

HERE = Path(__file__).parent
#: The stores whose commit writes the state itself (the others keep the contract's default).
OWN_COMMIT = ("sqlite", "postgres", "redis")


def turn(n: int) -> list[Message]:
    return [Message.user(f"q{n}"), Message.assistant(f"a{n}")]


def child_env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }


@pytest.mark.parametrize("kind", SHARED)
def test_a_turn_killed_as_it_commits_leaves_neither_its_messages_nor_its_state(
    kind: str, tmp_path: Path
) -> None:
    """SIGKILL at the session store's ``commit_turn`` (the turn's messages and state in hand):
    nothing of the two is stored, the turn's checkpoint is; ``resume()`` commits both."""
    require(kind)
    try:
        child = subprocess.run(
            [sys.executable, str(HERE / "state_kill_child.py"), "commit", kind, str(tmp_path)],
            capture_output=True,
            text=True,
            env=child_env(),
            timeout=WAIT * 6,
        )
        assert child.returncode == -9 and "committing" in child.stdout, child.stderr
        store = open_store(kind, tmp_path)
        parts = store_parts(store)
        sessions = adapt_sessions(parts.sessions)
        assert sessions.load("s1") is None  # no message of the turn
        assert sessions.load_state("s1", parts.checkpoints) == ({}, 0)  # nor its state

        @tool
        def bump(ctx: ToolContext) -> str:
            """Count a visit (must not run again)."""
            raise AssertionError("the tool ran again")

        agent = create_agent(
            provider=ScriptedProvider([Message.assistant("done")]), tools=[bump], store=store
        )
        session = agent.session("s1")
        result = session.resume()
        assert result is not None and result.text == "done"
        assert dict(session.state) == {"visits": 1}
        assert [m.role for m in sessions.load("s1") or []] == [
            "user",
            "assistant",
            "tool",
            "assistant",
        ]
        agent.close()
        getattr(store, "close", lambda: None)()
    finally:
        cleanup(kind, tmp_path)


@pytest.fixture(params=OWN_COMMIT)
def own(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    require(request.param)
    store = open_store(request.param, tmp_path)
    yield store
    store.close()
    cleanup(request.param, tmp_path)


def test_a_refused_commit_leaves_the_state_as_it_was(own: Any) -> None:
    """Another writer appends while the turn's tool runs: the turn's commit is refused (a
    conflict), and the state its tool changed is not stored either."""
    other: Any = store_parts(own).sessions

    def remember(ctx: ToolContext) -> str:
        """Remember a city; meanwhile another writer adds to the transcript."""
        ctx.state["city"] = "Lyon"
        held = len(other.load("s1") or [])
        other.append("s1", [Message.user("from elsewhere")], held)
        return "noted"

    model = ScriptedProvider([calls(("remember", {})), Message.assistant("noted")])
    agent = create_agent(provider=model, tools=[tool(remember)], store=own)
    session = agent.session("s1")
    session.update_state(lambda s: s.update(city="Oslo"))
    with pytest.raises(StoreConflictError):
        session.send("I moved")
    assert dict(session.state) == {"city": "Oslo"}
    assert [m.text for m in other.load("s1") or []] == ["from elsewhere"]
    agent.close()


def test_a_commit_with_state_is_one_write_and_keeps_the_limit(own: Any) -> None:
    parts = store_parts(own)
    sessions: Any = parts.sessions
    checkpoints = parts.checkpoints
    sessions.save_state(SaveState("s1", {"n": 0}, 0, None, checkpoints))
    with pytest.raises(StateTooLargeError, match="session 's1'"):
        sessions.commit_turn(CommitTurn("s1", turn(1), 0, checkpoints, state={"x": "y" * 300_000}))
    assert sessions.load("s1") is None  # nothing written
    assert sessions.load_state("s1", checkpoints) == ({"n": 0}, 1)
    sessions.commit_turn(CommitTurn("s1", turn(1), 0, checkpoints, state={"n": 1}))
    sessions.commit_turn(CommitTurn("s1", turn(2), 2, checkpoints, state={"n": 2}))
    assert sessions.load_state("s1", checkpoints) == ({"n": 2}, 3)
    assert len(sessions.load("s1") or []) == 4


def test_a_commit_with_state_is_one_sqlite_transaction(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "a.db") as store:
        store.checkpoints.save("s1.turn-0", {"step": 1})
        statements: list[str] = []
        with store.connection() as conn:
            conn.set_trace_callback(statements.append)
        store.sessions.commit_turn(
            CommitTurn("s1", turn(1), 0, store.checkpoints, ["s1.turn-0"], state={"a": 1})
        )
        with store.connection() as conn:
            conn.set_trace_callback(None)
        assert [s for s in statements if s.split()[0] in ("BEGIN", "COMMIT")] == [
            "BEGIN IMMEDIATE",
            "COMMIT",
        ]
        assert store.sessions.load_state("s1", store.checkpoints) == ({"a": 1}, 1)
        assert store.checkpoints.list() == ["s1.state"]


def test_a_commit_with_state_is_one_postgres_statement() -> None:
    for schema in fresh_schema():
        store = CountingPostgresStore(postgres_url(), schema=schema, lease_ttl=600.0)
        try:
            before = store.statements
            store.sessions.commit_turn(
                CommitTurn("s1", turn(1), 0, store.checkpoints, state={"a": 1})
            )
            assert store.statements - before == 1
            assert store.sessions.load_state("s1", store.checkpoints) == ({"a": 1}, 1)
        finally:
            store.close()


def test_a_commit_with_state_is_one_redis_script(tmp_path: Path) -> None:
    require("redis")
    store = open_store("redis", tmp_path)
    counting = CountingRedisStore(store.client, prefix=store.prefix, lease_ttl=600.0)
    try:
        counting.sessions.commit_turn(
            CommitTurn("s1", turn(1), 0, counting.checkpoints, state={"a": 1})
        )
        assert counting.scripts == ["APPEND"]
        assert counting.sessions.load_state("s1", counting.checkpoints) == ({"a": 1}, 1)
    finally:
        counting.close()
        store.close()
        cleanup("redis", tmp_path)


def count_sqlite_transactions(store: SqliteStore, run: Any) -> int:
    statements: list[str] = []
    with store.connection() as conn:
        conn.set_trace_callback(statements.append)
    try:
        run()
    finally:
        with store.connection() as conn:
            conn.set_trace_callback(None)
    return sum(1 for s in statements if s.split()[0] == "COMMIT")


def durable_turns(store: Any, counted: Callable[[], int], n: int = 3) -> int:
    """The I/O ``counted()`` tells for ``n`` plain turns of a session that has state."""
    agent = create_agent(provider=FunctionProvider(lambda r: "answer"), store=store)
    session = agent.session("s1")
    session.send("first")  # reads the transcript
    session.update_state(lambda s: s.update(plan="pro"))
    session.send("second")
    before = counted()
    for i in range(n):
        assert session.send(f"q{i}").text == "answer"
    done = counted() - before
    agent.close()
    assert dict(session.state) == {"plan": "pro"}
    return done


def test_a_session_with_state_keeps_two_round_trips_a_turn(tmp_path: Path) -> None:
    """Its state record is not a checkpoint: the lease still comes with the turn's first
    checkpoint (PostgreSQL, Redis), and no turn is taken for pending (SQLite)."""
    with SqliteStore(tmp_path / "a.db") as sqlite:
        commits: list[str] = []

        def trace(statement: str) -> None:
            if statement.split()[0] == "COMMIT":
                commits.append(statement)

        with sqlite.connection() as conn:
            conn.set_trace_callback(trace)
        assert durable_turns(sqlite, lambda: len(commits)) == 2 * 3
    for schema in fresh_schema():
        pg = CountingPostgresStore(postgres_url(), schema=schema, lease_ttl=600.0)
        try:
            assert durable_turns(pg, partial(getattr, pg, "statements")) == 2 * 3
        finally:
            pg.close()
    require("redis")
    plain = open_store("redis", tmp_path)
    rs = CountingRedisStore(plain.client, prefix=plain.prefix, lease_ttl=600.0)
    try:
        assert durable_turns(rs, lambda: len(rs.scripts)) == 2 * 3
        assert rs.scripts[-6:] == ["ACQUIRE_SAVING", "APPEND"] * 3
    finally:
        rs.close()
        plain.close()
        cleanup("redis", tmp_path)


KEYS = {"k1": bytes(range(32))}
SECRET = "hunter2-swordfish"


def sealed_store(kind: str, path: Path) -> Any:
    """The store of ``kind`` under ``path``, encrypting with ``KEYS``."""
    if kind == "sqlite":
        return SqliteStore(path / "agent.db", encryption=KEYS)
    if kind == "postgres":
        from lousho_sessions.postgres import PostgresStore

        return PostgresStore(postgres_url(), schema=schema_for(path), max_size=2, encryption=KEYS)
    from lousho_sessions.redis import RedisStore

    return RedisStore(redis_url(), prefix=prefix_for(path), encryption=KEYS)


def stored_bytes(kind: str, store: Any, path: Path) -> bytes:
    """Everything the store keeps, as raw bytes."""
    if kind == "sqlite":
        return b"".join(p.read_bytes() for p in path.rglob("agent.db*") if p.is_file())
    if kind == "postgres":
        with store.transaction() as conn:
            rows = [
                store.run(
                    conn, f"SELECT string_agg({column}::text, ' ') FROM {{s}}.{table}"
                ).fetchone()[0]
                or ""
                for table, column in (("messages", "body"), ("checkpoints", "body"))
            ]
        return " ".join(rows).encode()
    values = []
    for key in store.client.scan_iter(match=f"{store.prefix}:*"):
        kind_of = store.client.type(key)
        if kind_of == b"hash":
            values += store.client.hvals(key)
        elif kind_of == b"list":
            values += store.client.lrange(key, 0, -1)
    return b" ".join(values)


@pytest.mark.parametrize("kind", OWN_COMMIT)
def test_state_stays_sealed_through_commits_and_forks(kind: str, tmp_path: Path) -> None:
    """A turn's state (written by the commit) and a fork's copy (written by the fork) are sealed
    at rest on an encrypting store, and open again: the fork's with the new session's key."""
    require(kind)
    store = sealed_store(kind, tmp_path)
    try:

        def remember(ctx: ToolContext) -> str:
            """Remember the secret."""
            ctx.state["secret"] = SECRET
            return "noted"

        model = ScriptedProvider([calls(("remember", {})), Message.assistant("noted")])
        agent = create_agent(provider=model, tools=[tool(remember)], store=store)
        session = agent.session("s1")
        session.send("keep this")
        fork = session.fork("s1-fork")
        assert dict(fork.state) == {"secret": SECRET}
        assert dict(session.state) == {"secret": SECRET}
        agent.close()
        raw = stored_bytes(kind, store, tmp_path)
        assert raw.count(b"lousho.sealed") >= 2  # what was read: sealed records
        assert SECRET.encode() not in raw
        assert store.checkpoints.load("s1-fork.state")["version"] == 1
    finally:
        store.close()
        cleanup(kind, tmp_path)


NUL_STATE = {"\x00": None, "k\x00": ["a\x00b", {"\x00\x00": "\x00"}]}


@pytest.mark.parametrize(
    ("kind", "sealed"),
    [*((kind, False) for kind in KINDS), *((kind, True) for kind in OWN_COMMIT)],
    ids=[*KINDS, *(f"{kind}-sealed" for kind in OWN_COMMIT)],
)
def test_state_holding_u0000_is_committed_changed_and_forked(
    kind: str, sealed: bool, tmp_path: Path
) -> None:
    """A U+0000 in state (a user typed it, a tool returned it) is kept like one in a message:
    PostgreSQL's schema v5 refused it in the commit's and the fork's state write, whose
    ``->>``/``json_each`` parse the record and cannot turn ``\\u0000`` into text."""
    require(kind)
    store = sealed_store(kind, tmp_path) if sealed else open_store(kind, tmp_path)
    try:

        def remember(ctx: ToolContext) -> str:
            """Remember what came in."""
            ctx.state["seen"] = ctx.state.get("seen", "") + "\x00"
            return "noted"

        model = ScriptedProvider(
            [calls(("remember", {})), Message.assistant("a"), calls(("remember", {})),
             Message.assistant("b")]
        )  # fmt: skip
        agent = create_agent(provider=model, tools=[tool(remember)], store=store)
        session = agent.session("s1")
        session.update_state(lambda s: s.update(NUL_STATE))
        session.send("one")  # the commit writes state over a record holding U+0000
        assert dict(session.state) == {**NUL_STATE, "seen": "\x00"}
        fork = session.fork("s1-fork")  # the fork copies it
        assert dict(fork.state) == {**NUL_STATE, "seen": "\x00"}
        fork.send("two")
        fork.update_state(lambda s: s.update(after="\x00"))
        assert dict(agent.session("s1-fork").state) == {
            **NUL_STATE, "seen": "\x00\x00", "after": "\x00"
        }  # fmt: skip
        assert dict(agent.session("s1").state) == {**NUL_STATE, "seen": "\x00"}
        parts = store_parts(store)
        sessions: Any = parts.sessions
        versions = [sessions.load_state(sid, parts.checkpoints)[1] for sid in ("s1", "s1-fork")]
        assert versions == [2, 3]
        agent.close()
    finally:
        getattr(store, "close", lambda: None)()
        cleanup(kind, tmp_path)
