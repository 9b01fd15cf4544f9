"""The kit's tests of checkpoints and approval records."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from ..errors import (
    ApprovalAlreadyResolvedError,
    ApprovalDecisionError,
    ApprovalNotFoundError,
    InvalidSessionIdError,
)
from ..stores.adapters import takes_arguments
from ..stores.base import ApprovalStore, CheckpointStore
from ._base import KitBase, need_approvals, need_checkpoints
from ._support import WAIT, approval, raises, skip

BAD_TURN_IDS = ["../x.turn-1", "a/b.turn-1", "", "a" * 129 + ".turn-1", "noturn", "a.b.c"]
BAD_APPROVAL_IDS = ["a/b", "", "x" * 201, "../x", ".hidden", "."]


class CheckpointTests(KitBase):
    """Checkpoints: opaque JSON objects keyed by turn id."""

    def test_checkpoints_follow_the_protocol(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            assert isinstance(need_checkpoints(parts), CheckpointStore)

    def test_checkpoints(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            cp = need_checkpoints(parts)
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
            cp.save("s1.turn-2-r1-1", {"results": {}})  # a result record: not a turn
            assert cp.pending_turns() == ["s1.turn-0", "s1.turn-2", "s10.turn-0", "s2.send"]
            assert dict(cp.pending_checkpoints()) == {
                "s1.turn-0": {"step": 0},
                "s1.turn-2": {"step": 2},
                "s10.turn-0": {"step": 0},
                "s2.send": {"step": 0},
            }
            cp.save("s2.send", {"step": 3, "status": "running", "note": None, "big": [1]})
            assert dict(cp.pending_fields(["step", "status", "note", "absent"])) == {
                "s1.turn-0": {"step": 0},
                "s1.turn-2": {"step": 2},
                "s10.turn-0": {"step": 0},
                "s2.send": {"step": 3, "status": "running", "note": None},
            }
            assert dict(cp.pending_fields(["absent"]))["s2.send"] == {}
            cp.delete("s1.turn-2-r1-1")
            cp.delete("s1.turn-0")
            cp.delete("s1.turn-0")
            assert cp.load("s1.turn-0") is None
            assert cp.list("s1.") == ["s1.turn-2"]

    def test_checkpoint_unknown_fields_round_trip(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            cp = need_checkpoints(parts)
            checkpoint = {
                "version": 7,
                "future": {"a": [1, 2.5, None, True, "x"], "b": {}},
                "unicode": "é\u2028\U0001f600",
            }
            cp.save("s1.turn-3", checkpoint)
            assert cp.load("s1.turn-3") == checkpoint

    def test_checkpoint_must_be_json(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            cp = need_checkpoints(parts)
            with raises(TypeError):
                cp.save("s1.turn-0", {"x": object()})
            with raises(TypeError):
                cp.save("s1.turn-0", [1, 2])  # type: ignore[arg-type]
            assert cp.load("s1.turn-0") is None

    def test_invalid_checkpoint_ids(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            cp = need_checkpoints(parts)
            for bad in BAD_TURN_IDS:
                calls: list[Callable[[], Any]] = [
                    lambda: cp.load(bad),  # noqa: B023 - called at once
                    lambda: cp.save(bad, {}),  # noqa: B023
                    lambda: cp.delete(bad),  # noqa: B023
                ]
                for call in calls:
                    with raises(InvalidSessionIdError):
                        call()
            assert cp.list() == []

    def test_reopened_store_keeps_checkpoints(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            need_checkpoints(parts).save("s1.turn-0", {"step": 3, "x": [1]})
        with self.reopened(tmp_path) as again:
            assert need_checkpoints(again).load("s1.turn-0") == {"step": 3, "x": [1]}
            assert need_checkpoints(again).list() == ["s1.turn-0"]

    def test_prune_checkpoints(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            cp = need_checkpoints(parts)
            try:
                cp.prune(timedelta(days=1))
            except NotImplementedError:
                skip(f"{type(cp).__name__} does not implement prune()")
            cp.save("s1.turn-0", {"step": 0})
            assert cp.prune(timedelta(days=1)).checkpoints == 0
            assert cp.prune(0).checkpoints == 1
            assert cp.list() == []


class ApprovalTests(KitBase):
    """Approval records; ``resolve`` is a compare-and-set with exactly one winner."""

    def test_approvals_follow_the_protocol(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            assert isinstance(need_approvals(parts), ApprovalStore)

    def test_approvals_create_get_list(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            ap = need_approvals(parts)
            assert ap.get("a1") is None
            assert ap.list() == []
            ap.create(approval("a2", created_at="2025-01-02"))
            ap.create(approval("a1", created_at="2025-01-03"))
            ap.create(approval("b1", session_id="s2", created_at="2025-01-01"))
            assert ap.get("a1") == approval("a1", created_at="2025-01-03")
            assert [r["id"] for r in ap.list()] == ["b1", "a2", "a1"]
            assert [r["id"] for r in ap.list(session_id="s1")] == ["a2", "a1"]
            assert ap.list(status="approved") == []
            with raises(ValueError):
                ap.create(approval("a1"))
            assert ap.get("a1") == approval("a1", created_at="2025-01-03")

    def test_approval_resolve(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            ap = need_approvals(parts)
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
            with raises(ApprovalAlreadyResolvedError):
                ap.resolve("a1", approved=False)
            assert ap.get("a1") == record
            with raises(ApprovalNotFoundError) as caught:
                ap.resolve("nope", approved=True)
            assert isinstance(caught[0], LookupError)
            assert ap.list() == []
            assert [r["id"] for r in ap.list(status=None)] == ["a1", "a2"]
            assert [r["id"] for r in ap.list(status="denied")] == ["a2"]

    def test_approval_resolve_with_edited_arguments(self, tmp_path: Path) -> None:
        """Approving with ``arguments`` keeps them in the record, in the same compare-and-set;
        the model's stay in ``call``; a denial with arguments changes nothing."""
        edited = {"path": "/tmp/y", "deep": [1, {"x": None, "ü": 2.5}], "flag": False}
        with self.store(tmp_path) as parts:
            ap = need_approvals(parts)
            if not takes_arguments(ap):
                skip(f"{type(ap).__name__}.resolve() takes no arguments=")
            ap.create(approval("a1"))
            ap.create(approval("a2"))
            resolve: Any = ap.resolve  # the Protocol's resolve has no arguments=
            with raises(ApprovalDecisionError):
                resolve("a2", approved=False, arguments=edited)
            assert ap.get("a2") == approval("a2")  # nothing changed
            record = resolve("a1", approved=True, reason="smaller", arguments=edited)
            assert (record["status"], record["reason"]) == ("approved", "smaller")
            assert record["arguments"] == edited
            assert record["call"] == approval("a1")["call"]  # the model's arguments
            assert record["future_field"] == [1, {"x": None}]
            assert ap.get("a1") == record
            with raises(ApprovalAlreadyResolvedError):
                resolve("a1", approved=True, arguments={"path": "/other"})
            assert ap.get("a1") == record
            plain = ap.resolve("a2", approved=True)
            assert "arguments" not in plain or plain["arguments"] is None

    def test_approval_delete(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            ap = need_approvals(parts)
            ap.create(approval("a1"))
            ap.delete("a1")
            ap.delete("a1")
            assert ap.get("a1") is None
            with raises(ApprovalNotFoundError):
                ap.resolve("a1", approved=True)
            ap.create(approval("a1"))  # the id is free again
            assert ap.get("a1") is not None

    def test_invalid_approval_ids(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            ap = need_approvals(parts)
            for bad in BAD_APPROVAL_IDS:
                calls: list[Callable[[], Any]] = [
                    lambda: ap.create({"id": bad, "session_id": "s1", "status": "pending"}),  # noqa: B023
                    lambda: ap.get(bad),  # noqa: B023
                    lambda: ap.resolve(bad, approved=True),  # noqa: B023
                    lambda: ap.delete(bad),  # noqa: B023
                ]
                for call in calls:
                    with raises(InvalidSessionIdError):
                        call()
            assert ap.list(status=None) == []

    def test_approval_resolve_has_exactly_one_winner(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            ap = need_approvals(parts)
            ap.create(approval("a1"))
            threads = 12
            barrier = threading.Barrier(threads, timeout=WAIT)
            outcomes: list[str] = []
            lock = threading.Lock()

            def resolver(n: int) -> None:
                barrier.wait()
                try:
                    ap.resolve("a1", approved=n % 2 == 0, reason=f"r{n}")
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
            assert len(outcomes) == threads, outcomes
            assert len(winners) == 1, outcomes
            assert outcomes.count("lost") == threads - 1, outcomes
            record = ap.get("a1")
            assert record is not None
            assert record["reason"] == f"r{winners[0].split(':')[1]}"

    def test_reopened_store_keeps_approvals(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            need_approvals(parts).create(approval("a1"))
            need_approvals(parts).create(approval("a2"))
            resolved = need_approvals(parts).resolve("a2", approved=False, reason="no")
            edited = None
            if takes_arguments(need_approvals(parts)):
                need_approvals(parts).create(approval("a3"))
                resolve: Any = need_approvals(parts).resolve
                edited = resolve("a3", approved=True, arguments={"path": "/tmp/y"})
        with self.reopened(tmp_path) as again:
            ap = need_approvals(again)
            assert ap.get("a1") == approval("a1")
            assert ap.get("a2") == resolved
            if edited is not None:
                assert ap.get("a3") == edited and edited["arguments"] == {"path": "/tmp/y"}
            with raises(ApprovalAlreadyResolvedError):
                ap.resolve("a2", approved=True)

    def test_prune_approvals(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            ap = need_approvals(parts)
            try:
                ap.prune(timedelta(days=1))
            except NotImplementedError:
                skip(f"{type(ap).__name__} does not implement prune()")
            ap.create(approval("pending"))
            ap.create(approval("done"))
            ap.resolve("done", approved=True)
            assert ap.prune(timedelta(days=1)).approvals == 0
            assert ap.prune(0).approvals == 1
            assert [r["id"] for r in ap.list(status=None)] == ["pending"]
