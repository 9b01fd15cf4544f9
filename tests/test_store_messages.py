"""What the conformance kit leaves out for our stores: the wording of their errors.

The kit (``tests/test_store_kit.py``) checks behaviour and error types; these
check that our stores' messages name what was wrong and with what.
"""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

import pytest
from storekit import WAIT, Kit, open_kit

from lousho_sessions.errors import (
    ApprovalAlreadyResolvedError,
    ApprovalNotFoundError,
    InvalidSessionIdError,
    LeaseLostError,
    SessionBusyError,
    StoreConflictError,
)
from lousho_sessions.messages import Message
from lousho_sessions.stores.base import APPROVAL_ID_PATTERN, SESSION_ID_PATTERN, TURN_ID_PATTERN


def turn(n: int) -> list[Message]:
    return [Message.user(f"q{n}"), Message.assistant(f"a{n}")]


def test_session_errors_name_the_session(store: Kit) -> None:
    with pytest.raises(TypeError, match="s1"):
        store.sessions.save("s1", [{"role": "user"}])
    store.sessions.save("s1", turn(1))
    for expected in (0, 1, 3):
        with pytest.raises(StoreConflictError, match=f"expected {expected} stored messages"):
            store.sessions.append("s1", turn(2), expected)
    with pytest.raises(InvalidSessionIdError) as info:
        store.sessions.load("../x")
    assert SESSION_ID_PATTERN in str(info.value)
    with pytest.raises(InvalidSessionIdError) as info:
        store.sessions.turn_lock("a b")
    assert SESSION_ID_PATTERN in str(info.value)


def test_busy_and_lost_leases_name_the_session(store: Kit) -> None:
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with store.sessions.turn_lock("s1"):
            held.set()
            release.wait(WAIT)

    thread = threading.Thread(target=holder)
    thread.start()
    assert held.wait(WAIT)
    with pytest.raises(SessionBusyError, match="s1"):
        store.sessions.turn_lock("s1", timeout=0.05)
    release.set()
    thread.join(WAIT)
    with store.sessions.turn_lock("s1", timeout=WAIT) as first:
        pass
    with store.sessions.turn_lock("s1", timeout=WAIT) as second:
        pass
    with pytest.raises(LeaseLostError, match=rf"'s1'.*fence {first.fence}.*{second.fence}"):
        store.sessions.append("s1", turn(1), 0, fence=first.fence)
    with pytest.raises(LeaseLostError, match=rf"'s1'.*fence {first.fence}"):
        first.check()
    assert LeaseLostError.code == "LOUSHO_LEASE_LOST"


def test_record_errors_name_the_record(store: Kit) -> None:
    with pytest.raises(TypeError, match=r"s1\.turn-0"):
        store.checkpoints.save("s1.turn-0", {"x": object()})
    with pytest.raises(InvalidSessionIdError) as info:
        store.checkpoints.load("noturn")
    assert TURN_ID_PATTERN in str(info.value)
    with pytest.raises(InvalidSessionIdError) as info:
        store.approvals.get("a/b")
    assert APPROVAL_ID_PATTERN in str(info.value)
    record = {"id": "a1", "session_id": "s1", "status": "pending"}
    store.approvals.create(record)
    with pytest.raises(ValueError, match="a1"):
        store.approvals.create(record)
    store.approvals.resolve("a1", approved=True)
    with pytest.raises(ApprovalAlreadyResolvedError, match="a1"):
        store.approvals.resolve("a1", approved=False)
    with pytest.raises(ApprovalNotFoundError, match="nope"):
        store.approvals.resolve("nope", approved=True)


def test_storekit_refuses_unknown_kinds() -> None:
    with pytest.raises(ValueError):
        open_kit("nonsense", Path(tempfile.gettempdir()))
