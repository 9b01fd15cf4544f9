"""A Redis turn's lease taken together with its first checkpoint (``ACQUIRE_SAVING``).

A session that has read its transcript offers its new turn's first checkpoint to
``take_turn`` (``TakeTurn.checkpoint``); the script that takes the lease saves it only if the session is
as the turn was built on (same revision, no checkpoint stored), with the new fence
first. So a durable turn is two round trips: the lease with the checkpoint, then the
commit that appends, drops the checkpoint and frees the lease.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fork_server
import pytest
import redis_workers
from services_redis import drop_prefix, prefix_for, redis_url, require_redis
from storekit import WAIT

from lousho_sessions import FunctionProvider, create_agent
from lousho_sessions.redis import RedisStore
from lousho_sessions.stores.base import BaseCheckpointStore, StartCheckpoint, TakenTurn, TakeTurn
from lousho_sessions.stores.memory import MemoryCheckpointStore

CTX = fork_server.CONTEXT


class CountingRedisStore(RedisStore):
    """Records the name of every script it runs, in order."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.scripts: list[str] = []

    def run(self, name: str, id: str, *args: object, what: str) -> Any:
        self.scripts.append(name)
        return super().run(name, id, *args, what=what)


@pytest.fixture
def prefix(tmp_path: Path) -> Iterator[str]:
    require_redis()
    yield prefix_for(tmp_path)
    drop_prefix(prefix_for(tmp_path))


@pytest.fixture
def rs(prefix: str) -> Iterator[CountingRedisStore]:
    # a lease far longer than the test: no renewal is counted
    store = CountingRedisStore(redis_url(), prefix=prefix, lease_ttl=600.0)
    yield store
    store.close()


def start(
    store: RedisStore,
    turn_id: str = "s1.turn-0",
    revision: object = None,
    *,
    checkpoints: BaseCheckpointStore | None = None,
    build: Any = lambda: {"format": "test", "n": 1},
    timeout: float | None = None,
) -> TakenTurn:
    """``take_turn`` of session "s1", offering the checkpoint ``build()`` under ``turn_id``,
    built on the transcript as of ``revision`` (held: its length does not matter here)."""
    request = TakeTurn(
        "s1",
        timeout=timeout,
        checkpoints=store.checkpoints if checkpoints is None else checkpoints,
        held_length=0,
        held_revision=revision,
        checkpoint=StartCheckpoint(turn_id, build),
    )
    return store.sessions.take_turn(request)


def raw_checkpoint(store: RedisStore, session: str, turn_id: str) -> str | None:
    value = store.client.hget(store.key(session, "checkpoints"), turn_id)
    return None if value is None else value.decode() if isinstance(value, bytes) else str(value)


def test_a_durable_redis_turn_is_two_round_trips(rs: CountingRedisStore) -> None:
    agent = create_agent(provider=FunctionProvider(lambda r: "answer"), store=rs)
    session = agent.session("s1")
    session.send("first")  # reads the transcript
    rs.scripts.clear()
    for n in range(3):
        assert session.send(f"q{n}").text == "answer"
    agent.close()
    assert rs.scripts == ["ACQUIRE_SAVING", "APPEND"] * 3
    assert len(rs.sessions.load("s1") or []) == 8
    assert rs.checkpoints.list() == []


def test_the_checkpoint_is_saved_with_the_lease_and_its_fence_first(rs: RedisStore) -> None:
    taken = start(rs)
    lease = taken.lease
    try:
        assert taken.saved_checkpoint
        assert taken.revision is None
        assert taken.no_checkpoints  # none before this one
        text = raw_checkpoint(rs, "s1", "s1.turn-0")
        assert text is not None and text.startswith(f'{{"fence":{lease.fence},')
        assert rs.checkpoints.load("s1.turn-0") == {"fence": lease.fence, "format": "test", "n": 1}
    finally:
        lease.release()


def test_nothing_is_saved_when_the_revision_moved(rs: RedisStore) -> None:
    from lousho_sessions import Message

    rs.sessions.save("s1", [Message.user("hi")])
    taken = start(rs, revision=None)
    with taken.lease:
        assert not taken.saved_checkpoint
        assert taken.revision == rs.sessions.revision("s1")
    assert rs.checkpoints.list() == []
    revision = rs.sessions.revision("s1")
    taken = start(rs, "s1.turn-1", revision)
    with taken.lease:
        assert taken.saved_checkpoint
    assert rs.checkpoints.list() == ["s1.turn-1"]


def test_nothing_is_saved_while_a_checkpoint_of_the_session_is_stored(rs: RedisStore) -> None:
    rs.checkpoints.save("s1.turn-9", {"other": True})
    taken = start(rs)
    with taken.lease:
        assert not taken.saved_checkpoint
        assert not taken.no_checkpoints  # the lease saw one: maybe a pending turn
    assert rs.checkpoints.list() == ["s1.turn-9"]
    assert rs.checkpoints.load("s1.turn-9") == {"other": True}


def test_an_offer_that_is_not_this_stores_or_this_sessions_takes_a_plain_lease(
    rs: CountingRedisStore,
) -> None:
    elsewhere = MemoryCheckpointStore()
    offers: list[Callable[[], TakenTurn]] = [
        lambda: start(rs, checkpoints=elsewhere, build=lambda: {"n": 1}),
        lambda: start(rs, "other.turn-0"),  # another session's turn
        lambda: start(rs, build=lambda: {}),  # nothing to save
        lambda: start(rs, build=lambda: {"x": object()}),
    ]
    for offer in offers:
        rs.scripts.clear()
        taken = offer()
        with taken.lease:
            assert not taken.saved_checkpoint
        assert rs.scripts[0] == "ACQUIRE"
    assert rs.checkpoints.list() == []
    assert elsewhere.list() == []


def test_a_waiting_offer_is_saved_when_the_holder_lets_go_unchanged(prefix: str) -> None:
    holder = RedisStore(redis_url(), prefix=prefix, lease_ttl=600, wake_poll=600)
    waiter = RedisStore(redis_url(), prefix=prefix, lease_ttl=600, wake_poll=600)
    try:
        lease = holder.sessions.turn_lock("s1")
        waiting, got = threading.Event(), threading.Event()
        saved: list[bool] = []
        errors: list[BaseException] = []

        def wait() -> None:
            try:
                waiting.set()
                taken = start(waiter, timeout=WAIT)
                with taken.lease:
                    saved.append(taken.saved_checkpoint)
                    got.set()
            except BaseException as exc:  # reported below
                errors.append(exc)

        thread = threading.Thread(target=wait)
        thread.start()
        assert waiting.wait(WAIT)
        assert not got.wait(0.1)  # held: the offer waits, unsaved
        assert holder.checkpoints.list() == []
        lease.release()
        assert got.wait(WAIT), errors
        thread.join(WAIT)
        assert not errors
        assert saved == [True]
        assert holder.checkpoints.list() == ["s1.turn-0"]
    finally:
        holder.close()
        waiter.close()


def test_killed_in_the_model_call_of_a_turn_saved_with_its_lease_resumes_elsewhere(
    prefix: str,
) -> None:
    """SIGKILL in the model call of a turn whose first checkpoint came with its lease: the
    turn is pending with that lease's fence, and another process's resume finishes it."""
    out: Any = CTX.Queue()
    victim = CTX.Process(target=redis_workers.second_turn_until_killed, args=(prefix, 0.5, out))
    victim.start()
    try:
        state, detail = out.get(timeout=WAIT * 2)
        assert (state, detail) == ("inside", "model"), detail
    finally:
        if victim.pid is not None and victim.is_alive():
            os.kill(victim.pid, signal.SIGKILL)
        victim.join(WAIT)
    with RedisStore(redis_url(), prefix=prefix, lease_ttl=0.5) as store:
        text = raw_checkpoint(store, "warm", "warm.turn-2")
        fence = store.client.hget(store.key("warm", "lease"), "fence")
        assert text is not None and fence is not None
        fence_text = fence.decode() if isinstance(fence, bytes) else str(fence)
        # the fence first: spliced in by ACQUIRE_SAVING, the script that took the lease
        assert text.startswith(f'{{"fence":{fence_text},"format":"lousho.turn"')
        assert json.loads(text)["fence"] == int(fence_text)
        deadline = time.monotonic() + WAIT
        while store.sessions.turn_held("warm"):  # the killed holder's lease runs out
            assert time.monotonic() < deadline, "the killed holder's lease did not run out"
            threading.Event().wait(0.05)
        agent = create_agent(
            provider=FunctionProvider(lambda r: f"resumed: {r.messages[-1].text}"), store=store
        )
        result = agent.session("warm").resume()
        agent.close()
        assert result is not None and result.text == "resumed: second"
        assert [m.text for m in store.sessions.load("warm") or []] == [
            "first",
            "first answer",
            "second",
            "resumed: second",
        ]
        assert store.checkpoints.list() == []
