"""RedisStore on the real server: key layout, processes, kills, stops, races, TTL, corruption.

The conformance kit and the state machines run in test_store_kit.py. Every test
here works under a key prefix of its own, deleted afterwards; without a server
they skip (fail with ``LOUSHO_REQUIRE_SERVICES=1``; see tests/services_redis.py).
"""

from __future__ import annotations

import logging
import os
import re
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fork_server
import pytest
import race_harness
import redis
import redis_workers
import store_workers
from services_redis import drop_prefix, prefix_for, redis_url, require_redis
from storekit import WAIT
from test_crash import check, crash_and_resume

from lousho_sessions import Message, SessionBusyError, StoreCorruptError
from lousho_sessions.redis import SESSION_PARTS, RedisStore

CTX = fork_server.CONTEXT


@pytest.fixture
def location(tmp_path: Path) -> Iterator[Path]:
    """A directory whose path names this test's key prefix; the keys are deleted after."""
    require_redis()
    yield tmp_path
    drop_prefix(prefix_for(tmp_path))


@pytest.fixture
def open_store(location: Path) -> Iterator[Callable[..., RedisStore]]:
    """Opens ``RedisStore``s under this test's prefix; closes them after the test."""
    made: list[RedisStore] = []

    def make(**options: Any) -> RedisStore:
        store = RedisStore(redis_url(), prefix=prefix_for(location), **options)
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


def until(condition: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        threading.Event().wait(0.01)


# -- key layout ----------------------------------------------------------------------


def crc16_xmodem(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def slot(key: str) -> int:
    """The Redis Cluster slot of ``key``: CRC16 of its hash tag (the first non-empty ``{…}``)."""
    data = key.encode()
    start = data.find(b"{")
    if start != -1:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1 : end]
    return crc16_xmodem(data) % 16384


def test_the_slot_function_matches_redis() -> None:
    assert crc16_xmodem(b"123456789") == 0x31C3  # the CRC16/XMODEM check value
    assert slot("foo") == 12182  # the Redis Cluster specification's example
    assert slot("{user1000}.following") == slot("{user1000}.followers")
    assert slot("foo{}{bar}") == crc16_xmodem(b"foo{}{bar}") % 16384  # empty tag: whole key
    for key in ("a", "{a}:b", "x{y}z{w}", "lousho:{s-1}:meta"):
        assert slot(key) == redis.crc.key_slot(key.encode())


def test_every_key_of_a_session_is_in_one_slot(open_store: Callable[..., RedisStore]) -> None:
    store = open_store(ttl=60)
    for id in ("s1", "user-42", "x" * 128):
        with store.sessions.turn_lock(id) as lease:
            store.sessions.append(id, [Message.user("hi")], 0, fence=lease.fence)
            store.checkpoints.save(f"{id}.turn-0", {"step": 1}, fence=lease.fence)
            store.approvals.create({"id": f"{id}-a", "session_id": id, "status": "pending"})
        store.approvals.create({"id": f"{id}-b", "session_id": id, "status": "pending"})
        store.approvals.resolve(f"{id}-b", approved=True)
        keys = {k.decode() for k in store.client.scan_iter(match=f"{store.prefix}:{{{id}}}:*")}
        assert keys == set(store.session_keys(id)), keys  # every part was written
        assert {slot(k) for k in keys} == {slot(f"{{{id}}}")}
    approvals = store.approvals.list(status=None)
    assert len(approvals) == 6
    others = {k.decode() for k in store.client.scan_iter(match=f"{store.prefix}:*")} - {
        k for id in ("s1", "user-42", "x" * 128) for k in store.session_keys(id)
    }
    assert others == {store.approval_index}  # the one key outside the sessions' slots
    assert [p for p in SESSION_PARTS] == [k.rsplit(":", 1)[1] for k in store.session_keys("s")]


def test_a_prefix_that_would_break_the_layout_is_refused(location: Path) -> None:
    for prefix in ("a{b}", "a*", "", "a b"):
        with pytest.raises(ValueError, match="prefix"):
            RedisStore(redis_url(), prefix=prefix)


# -- processes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "processes, turns", [(8, 25), pytest.param(8, 100, marks=pytest.mark.slow)]
)
def test_sessions_in_processes_lose_no_turn(location: Path, processes: int, turns: int) -> None:
    """8 processes x 25 ``session.send`` on one id: every turn, in strict pairs, each seeing all."""
    go = CTX.Event()
    out: Any = CTX.Queue()
    workers = [
        CTX.Process(
            target=store_workers.send_turns,
            args=("redis", str(location), "shared", n, turns, go, out),
        )
        for n in range(processes)
    ]
    for w in workers:
        w.start()
    go.set()
    results = [out.get(timeout=WAIT * 4) for _ in workers]
    for w in workers:
        w.join(WAIT)
    assert [r for r in results if r[0] != "ok"] == []
    with RedisStore(redis_url(), prefix=prefix_for(location)) as store:
        messages = store.sessions.load("shared") or []
    assert len(messages) == 2 * processes * turns
    tags = []
    for i, (user, assistant) in enumerate(zip(messages[::2], messages[1::2], strict=True)):
        assert (user.role, assistant.role) == ("user", "assistant")
        # the model saw every earlier turn, in order
        assert assistant.text == f"{user.text}|{store_workers.seen(messages[: 2 * i + 1])}"
        tags.append(user.text)
    assert sorted(tags) == sorted(f"w{w}-t{n}" for w in range(processes) for n in range(turns))


@pytest.mark.parametrize("point", ["after-tool-a", "inside-tool-b"])
def test_killed_turn_resumes_without_rerunning_finished_tools(location: Path, point: str) -> None:
    """SIGKILL mid-turn: the lease runs out, resume() finishes the turn, finished tools ran once."""
    outcome, lines = crash_and_resume("redis", location, point, "kill")
    check(point, outcome, lines)


@pytest.mark.parametrize("rounds", [10, pytest.param(200, marks=pytest.mark.slow)])
def test_eight_processes_resolve_one_approval(location: Path, rounds: int) -> None:
    """Each round one pending approval, 8 processes resolve it: one winner, the tool ran once."""
    processes = 8
    barrier = CTX.Barrier(processes + 1)
    ids: Any = CTX.Queue()
    results: Any = CTX.Queue()
    logfile = str(location / "log.txt")
    procs = [
        CTX.Process(
            target=race_harness.racer,
            args=("redis", str(location), logfile, rounds, barrier, ids, results),
        )
        for _ in range(processes)
    ]
    for p in procs:
        p.start()
    try:
        for round_ in range(rounds):
            approval_id = race_harness.pause("redis", str(location), logfile, round_)
            for _ in range(processes):
                ids.put(approval_id)
            barrier.wait(60)
            barrier.wait(60)
            outcomes = Counter(results.get(timeout=60)[1] for _ in range(processes))
            assert outcomes == {"won": 1, "lost": processes - 1}, (round_, outcomes)
    finally:
        for p in procs:
            p.join(60)
            if p.is_alive():
                p.kill()
    paid = Path(logfile).read_text().splitlines()
    assert sorted(int(line.split()[1]) for line in paid) == list(range(rounds))


def test_a_stopped_holder_loses_its_lease_and_its_writes_are_refused(
    open_store: Callable[..., RedisStore], location: Path
) -> None:
    """SIGSTOP the holder until its lease runs out; another turn takes the session; after
    SIGCONT the stale holder's fenced writes (append, checkpoint, approval) change nothing."""
    store = open_store(lease_ttl=0.5)
    out: Any = CTX.Queue()
    go = CTX.Event()
    child = CTX.Process(
        target=redis_workers.stale_writer, args=(prefix_for(location), 0.5, out, go)
    )
    child.start()
    try:
        state, stale_fence = out.get(timeout=WAIT * 2)
        assert state == "held", stale_fence
        assert child.pid is not None
        os.kill(child.pid, signal.SIGSTOP)
        with store.sessions.turn_lock("s", timeout=WAIT) as lease:  # waits for the expiry
            assert lease.fence > stale_fence
            store.sessions.append("s", [Message.user("current")], 0, fence=lease.fence)
        os.kill(child.pid, signal.SIGCONT)
        go.set()
        state, detail = out.get(timeout=WAIT)
        assert state == "done", detail
    finally:
        if child.is_alive() and child.pid:
            os.kill(child.pid, signal.SIGCONT)
        go.set()
        child.join(WAIT)
    lost, outcomes = detail
    assert lost is True
    assert outcomes == ["refused", "refused", "refused"]
    assert [m.text for m in store.sessions.load("s") or []] == ["current"]
    assert store.checkpoints.list() == []
    assert store.approvals.get("stale") is None


def test_a_stopped_session_turn_is_not_written(
    open_store: Callable[..., RedisStore], location: Path
) -> None:
    """End to end: a ``send`` stopped mid-model loses its lease; the next turn finishes it and
    runs its own; after SIGCONT the stale turn's writes are refused with ``LeaseLostError``."""
    from lousho_sessions import FunctionProvider, create_agent

    store = open_store(lease_ttl=0.5)
    out: Any = CTX.Queue()
    go = CTX.Event()
    child = CTX.Process(
        target=redis_workers.stalled_send, args=(prefix_for(location), 0.5, out, go)
    )
    child.start()
    try:
        state, seen = out.get(timeout=WAIT * 2)
        assert state == "in-model", seen
        assert child.pid is not None
        os.kill(child.pid, signal.SIGSTOP)
        agent = create_agent(provider=FunctionProvider(lambda r: "fresh answer"), store=store)
        assert agent.session("s").send("second", timeout=WAIT).text == "fresh answer"
        agent.close()
        os.kill(child.pid, signal.SIGCONT)
        go.set()
        state, how = out.get(timeout=WAIT)
        assert state == "done", how
    finally:
        if child.is_alive() and child.pid:
            os.kill(child.pid, signal.SIGCONT)
        go.set()
        child.join(WAIT)
    # the next turn finished the stopped turn from its checkpoint first, then ran its own
    assert [m.text for m in store.sessions.load("s") or []] == [
        "first",
        "fresh answer",
        "second",
        "fresh answer",
    ]
    # Today the stale turn's commit is refused by the length check (StoreConflictError),
    # but its unfenced checkpoint save went through, leaving a turn a later send would run
    # again. With fences passed by the session, the first stale write is refused instead.
    assert (how, store.checkpoints.list()) == ("LeaseLostError", [])


# -- leases ---------------------------------------------------------------------------


def test_the_heartbeat_keeps_a_lease_past_its_ttl(open_store: Callable[..., RedisStore]) -> None:
    store, other = open_store(lease_ttl=0.3), open_store(lease_ttl=0.3)
    with store.sessions.turn_lock("s") as lease:
        with pytest.raises(SessionBusyError):
            other.sessions.turn_lock("s", timeout=1.2)  # four lease lifetimes
        assert not lease.lost
        store.sessions.append("s", [Message.user("still mine")], 0, fence=lease.fence)


def test_a_lease_taken_over_is_lost(open_store: Callable[..., RedisStore]) -> None:
    store = open_store(lease_ttl=0.3)
    lease = store.sessions.turn_lock("s")
    store.client.hset(store.key("s", "lease"), mapping={"holder": "someone", "fence": "1"})
    until(lambda: lease.lost, "the heartbeat noticed the takeover")
    lease.release()  # not ours any more: frees nothing
    assert store.client.hget(store.key("s", "lease"), "holder") == b"someone"


def test_a_waiter_is_woken_by_the_release_not_by_polling(
    open_store: Callable[..., RedisStore],
) -> None:
    """With a re-check interval and a lease far longer than the test's wait, only the
    release's wake-up can hand the session over in time."""
    holder = open_store(lease_ttl=600, wake_poll=600)
    waiter = open_store(lease_ttl=600, wake_poll=600)
    lease = holder.sessions.turn_lock("s")
    waiting, got = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            waiting.set()
            with waiter.sessions.turn_lock("s", timeout=WAIT):
                got.set()
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=wait)
    thread.start()
    assert waiting.wait(WAIT)
    assert not got.wait(0.1)
    lease.release()
    assert got.wait(WAIT), errors
    thread.join(WAIT)
    assert not errors


def test_close_releases_the_leases_it_holds(open_store: Callable[..., RedisStore]) -> None:
    store, other = open_store(lease_ttl=600), open_store(lease_ttl=600)
    lease = store.sessions.turn_lock("s")
    store.close()
    assert lease.lost
    with other.sessions.turn_lock("s", timeout=WAIT):
        pass


# -- TTL --------------------------------------------------------------------------------


def pttls(store: RedisStore, id: str) -> set[int]:
    keys = [k for k in store.session_keys(id) if not k.endswith(":wake")]
    return {store.client.pttl(k) for k in keys if store.client.exists(k)}


def test_ttl_is_set_when_the_turn_ends_and_never_while_it_runs(
    open_store: Callable[..., RedisStore],
) -> None:
    store = open_store(ttl=600)
    with store.sessions.turn_lock("s") as lease:
        store.sessions.append("s", [Message.user("q")], 0, fence=lease.fence)
        assert pttls(store, "s") == {-1}  # a running turn: no expiry
    assert all(0 < t <= 600_000 for t in pttls(store, "s"))
    with store.sessions.turn_lock("s"):
        assert pttls(store, "s") == {-1}  # taken again: the expiry is gone
        store.checkpoints.save("s.turn-1", {"step": 1})
    assert pttls(store, "s") == {-1}  # an unfinished durable turn: no expiry
    store.approvals.create({"id": "a1", "session_id": "s", "status": "pending"})
    store.checkpoints.delete("s.turn-1")
    assert pttls(store, "s") == {-1}  # a pending approval: no expiry
    store.approvals.resolve("a1", approved=False)
    assert all(0 < t <= 600_000 for t in pttls(store, "s"))


def test_a_session_with_state_expires_with_it(open_store: Callable[..., RedisStore]) -> None:
    """A session's state record (the ``<id>.state`` field of its checkpoints hash) is no
    unfinished turn: it keeps no session from expiring, and expires with it (a fork's too)."""
    from lousho_sessions.stores.base import CommitTurn, ForkRequest

    store = open_store(ttl=600)
    store.sessions.commit_turn(
        CommitTurn("s", [Message.user("q")], 0, store.checkpoints, state={"plan": "pro"})
    )
    assert store.client.hexists(store.key("s", "checkpoints"), "s.state")
    assert all(0 < t <= 600_000 for t in pttls(store, "s"))
    store.sessions.fork(ForkRequest("s", "f", state=True, checkpoints=store.checkpoints))
    assert store.client.hexists(store.key("f", "checkpoints"), "f.state")
    assert all(0 < t <= 600_000 for t in pttls(store, "f"))
    store.checkpoints.save("s.turn-1", {"step": 1})
    assert pttls(store, "s") == {-1}  # an unfinished durable turn: no expiry


def test_a_finished_session_expires(open_store: Callable[..., RedisStore]) -> None:
    store = open_store(ttl=0.2)
    store.sessions.save("s", [Message.user("gone soon")])
    until(lambda: store.sessions.load("s") is None, "the session expired")
    assert store.sessions.revision("s") is None


def test_the_docs_example_runs(location: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/stores.md's Redis block (marked no-run there: the docs runner has no server)."""
    doc = (Path(__file__).parent.parent / "docs" / "stores.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", doc, flags=re.S)
    (block,) = [b for b in blocks if "RedisStore(" in b]
    assert 'prefix="myapp"' in block
    exec(block.replace('prefix="myapp"', f"prefix={prefix_for(location)!r}"), {})
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] and printed[1].startswith("PruneResult(sessions=0")


# -- corrupt data and prune ----------------------------------------------------------


def test_corrupt_entries_raise_or_are_reported(
    open_store: Callable[..., RedisStore], caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store()
    store.sessions.save("s", [Message.user("a"), Message.user("b")])
    store.client.lset(store.key("s", "messages"), 1, b"{not json")
    with pytest.raises(StoreCorruptError, match="session 's'"):
        store.sessions.load("s")
    store.client.lset(store.key("s", "messages"), 1, b'{"role": "user"}, {"role": "user"}')
    with pytest.raises(StoreCorruptError):
        store.sessions.load("s")
    store.client.rpush(store.key("s", "messages"), b"{}")  # the length no longer matches
    with pytest.raises(StoreCorruptError, match="length"):
        store.sessions.load("s")
    with pytest.raises(StoreCorruptError):
        store.sessions.append("s", [Message.user("c")], 2)
    assert store.client.llen(store.key("s", "messages")) == 3  # nothing was written

    store.checkpoints.save("s.turn-0", {"ok": 1})
    store.client.hset(store.key("s", "checkpoints"), "s.turn-0", b"\xff\xfe")
    with pytest.raises(StoreCorruptError, match="turn-0"):
        store.checkpoints.load("s.turn-0")

    store.approvals.create({"id": "good", "session_id": "s", "status": "pending"})
    store.approvals.create({"id": "bad", "session_id": "s", "status": "pending"})
    store.client.hset(store.key("s", "approvals"), "bad", b'{"id": "bad", "status": 7}')
    with caplog.at_level(logging.WARNING, logger="lousho_sessions.stores.redis"):
        assert [r["id"] for r in store.approvals.list()] == ["good"]
    assert "bad" in caplog.text
    assert list(store.approvals.corrupt()) == ["bad"]
    with pytest.raises(StoreCorruptError):
        store.approvals.get("bad")
    store.approvals.delete("bad")
    assert store.approvals.corrupt() == {}


def test_prune_keeps_held_sessions_and_pending_approvals_and_repairs_the_index(
    open_store: Callable[..., RedisStore],
) -> None:
    store = open_store()
    store.sessions.save("old", [Message.user("x")])
    store.checkpoints.save("old.turn-0", {})
    store.approvals.create({"id": "p", "session_id": "old", "status": "pending"})
    store.approvals.create({"id": "r", "session_id": "old", "status": "pending"})
    store.approvals.resolve("r", approved=True)
    store.approvals.create({"id": "loose", "session_id": None, "status": "approved"})
    store.sessions.save("held", [Message.user("y")])
    store.client.hdel(store.approval_index, "p")  # as if create died before indexing
    store.client.hset(store.approval_index, "ghost", "old")  # an entry naming no record
    with store.sessions.turn_lock("held"):
        result = store.prune(0)
    assert (result.sessions, result.checkpoints, result.approvals) == (1, 1, 2)
    assert store.sessions.load("old") is None
    assert store.sessions.load("held") is not None
    assert [r["id"] for r in store.approvals.list()] == ["p"]  # found again through the index
    assert store.client.hget(store.approval_index, "ghost") is None
