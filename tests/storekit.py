"""The stores under test, built by kind, for the contract suite, state machines and workers."""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

import attrs

from lousho_sessions import FunctionProvider, Message, create_agent
from lousho_sessions.providers.base import ModelRequest
from lousho_sessions.sqlite import SqliteStore
from lousho_sessions.stores.base import ApprovalStore, CheckpointStore
from lousho_sessions.stores.files import FileApprovalStore, FileCheckpointStore, FileSessionStore
from lousho_sessions.stores.lease import LocalLeases
from lousho_sessions.stores.memory import (
    MemoryApprovalStore,
    MemoryCheckpointStore,
    MemorySessionStore,
)

#: Every store the contract suite runs over.
KINDS = ("memory", "files", "sqlite", "sqlite-memory")
#: The stores that persist across processes.
SHARED_KINDS = ("files", "sqlite")
#: Seconds a Redis lease lives without a heartbeat in the tests: short, so that a
#: killed holder's lease runs out soon; long enough for a busy 2-core machine.
REDIS_LEASE_TTL = 2.0
WAIT = 30.0  # seconds any wait on another thread or process may take before a test fails


@attrs.define
class Kit:
    """One store's three parts. ``sessions`` is ``Any``: tests use its optional capabilities."""

    kind: str
    sessions: Any
    checkpoints: CheckpointStore
    approvals: ApprovalStore
    close: Callable[[], None]


#: the keys of the "sqlite-encrypted" kind (its processes must agree on them)
ENCRYPTION_KEYS = {"crash-key": bytes(range(100, 132))}


def open_kit(kind: str, location: Path) -> Kit:
    """A new store of ``kind`` keeping its files (if any) under the directory ``location``."""
    if kind == "memory":
        leases = LocalLeases()  # shared, as memory_store() does, so that writes check fences
        return Kit(
            kind,
            MemorySessionStore(leases=leases),
            MemoryCheckpointStore(leases=leases),
            MemoryApprovalStore(leases=leases),
            lambda: None,
        )
    if kind == "files":
        return Kit(
            kind,
            FileSessionStore(location),
            FileCheckpointStore(location),
            FileApprovalStore(location),
            lambda: None,
        )
    if kind in ("sqlite", "sqlite-memory"):
        db = SqliteStore(":memory:" if kind == "sqlite-memory" else location / "store.db")
        return Kit(kind, db.sessions, db.checkpoints, db.approvals, db.close)
    if kind == "sqlite-encrypted":  # not in KINDS: tests/test_encryption.py runs it
        db = SqliteStore(location / "store.db", encryption=ENCRYPTION_KEYS)
        return Kit(kind, db.sessions, db.checkpoints, db.approvals, db.close)
    if kind == "redis":  # not in KINDS: tests/test_redis.py runs it, with its own cleanup
        from services_redis import prefix_for, redis_url

        from lousho_sessions.redis import RedisStore

        store = RedisStore(redis_url(), prefix=prefix_for(location), lease_ttl=REDIS_LEASE_TTL)
        return Kit(kind, store.sessions, store.checkpoints, store.approvals, store.close)
    raise ValueError(f"unknown store kind {kind!r}")


def second_turn_until_killed(open_store: Callable[[], Any], out: Queue[Any], wait: float) -> None:
    """A worker process's body: on the store ``open_store()`` opens, session "warm" takes one
    turn, then a second whose model call waits ``wait`` s (the test kills the process there,
    once it reads ``("inside", "model")`` from ``out``). The second turn's session has read
    its transcript, so its lease is taken together with the turn's first checkpoint
    (``take_turn``). Errors go to ``out`` as ``("error", traceback)``."""
    try:
        store = open_store()

        def model(request: ModelRequest) -> Message:
            if request.messages[-1].text == "second":
                out.put(("inside", "model"))
                threading.Event().wait(wait)  # nothing sets it: the test kills this process
            return Message.assistant("first answer")

        session = create_agent(provider=FunctionProvider(model), store=store).session("warm")
        session.send("first")
        session.send("second")
    except BaseException:
        out.put(("error", traceback.format_exc()))
