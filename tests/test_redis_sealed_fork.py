"""The fork of an encrypting Redis store is one write (issue 31 item 3): the client reads the
source (``FORK_READ``), seals every copy again for the new session (a record is bound to its
session) and writes them all with one script (``FORK_SEALED``) that refuses an existing new
id and a source changed since the read. A process killed the moment the new session
appears leaves it whole; a source changed between the read and the write is read again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import WAIT, until
from sealed_fork_child import KEYS, open_sealed
from services_redis import drop_prefix, prefix_for, redis_url, require_redis

from lousho_sessions import Message, StoreConflictError
from lousho_sessions.errors import SessionExistsError
from lousho_sessions.redis import RedisStore
from lousho_sessions.stores._redis_history import FORK_TRIES
from lousho_sessions.stores.base import ForkRequest, RewindRequest, SaveState

HERE = Path(__file__).parent
#: Enough messages that sealing them again takes the client many round trips' time.
SIZE = 3000
STATE = {"secret": "hunter2-swordfish", "n": 1}


@pytest.fixture
def path(tmp_path: Path) -> Iterator[Path]:
    require_redis()
    yield tmp_path
    drop_prefix(prefix_for(tmp_path))


def messages(n: int, start: int = 0) -> list[Message]:
    return [Message.user(f"message {i}") for i in range(start, start + n)]


class HookedStore(RedisStore):
    """An encrypting Redis store that runs ``between()`` once after each ``FORK_READ`` (as
    another writer would, between the fork's read and its write)."""

    between: Callable[[], object] = staticmethod(lambda: None)

    def run_on(self, name: str, keys: list[str], *args: object, what: str) -> Any:
        reply = super().run_on(name, keys, *args, what=what)
        if name == "FORK_READ":
            self.between()
        return reply


def hooked(path: Path) -> HookedStore:
    return HookedStore(redis_url(), prefix=prefix_for(path), encryption=KEYS)


def test_a_sealed_fork_killed_as_its_session_appears_leaves_it_whole(path: Path) -> None:
    """SIGKILL the forking process as soon as the new session's ``meta`` exists: the new
    session is whole (every message and the state open with the new session's key)."""
    store = open_sealed(path)
    source = messages(SIZE)
    store.sessions.save("src", source)
    store.sessions.save_state(SaveState("src", STATE, 0, None, store.checkpoints))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    child = subprocess.Popen(
        [sys.executable, str(HERE / "sealed_fork_child.py"), str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "ready"
        child.stdin.write("go\n")
        child.stdin.flush()
        until(
            lambda: store.client.exists(store.key("dst", "meta")) == 1, "the fork appears", WAIT * 3
        )
        child.send_signal(signal.SIGKILL)
        assert child.wait(WAIT) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(WAIT)
        child.stdin.close()
        child.stdout.close()
    assert [m.text for m in store.sessions.load("dst") or []] == [m.text for m in source]
    assert store.sessions.load_state("dst", store.checkpoints)[0] == STATE
    info = store.sessions.info("dst")
    assert info is not None and (info.parent, info.fork_point) == ("src", SIZE)
    for raw in store.client.hvals(store.key("dst", "checkpoints")):
        assert b"hunter2" not in raw  # the state is sealed
    store.close()


def test_a_source_written_between_the_read_and_the_write_is_read_again(path: Path) -> None:
    store = hooked(path)
    other = open_sealed(path)
    store.sessions.save("src", messages(3))
    store.sessions.save_state(SaveState("src", {"v": 1}, 0, None, store.checkpoints))
    changes: Iterator[Callable[[], object]] = iter(
        [
            lambda: other.sessions.append("src", messages(1, 3), 3),
            lambda: other.sessions.save_state(
                SaveState("src", {"v": 2}, 1, None, other.checkpoints)
            ),
        ]
    )
    store.between = lambda: next(changes, lambda: None)()
    done = store.sessions.fork(ForkRequest("src", "dst", 3, True, store.checkpoints))
    assert done.messages == 3
    assert [m.text for m in store.sessions.load("dst") or []] == [f"message {i}" for i in range(3)]
    assert store.sessions.load_state("dst", store.checkpoints)[0] == {"v": 2}  # the newest
    assert len(store.sessions.load("src") or []) == 4
    other.close()
    store.close()


def test_a_source_rewound_or_a_new_id_taken_meanwhile_is_refused(path: Path) -> None:
    store = hooked(path)
    other = open_sealed(path)
    store.sessions.save("src", messages(4))
    store.between = lambda: other.sessions.rewind(RewindRequest("src", 1))
    with pytest.raises(StoreConflictError, match="cannot keep 3"):
        store.sessions.fork(ForkRequest("src", "dst", 3, True, store.checkpoints))
    assert store.sessions.load("dst") is None
    store.between = lambda: other.sessions.save("dst", messages(1, 100))
    with pytest.raises(SessionExistsError):
        store.sessions.fork(ForkRequest("src", "dst", 1, True, store.checkpoints))
    assert [m.text for m in store.sessions.load("dst") or []] == ["message 100"]  # untouched
    other.close()
    store.close()


def test_a_source_that_keeps_changing_is_refused_after_a_few_reads(path: Path) -> None:
    store = hooked(path)
    other = open_sealed(path)
    store.sessions.save("src", messages(1))
    length = [1]

    def grow() -> None:
        other.sessions.append("src", messages(1, length[0]), length[0])
        length[0] += 1

    store.between = grow
    with pytest.raises(StoreConflictError, match=f"changed {FORK_TRIES} times"):
        store.sessions.fork(ForkRequest("src", "dst", 1))
    assert store.sessions.load("dst") is None
    assert store.client.exists(store.key("dst", "meta")) == 0
    other.close()
    store.close()
