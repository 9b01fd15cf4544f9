"""Sweepers running at once share the stale turns: disjoint claims, each turn resumed once.

Two sweepers (two store objects on one SQLite file or one PostgreSQL schema, each
with its agent) list the same stale turns, then meet at a barrier before their first
claim, so both try to claim the same oldest ones at the same moment: the race that
made all but one sweeper come back with nothing but ``"taken"``. Each must go on past
the turns the other took and claim its ``limit``.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from services_pg import fresh_schema, postgres_url

from lousho_sessions import FunctionProvider, Message, ModelRequest, ProviderError, create_agent
from lousho_sessions.recovery import SweptTurn, stale_turns, sweep
from lousho_sessions.sqlite import SqliteStore
from lousho_sessions.stores._postgres_sessions import PostgresSessionStore
from lousho_sessions.stores.lease import Lease
from lousho_sessions.stores.postgres import PostgresStore
from lousho_sessions.stores.sqlite import SqliteSessionStore

WAIT = 30.0
TURNS = 24
LIMIT = TURNS // 2


class FirstClaimMeets:
    """A session store whose first ``claim_stale`` waits at ``barrier`` for the other sweeper's."""

    barrier: threading.Barrier | None = None

    def claim_stale(self, ids: Sequence[str]) -> dict[str, Lease]:
        barrier, self.barrier = self.barrier, None
        if barrier is not None:
            barrier.wait(WAIT)
        claimed: dict[str, Lease] = super().claim_stale(ids)  # type: ignore[misc]
        return claimed


class MeetingSqlite(FirstClaimMeets, SqliteSessionStore):
    pass


class MeetingPostgres(FirstClaimMeets, PostgresSessionStore):
    pass


@pytest.fixture(params=["sqlite", "postgres"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Opens a new store object on one database each call; gated ones meet at the barrier."""
    if request.param == "sqlite":

        def open_sqlite(barrier: threading.Barrier | None = None) -> SqliteStore:
            store = SqliteStore(tmp_path / "db.sqlite")
            if barrier is not None:
                store.sessions = MeetingSqlite(store)
                store.sessions.barrier = barrier
            return store

        yield open_sqlite
        return
    for schema in fresh_schema():  # one pass; the schema is dropped afterwards

        def open_postgres(
            barrier: threading.Barrier | None = None, schema: str = schema
        ) -> PostgresStore:
            store = PostgresStore(postgres_url(), schema=schema, lease_ttl=10.0)
            if barrier is not None:
                store.sessions = MeetingPostgres(store)
                store.sessions.barrier = barrier
            return store

        yield open_postgres


def failing_model(request: ModelRequest) -> Message:
    raise RuntimeError("the worker died here")  # transient: the turn stays pending


def test_two_sweeps_at_once_claim_disjoint_sets_of_limit_turns_each(opener: Any) -> None:
    with opener() as store:
        agent = create_agent(provider=FunctionProvider(failing_model), store=store)
        for n in range(TURNS):
            with pytest.raises(ProviderError):
                agent.session(f"s{n}").send(f"s{n} hello")
        agent.close()
        assert len(stale_turns(store, limit=TURNS)) == TURNS

    calls: Counter[str] = Counter()
    running = threading.Condition()

    def model(request: ModelRequest) -> Message:
        # no turn ends (and lets its lease go) before every turn is claimed and running,
        # so a claim can only lose to the other sweeper's claim, never to a finished turn
        # (on a loaded machine claiming all 24 took over 10 s once: a turn that ended
        # first was claimed again by the other sweeper, which then found it "taken")
        with running:
            calls[request.messages[0].text.split()[0]] += 1
            running.notify_all()
            running.wait_for(lambda: calls.total() >= TURNS, timeout=WAIT)
        return Message.assistant("done")

    barrier = threading.Barrier(2)
    results: dict[str, list[SweptTurn]] = {}
    errors: list[BaseException] = []

    def sweeper(name: str) -> None:
        try:
            with opener(barrier) as own:
                own_agent = create_agent(provider=FunctionProvider(model), store=own)
                try:
                    results[name] = sweep(own, agent=own_agent, limit=LIMIT)
                finally:
                    own_agent.close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=sweeper, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT * 3)
    assert not errors, errors
    claimed = {
        name: {t.session_id for t in swept if t.outcome != "taken"}
        for name, swept in results.items()
    }
    for name, swept in results.items():
        assert {t.outcome for t in swept} <= {"finished", "taken"}, swept
        assert len(claimed[name]) == LIMIT, (name, swept)  # went on past the turns lost
        assert len(swept) == len({t.session_id for t in swept})  # each turn tried once
    assert claimed["a"].isdisjoint(claimed["b"])
    assert claimed["a"] | claimed["b"] == {f"s{n}" for n in range(TURNS)}
    for name, other in (("a", "b"), ("b", "a")):  # "taken": the other sweeper claimed it
        assert {t.session_id for t in results[name] if t.outcome == "taken"} <= claimed[other]
    assert calls == Counter({f"s{n}": 1 for n in range(TURNS)})  # each resumed once
    with opener() as store:
        assert stale_turns(store, limit=TURNS) == []
        for n in range(TURNS):
            assert [m.role for m in store.sessions.load(f"s{n}") or []] == ["user", "assistant"]
