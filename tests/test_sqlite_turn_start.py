"""The one read that starts a turn on a SqliteStore session (``SqliteSessionStore.take_turn``),
and the reading ahead a turn does while it waits in line for the lease."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import lock_tickets, until

from lousho_sessions import (
    FunctionProvider,
    MemorySessionStore,
    ModelRequest,
    ToolCall,
    create_agent,
    tool,
)
from lousho_sessions.errors import StoreError
from lousho_sessions.messages import Message
from lousho_sessions.sqlite import SqliteStore
from lousho_sessions.stores import _lockfile
from lousho_sessions.stores._turn_requests import ReadAhead
from lousho_sessions.stores.base import StartCheckpoint, TakenTurn, TakeTurn
from lousho_sessions.stores.memory import MemoryCheckpointStore

WAIT = 30.0


@tool
def echo(v: str) -> str:
    """Say ``v`` back."""
    return v


@pytest.mark.parametrize("where", ["file", ":memory:"])
def test_take_turn_reads_the_revision_and_whether_a_turn_is_pending(
    tmp_path: Path, where: str
) -> None:
    """The taken turn carries the session's revision and says when no checkpoint of the
    session is stored (a neighbour's whose id starts the same does not count)."""
    with SqliteStore(tmp_path / "db.sqlite" if where == "file" else where) as store:

        def take() -> TakenTurn:
            return store.sessions.take_turn(TakeTurn("s", checkpoints=store.checkpoints))

        taken = take()
        with taken.lease:
            assert taken.revision is None and taken.messages == [] and taken.no_checkpoints
        store.sessions.append("s", [Message.user("a0")], 0)
        store.checkpoints.save("s1.turn-0", {"x": 1})
        store.checkpoints.save("s-.turn-0", {"x": 1})
        store.checkpoints.save("r.turn-0", {"x": 1})
        taken = take()
        with taken.lease:
            assert taken.revision == store.sessions.revision("s")
            assert taken.no_checkpoints
        store.checkpoints.save("s.turn-1", {"x": 1})
        taken = take()
        with taken.lease:
            assert not taken.no_checkpoints
            assert taken.revision == store.sessions.revision("s")
        other = MemoryCheckpointStore()  # asked about another checkpoint store: not known
        with store.sessions.take_turn(TakeTurn("r", checkpoints=other)).lease:
            pass
        taken = store.sessions.take_turn(TakeTurn("q", checkpoints=other))
        with taken.lease:
            assert not taken.no_checkpoints


@pytest.mark.skipif(not _lockfile._LINE, reason="the waiting line needs Linux OFD locks")
def test_a_session_waiting_in_line_reads_ahead_what_the_turns_before_it_wrote(
    tmp_path: Path,
) -> None:
    """Three stores on one file (as three processes would be) send on one id at once.
    The third in line takes in the first one's turn while the second still holds the
    session, before its own lease; every model still sees every earlier message."""
    path = tmp_path / "db.sqlite"
    stores = [SqliteStore(path) for _ in range(3)]
    gates = [threading.Event() for _ in range(3)]
    calling = [threading.Event() for _ in range(3)]
    seen: list[list[str]] = [[], [], []]

    def model(n: int) -> Callable[[ModelRequest], Message]:
        def call(request: ModelRequest) -> Message:
            seen[n] = [m.text for m in request.messages]
            calling[n].set()
            assert gates[n].wait(WAIT)
            return Message.assistant(f"a{n}")

        return call

    agents = [create_agent(provider=FunctionProvider(model(n)), store=stores[n]) for n in range(3)]
    sessions = [agent.session("shared") for agent in agents]
    stores[0].sessions.append("shared", [Message.user("q"), Message.assistant("a")], 0)
    for session in sessions:  # each holds the transcript as of its revision
        assert [m.text for m in session.load()] == ["q", "a"]
    reads: list[tuple[int, list[str]]] = []  # the third store's load_since: (after, read)
    third = stores[2].sessions
    load_since = third.load_since

    def recorded(id: str, length: int, revision: object) -> list[Message] | None:
        added = load_since(id, length, revision)
        reads.append((length, [m.text for m in added or []]))
        return added

    third.load_since = recorded  # type: ignore[method-assign]
    lock_file = Path(f"{path}.locks") / "shared.lock"
    threads = [
        threading.Thread(target=sessions[n].send, args=(f"q{n}",), daemon=True) for n in range(3)
    ]
    try:
        threads[0].start()
        assert calling[0].wait(WAIT)  # the first holds the session
        line = lock_tickets(lock_file)
        threads[1].start()
        until(lambda: lock_tickets(lock_file) == line + 1, "the second in line", WAIT)
        threads[2].start()
        until(lambda: lock_tickets(lock_file) == line + 2, "the third in line", WAIT)
        assert not reads
        gates[0].set()  # the first commits; the second takes the session
        assert calling[1].wait(WAIT)
        # read ahead, without the lease: the first's turn, after the two messages held
        until(lambda: reads == [(2, ["q0", "a0"])], "the third reading ahead", WAIT)
        assert not calling[2].is_set()
    finally:
        for gate in gates:
            gate.set()
        for thread in threads:
            thread.join(WAIT)
        for agent in agents:
            agent.close()
    first = ["q", "a", "q0"]
    assert seen == [first, [*first, "a0", "q1"], [*first, "a0", "q1", "a1", "q2"]]
    stored = stores[0].sessions.load("shared") or []
    assert [m.text for m in stored] == [*first, "a0", "q1", "a1", "q2", "a2"]
    for store in stores:
        store.close()


class _ReadsAheadAndFails(MemorySessionStore):
    """A store that reads ahead (``ReadAhead``) before every lease, its reads failing while
    it does: a read-ahead that raises must cost the turn nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.reading_ahead = False
        self.calls = 0

    def take_turn(self, request: TakeTurn) -> TakenTurn:
        ahead = ReadAhead(self, request)
        if request.held_length is not None:
            self.calls += 1
            self.reading_ahead = True
            try:
                ahead()
            finally:
                self.reading_ahead = False
        lease = self.turn_lock(request.id, timeout=request.timeout)
        return ahead.taken(lease, self.revision(request.id))

    def revision(self, id: str) -> int | None:
        if self.reading_ahead:
            raise StoreError(f"session {id!r}: the store cannot be read now")
        return super().revision(id)


def test_a_read_ahead_that_fails_is_left_to_the_look_under_the_lease(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sessions = _ReadsAheadAndFails()
    agent = create_agent(
        provider=FunctionProvider(lambda request: Message.assistant(f"{len(request.messages)}")),
        store=sessions,
    )
    session = agent.session("s")
    try:
        session.load()
        sessions.append("s", [Message.user("elsewhere"), Message.assistant("x")], 0)
        with caplog.at_level(logging.DEBUG, logger="lousho_sessions.stores"):
            assert session.send("hi").text == "3"  # it saw the turn stored meanwhile
        assert sessions.calls == 1
        assert "reading ahead failed" in caplog.text
        assert [m.text for m in session.load()] == ["elsewhere", "x", "hi", "3"]
    finally:
        agent.close()


# -- the turn's first checkpoint: written by the turn once its first request has left -----


def offer(
    store: SqliteStore,
    revision: object = None,
    *,
    turn_id: str = "s.turn-0",
    build: Callable[[], dict[str, object]] = lambda: {"format": "test", "n": 1},
) -> TakenTurn:
    """``take_turn`` of session "s", offering ``build()`` as the first checkpoint of
    ``turn_id``, built on the transcript as of ``revision``."""
    return store.sessions.take_turn(
        TakeTurn(
            "s",
            checkpoints=store.checkpoints,
            held_length=0,
            held_revision=revision,
            checkpoint=StartCheckpoint(turn_id, build),
        )
    )


@pytest.mark.parametrize("where", ["file", ":memory:"])
def test_an_offered_first_checkpoint_is_not_saved_with_the_lease(
    tmp_path: Path, where: str
) -> None:
    """SQLite does not save a turn's first checkpoint in the read that takes the turn (a
    write transaction there cost more on the way to the model than the turn's own write
    once the request has left); the engine does not offer it."""
    built: list[int] = []

    def build() -> dict[str, object]:
        built.append(1)
        return {"format": "test", "n": 1}

    with SqliteStore(tmp_path / "db.sqlite" if where == "file" else where) as store:
        assert store.sessions.saves_start_checkpoint is False
        taken = offer(store, build=build)
        with taken.lease:
            assert not taken.saved_checkpoint and taken.no_checkpoints
            assert taken.revision is None
        assert store.checkpoints.list() == [] and built == []


@pytest.mark.parametrize("tools", [0, 1])
def test_a_durable_sqlite_turn_is_one_transaction_and_two_per_tool_call(
    tmp_path: Path, tools: int
) -> None:
    """Once the session has read its transcript: the read under the lease (one statement,
    no transaction), the first checkpoint (before the call: ``FunctionProvider`` does not
    report its request sent), then (per tool call) the model's answer and the tool's
    result, then the commit: every write in a transaction."""

    def model(request: ModelRequest) -> Message:
        if tools and request.messages[-1].role == "user":
            return Message.assistant("", tool_calls=[ToolCall("c1", "echo", {"v": "x"})])
        return Message.assistant("answer")

    with SqliteStore(tmp_path / "db.sqlite") as store:
        agent = create_agent(provider=FunctionProvider(model), tools=[echo], store=store)
        session = agent.session("s")
        session.send("first")  # reads the transcript
        statements: list[str] = []
        with store.connection() as conn:
            conn.set_trace_callback(statements.append)
        for n in range(3):
            assert session.send(f"q{n}").text == "answer"
        with store.connection() as conn:
            conn.set_trace_callback(None)
        agent.close()
        begins = [s for s in statements if s.startswith("BEGIN")]
        assert len(begins) == 3 * (2 + 2 * tools)
        outside, inside = [], False  # every statement but the start's read is in a transaction
        for statement in statements:
            inside = inside or statement.startswith("BEGIN")
            if not inside:
                outside.append(statement)
            inside = inside and not statement.startswith("COMMIT")
        assert [s[:24] for s in outside] == ["SELECT (SELECT revision "] * 3
        starts = [n for n, s in enumerate(statements) if s.startswith("SELECT (SELECT revision")]
        for n in starts:  # the read that starts a turn, then its first checkpoint
            assert statements[n + 1] == "BEGIN IMMEDIATE"
            assert any(s.startswith("INSERT INTO checkpoints") for s in statements[n : n + 5])
        assert store.checkpoints.list() == []
        assert len(store.sessions.load("s") or []) == 4 * (2 + 2 * tools)
