"""The store contract, run over every store through the ``store`` fixture."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from storekit import WAIT, Kit

from lousho_sessions.errors import (
    ApprovalAlreadyResolvedError,
    ApprovalNotFoundError,
    InvalidSessionIdError,
    SessionBusyError,
    StoreConflictError,
)
from lousho_sessions.messages import ImagePart, Message, TextPart, ToolCall, Usage
from lousho_sessions.serde import message_from_dict, message_to_dict
from lousho_sessions.stores.base import (
    APPROVAL_ID_PATTERN,
    SESSION_ID_PATTERN,
    TURN_ID_PATTERN,
    ApprovalStore,
    CheckpointStore,
    SessionStore,
)

BAD_SESSION_IDS = ["../x", "a/b", "", "a" * 129, "a.b", "a b"]
BAD_TURN_IDS = ["../x.turn-1", "a/b.turn-1", "", "a" * 129 + ".turn-1", "noturn", "a.b.c"]
BAD_APPROVAL_IDS = ["a/b", "", "x" * 201, "../x", ".hidden", "."]


def turn(n: int) -> list[Message]:
    return [Message.user(f"q{n}"), Message.assistant(f"a{n}", usage=Usage(3, 4, 0.01))]


def rich_message() -> Message:
    return Message.assistant(
        (TextPart("see"), ImagePart(data=b"\x00\xffpng", media_type="image/png")),
        tool_calls=(ToolCall("c1", "lookup", {"q": ["x", 1, None], "deep": {"a": 1.5}}),),
        usage=Usage(10, 20, 0.25),
        metadata={"trace": "t-1"},
    )


# -- capabilities -----------------------------------------------------------------------


def test_parts_satisfy_the_protocols(store: Kit) -> None:
    assert isinstance(store.sessions, SessionStore)
    assert isinstance(store.checkpoints, CheckpointStore)
    assert isinstance(store.approvals, ApprovalStore)


def test_optional_capabilities(store: Kit) -> None:
    assert callable(store.sessions.append)
    assert callable(store.sessions.revision)
    # The in-memory store needs no turn lock: one process, one worker per (store, id).
    assert callable(getattr(store.sessions, "turn_lock", None)) == (store.kind != "memory")


def needs_turn_lock(store: Kit) -> None:
    if store.kind == "memory":
        pytest.skip("MemorySessionStore has no turn_lock (single process)")


# -- sessions -------------------------------------------------------------------------------


def test_unknown_id_loads_none(store: Kit) -> None:
    assert store.sessions.load("nobody") is None
    assert store.sessions.revision("nobody") is None


def test_save_load_round_trip(store: Kit) -> None:
    messages = [*turn(1), rich_message(), Message.tool("c1", "found", is_error=True)]
    store.sessions.save("s1", messages)
    assert store.sessions.load("s1") == messages
    assert store.sessions.load("other") is None


def test_save_replaces(store: Kit) -> None:
    store.sessions.save("s1", turn(1) + turn(2))
    store.sessions.save("s1", turn(3))
    loaded = store.sessions.load("s1")
    assert loaded is not None
    assert [m.text for m in loaded] == ["q3", "a3"]


def test_empty_transcript_is_not_unknown(store: Kit) -> None:
    store.sessions.save("s1", [])
    assert store.sessions.load("s1") == []
    assert store.sessions.revision("s1") is not None


def test_save_rejects_non_messages(store: Kit) -> None:
    with pytest.raises(TypeError, match="s1"):
        store.sessions.save("s1", [{"role": "user"}])
    assert store.sessions.load("s1") is None


def test_delete(store: Kit) -> None:
    second = turn(2)
    store.sessions.save("s1", turn(1))
    store.sessions.save("s2", second)
    store.sessions.delete("s1")
    store.sessions.delete("s1")
    store.sessions.delete("never")
    assert store.sessions.load("s1") is None
    assert store.sessions.revision("s1") is None
    assert store.sessions.load("s2") == second


def test_append(store: Kit) -> None:
    first, second = turn(1), turn(2)
    store.sessions.append("s1", first, 0)
    store.sessions.append("s1", second, 2)
    assert store.sessions.load("s1") == first + second


def test_append_conflict_leaves_transcript(store: Kit) -> None:
    store.sessions.save("s1", turn(1))
    before = store.sessions.revision("s1")
    for expected in (0, 1, 3):
        with pytest.raises(StoreConflictError, match=f"expected {expected} stored messages"):
            store.sessions.append("s1", turn(2), expected)
    assert [m.text for m in store.sessions.load("s1") or []] == ["q1", "a1"]
    assert store.sessions.revision("s1") == before


def test_failed_append_creates_nothing(store: Kit) -> None:
    with pytest.raises(StoreConflictError):
        store.sessions.append("fresh", turn(2), 1)
    assert store.sessions.load("fresh") is None
    assert store.sessions.revision("fresh") is None


def test_append_after_save_and_delete(store: Kit) -> None:
    store.sessions.save("s1", turn(1))
    store.sessions.append("s1", turn(2), 2)
    store.sessions.delete("s1")
    store.sessions.append("s1", turn(3), 0)
    assert [m.text for m in store.sessions.load("s1") or []] == ["q3", "a3"]


def test_revision_changes_with_every_write(store: Kit) -> None:
    seen = []
    store.sessions.save("s1", turn(1))
    seen.append(store.sessions.revision("s1"))
    assert store.sessions.revision("s1") == seen[-1]  # reading does not change it
    store.sessions.load("s1")
    assert store.sessions.revision("s1") == seen[-1]
    store.sessions.append("s1", turn(2), 2)
    seen.append(store.sessions.revision("s1"))
    store.sessions.save("s1", turn(1))  # the same content again is still a write
    seen.append(store.sessions.revision("s1"))
    store.sessions.append("s1", [], 2)
    seen.append(store.sessions.revision("s1"))
    store.sessions.delete("s1")
    assert store.sessions.revision("s1") is None
    store.sessions.save("s1", turn(1))
    seen.append(store.sessions.revision("s1"))
    assert None not in seen
    assert len(set(seen)) == len(seen)


def test_revision_is_per_session(store: Kit) -> None:
    store.sessions.save("s1", turn(1))
    store.sessions.save("s2", turn(1))
    before = store.sessions.revision("s1")
    store.sessions.append("s2", turn(2), 2)
    assert store.sessions.revision("s1") == before


def test_unknown_message_fields_round_trip(store: Kit) -> None:
    data = message_to_dict(rich_message())
    data["from_the_future"] = {"nested": [1, 2]}
    data["content"][0]["highlight"] = True
    data["content"][1]["alt"] = "a picture"
    data["tool_calls"][0]["strict"] = False
    message = message_from_dict(data)
    store.sessions.save("s1", [message])
    store.sessions.append("s1", [message], 1)
    loaded = store.sessions.load("s1")
    assert loaded is not None
    assert [message_to_dict(m) for m in loaded] == [data, data]


# -- turn lock ---------------------------------------------------------------------------------


def test_turn_lock_excludes_other_threads(store: Kit) -> None:
    needs_turn_lock(store)
    held, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def holder() -> None:
        try:
            with store.sessions.turn_lock("s1"):
                held.set()
                assert release.wait(WAIT)
        except BaseException as exc:  # reported below
            errors.append(exc)
            held.set()

    thread = threading.Thread(target=holder)
    thread.start()
    assert held.wait(WAIT)
    with pytest.raises(SessionBusyError, match="s1"), store.sessions.turn_lock("s1", timeout=0.05):
        pass
    with store.sessions.turn_lock("s2", timeout=WAIT):  # another session is not held
        pass
    release.set()
    thread.join(WAIT)
    assert not errors
    with store.sessions.turn_lock("s1", timeout=WAIT):
        pass


def test_turn_lock_is_released_on_error(store: Kit) -> None:
    needs_turn_lock(store)
    with pytest.raises(RuntimeError), store.sessions.turn_lock("s1"):
        raise RuntimeError("turn failed")
    with store.sessions.turn_lock("s1", timeout=WAIT):
        pass


def test_turns_under_lock_lose_nothing(store: Kit) -> None:
    needs_turn_lock(store)
    threads, turns = 4, 10
    barrier = threading.Barrier(threads, timeout=WAIT)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            barrier.wait()
            for i in range(turns):
                with store.sessions.turn_lock("shared", timeout=WAIT):
                    length = len(store.sessions.load("shared") or [])
                    store.sessions.append(
                        "shared", [Message.user(f"{n}-{i}"), Message.assistant(f"{n}-{i}")], length
                    )
        except BaseException as exc:  # reported below
            errors.append(exc)

    pool = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(WAIT)
    assert not errors
    messages = store.sessions.load("shared") or []
    assert len(messages) == 2 * threads * turns
    for user, assistant in zip(messages[::2], messages[1::2], strict=True):
        assert (user.role, assistant.role) == ("user", "assistant")
        assert user.text == assistant.text


# -- invalid ids ---------------------------------------------------------------------------------


def session_calls(store: Kit) -> dict[str, Callable[[str], Any]]:
    calls: dict[str, Callable[[str], Any]] = {
        "load": store.sessions.load,
        "save": lambda i: store.sessions.save(i, turn(1)),
        "delete": store.sessions.delete,
        "append": lambda i: store.sessions.append(i, turn(1), 0),
        "revision": store.sessions.revision,
    }
    if store.kind != "memory":
        calls["turn_lock"] = lambda i: store.sessions.turn_lock(i).__enter__()
    return calls


@pytest.mark.parametrize("bad", BAD_SESSION_IDS)
def test_invalid_session_ids(store: Kit, bad: str, tmp_path: Path) -> None:
    for name, call in session_calls(store).items():
        with pytest.raises(InvalidSessionIdError) as info:
            call(bad)
        assert SESSION_ID_PATTERN in str(info.value), name
        assert isinstance(info.value, ValueError)
    # nothing was written outside the store's directory (files: "../x" would be tmp_path/x.json)
    assert {p.name for p in tmp_path.iterdir()} <= {"store"}


def test_longest_session_id_is_valid(store: Kit) -> None:
    sid = "a" * 128
    store.sessions.save(sid, turn(1))
    assert store.sessions.load(sid) is not None
    store.checkpoints.save(f"{sid}.turn-0", {"step": 1})
    assert store.checkpoints.list(sid) == [f"{sid}.turn-0"]


@pytest.mark.parametrize("bad", BAD_TURN_IDS)
def test_invalid_checkpoint_ids(store: Kit, bad: str) -> None:
    calls: list[Callable[[], Any]] = [
        lambda: store.checkpoints.load(bad),
        lambda: store.checkpoints.save(bad, {}),
        lambda: store.checkpoints.delete(bad),
    ]
    for call in calls:
        with pytest.raises(InvalidSessionIdError) as info:
            call()
        assert TURN_ID_PATTERN in str(info.value)


@pytest.mark.parametrize("bad", BAD_APPROVAL_IDS)
def test_invalid_approval_ids(store: Kit, bad: str) -> None:
    calls: list[Callable[[], Any]] = [
        lambda: store.approvals.create({"id": bad, "session_id": "s1", "status": "pending"}),
        lambda: store.approvals.get(bad),
        lambda: store.approvals.resolve(bad, approved=True),
        lambda: store.approvals.delete(bad),
    ]
    for call in calls:
        with pytest.raises(InvalidSessionIdError) as info:
            call()
        assert APPROVAL_ID_PATTERN in str(info.value)


# -- checkpoints --------------------------------------------------------------------------------


def test_checkpoints(store: Kit) -> None:
    cp = store.checkpoints
    assert cp.load("s1.turn-0") is None
    assert cp.list() == []
    cp.save("s1.turn-2", {"step": 1, "messages": [{"role": "user"}]})
    cp.save("s1.turn-0", {"step": 0})
    cp.save("s10.turn-0", {"step": 0})
    cp.save("s2.send", {"step": 0})
    cp.save("s1.turn-2", {"step": 2})
    assert cp.load("s1.turn-2") == {"step": 2}
    assert cp.list() == ["s1.turn-0", "s1.turn-2", "s10.turn-0", "s2.send"]
    assert cp.list("s1.") == ["s1.turn-0", "s1.turn-2"]
    assert cp.list("s1") == ["s1.turn-0", "s1.turn-2", "s10.turn-0"]
    assert cp.list("zzz") == []
    cp.delete("s1.turn-0")
    cp.delete("s1.turn-0")
    assert cp.load("s1.turn-0") is None
    assert cp.list("s1.") == ["s1.turn-2"]


def test_checkpoint_unknown_fields_round_trip(store: Kit) -> None:
    checkpoint = {
        "version": 7,
        "future": {"a": [1, 2.5, None, True, "x"], "b": {}},
        "unicode": "é\u2028\U0001f600",
    }
    store.checkpoints.save("s1.turn-3", checkpoint)
    assert store.checkpoints.load("s1.turn-3") == checkpoint


def test_checkpoint_must_be_json(store: Kit) -> None:
    with pytest.raises(TypeError, match=r"s1\.turn-0"):
        store.checkpoints.save("s1.turn-0", {"x": object()})
    with pytest.raises(TypeError):
        store.checkpoints.save("s1.turn-0", [1, 2])  # type: ignore[arg-type]
    assert store.checkpoints.load("s1.turn-0") is None


# -- approvals ---------------------------------------------------------------------------------


def approval(
    id: str, session_id: str = "s1", created_at: str = "2025-01-01T00:00:00"
) -> dict[str, Any]:
    return {
        "id": id,
        "session_id": session_id,
        "status": "pending",
        "created_at": created_at,
        "call": {"id": "c1", "name": "delete_file", "arguments": {"path": "/tmp/x"}},
        "future_field": [1, {"x": None}],
    }


def test_approvals_create_get_list(store: Kit) -> None:
    ap = store.approvals
    assert ap.get("a1") is None
    assert ap.list() == []
    ap.create(approval("a2", created_at="2025-01-02"))
    ap.create(approval("a1", created_at="2025-01-03"))
    ap.create(approval("b1", session_id="s2", created_at="2025-01-01"))
    assert ap.get("a1") == approval("a1", created_at="2025-01-03")
    assert [r["id"] for r in ap.list()] == ["b1", "a2", "a1"]
    assert [r["id"] for r in ap.list(session_id="s1")] == ["a2", "a1"]
    assert ap.list(status="approved") == []
    with pytest.raises(ValueError, match="a1"):
        ap.create(approval("a1"))


def test_approval_resolve(store: Kit) -> None:
    ap = store.approvals
    ap.create(approval("a1"))
    ap.create(approval("a2"))
    record = ap.resolve("a1", approved=True, reason="fine")
    assert record["status"] == "approved"
    assert record["reason"] == "fine"
    assert isinstance(record["resolved_at"], str)
    assert record["future_field"] == [1, {"x": None}]
    assert ap.get("a1") == record
    denied = ap.resolve("a2", approved=False)
    assert (denied["status"], denied["reason"]) == ("denied", None)
    with pytest.raises(ApprovalAlreadyResolvedError, match="a1"):
        ap.resolve("a1", approved=False)
    assert ap.get("a1") == record
    with pytest.raises(ApprovalNotFoundError, match="nope"):
        ap.resolve("nope", approved=True)
    assert ap.list() == []
    assert [r["id"] for r in ap.list(status=None)] == ["a1", "a2"]
    assert [r["id"] for r in ap.list(status="denied")] == ["a2"]


def test_approval_delete(store: Kit) -> None:
    store.approvals.create(approval("a1"))
    store.approvals.delete("a1")
    store.approvals.delete("a1")
    assert store.approvals.get("a1") is None
    with pytest.raises(ApprovalNotFoundError):
        store.approvals.resolve("a1", approved=True)
    store.approvals.create(approval("a1"))  # the id is free again
    assert store.approvals.get("a1") is not None


def test_approval_resolve_has_exactly_one_winner(store: Kit) -> None:
    store.approvals.create(approval("a1"))
    threads = 12
    barrier = threading.Barrier(threads, timeout=WAIT)
    outcomes: list[str] = []
    lock = threading.Lock()

    def resolver(n: int) -> None:
        barrier.wait()
        try:
            store.approvals.resolve("a1", approved=n % 2 == 0, reason=f"r{n}")
            outcome = f"won:{n}"
        except ApprovalAlreadyResolvedError:
            outcome = "lost"
        except BaseException as exc:  # reported below
            outcome = f"error:{exc!r}"
        with lock:
            outcomes.append(outcome)

    pool = [threading.Thread(target=resolver, args=(n,)) for n in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(WAIT)
    winners = [o for o in outcomes if o.startswith("won:")]
    assert len(outcomes) == threads
    assert len(winners) == 1, outcomes
    assert outcomes.count("lost") == threads - 1
    record = store.approvals.get("a1")
    assert record is not None
    assert record["reason"] == f"r{winners[0].split(':')[1]}"
