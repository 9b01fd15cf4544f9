"""The kit's tests of the turn lock: leases, fences, threads, and other processes."""

from __future__ import annotations

import multiprocessing
import pickle
import threading
from pathlib import Path
from typing import Any

from ..errors import LeaseLostError, SessionBusyError
from ..messages import Message
from ..stores.base import BaseSessionStore, StartCheckpoint, TakeTurn
from . import _workers
from ._base import KitBase, need_approvals, need_checkpoints, need_sessions
from ._support import WAIT, approval, raises, skip, texts, tracks_revisions, turn

_SPAWN = multiprocessing.get_context("spawn")


def need_fenced(part: object) -> None:
    if not part.fenced_writes:  # type: ignore[attr-defined]
        skip(
            f"{type(part).__name__} declares fenced_writes = False: its writes do not check fences"
        )


def stale_and_current(sessions: BaseSessionStore, id: str) -> tuple[int, int]:
    """Two fences of ``id`` taken in turn: the first is stale once the second is handed out."""
    with sessions.turn_lock(id, timeout=WAIT) as first:
        pass
    with sessions.turn_lock(id, timeout=WAIT) as second:
        pass
    assert second.fence > first.fence
    return first.fence, second.fence


class LeaseTests(KitBase):
    """``turn_lock`` returns a ``Lease``; writes carrying a stale fence change nothing."""

    def test_lease_is_a_context_manager_with_a_fence(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            lease = sessions.turn_lock("s1", timeout=WAIT)
            with lease as entered:
                assert entered is lease
                assert lease.session_id == "s1"
                assert isinstance(lease.fence, int)
                assert not lease.lost
                lease.check()
            assert lease.lost
            with raises(LeaseLostError):
                lease.check()
            lease.release()  # idempotent
            assert lease.lost

    def test_fences_grow(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            fences = []
            for _ in range(3):
                with sessions.turn_lock("s1", timeout=WAIT) as lease:
                    fences.append(lease.fence)
            with sessions.turn_lock("s2", timeout=WAIT):  # another session's lease
                pass
            with sessions.turn_lock("s1", timeout=WAIT) as lease:
                fences.append(lease.fence)
            assert fences == sorted(set(fences)), fences

    def test_turn_lock_excludes_other_threads(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            held, release = threading.Event(), threading.Event()
            errors: list[BaseException] = []

            def holder() -> None:
                try:
                    with sessions.turn_lock("s1"):
                        held.set()
                        assert release.wait(WAIT)
                except BaseException as exc:  # reported below
                    errors.append(exc)
                    held.set()

            thread = threading.Thread(target=holder)
            thread.start()
            assert held.wait(WAIT)
            with raises(SessionBusyError):
                sessions.turn_lock("s1", timeout=0.05)
            with sessions.turn_lock("s2", timeout=WAIT):  # another session is not held
                pass
            release.set()
            thread.join(WAIT)
            assert not errors, errors
            with sessions.turn_lock("s1", timeout=WAIT):
                pass

    def test_turn_held_and_claim_stale_leave_a_held_session_alone(self, tmp_path: Path) -> None:
        """What a sweep relies on: ``turn_held`` (and ``held_sessions`` of many) tells a held
        session (``None``: cannot tell) without taking it; ``claim_stale`` takes only the free ones, with new fences."""
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            with sessions.turn_lock("s1", timeout=WAIT) as held:
                assert sessions.turn_held("s1") in (True, None)
                assert sessions.turn_held("s2") in (False, None)
                assert sessions.held_sessions(["s1", "s2", "s1"]) in ({"s1"}, None)
                assert sessions.held_sessions([]) in (set(), None)
                claimed = sessions.claim_stale(["s1", "s2", "s2"])
                try:
                    assert sorted(claimed) == ["s2"]
                    assert sessions.turn_held("s2") in (True, None)
                    assert sessions.held_sessions(["s2", "s3"]) in ({"s2"}, None)
                    with raises(SessionBusyError):
                        sessions.turn_lock("s2", timeout=0.05)
                finally:
                    for lease in claimed.values():
                        lease.release()
            assert sessions.turn_held("s1") in (False, None)
            assert sessions.held_sessions(["s1", "s2"]) in (set(), None)
            claimed = sessions.claim_stale(["s1"])
            try:
                assert sorted(claimed) == ["s1"] and claimed["s1"].fence > held.fence
            finally:
                for lease in claimed.values():
                    lease.release()

    def test_waiting_turn_lock_gets_it_on_release(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            first = sessions.turn_lock("s1", timeout=WAIT)
            waiting, got = threading.Event(), threading.Event()
            fences: list[int] = []

            def waiter() -> None:
                waiting.set()
                with sessions.turn_lock("s1", timeout=WAIT) as lease:
                    fences.append(lease.fence)
                    got.set()

            thread = threading.Thread(target=waiter)
            thread.start()
            assert waiting.wait(WAIT)
            assert not got.wait(0.05)  # still blocked while the lease is held
            first.release()
            assert got.wait(WAIT)
            thread.join(WAIT)
            assert fences and fences[0] > first.fence

    def test_turn_lock_is_released_on_error(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            with raises(RuntimeError), sessions.turn_lock("s1"):
                raise RuntimeError("turn failed")
            with sessions.turn_lock("s1", timeout=WAIT):
                pass

    def test_turns_under_lock_lose_nothing(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            threads, turns = 4, 10
            barrier = threading.Barrier(threads, timeout=WAIT)
            errors: list[BaseException] = []

            def worker(n: int) -> None:
                try:
                    barrier.wait()
                    for i in range(turns):
                        with sessions.turn_lock("shared", timeout=WAIT) as lease:
                            length = len(sessions.load("shared") or [])
                            new = [Message.user(f"{n}-{i}"), Message.assistant(f"{n}-{i}")]
                            sessions.append("shared", new, length, fence=lease.fence)
                except BaseException as exc:  # reported below
                    errors.append(exc)

            pool = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
            for t in pool:
                t.start()
            for t in pool:
                t.join(WAIT)
            assert not errors, errors
            messages = sessions.load("shared") or []
            assert len(messages) == 2 * threads * turns
            for user, assistant in zip(messages[::2], messages[1::2], strict=True):
                assert (user.role, assistant.role) == ("user", "assistant")
                assert user.text == assistant.text

    def test_stale_fence_append_changes_nothing(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            need_fenced(sessions)
            sessions.save("s1", turn(1))
            stale, current = stale_and_current(sessions, "s1")
            before = sessions.revision("s1")
            with raises(LeaseLostError):
                sessions.append("s1", turn(2), 2, fence=stale)
            assert texts(sessions.load("s1")) == ["q1", "a1"]
            if tracks_revisions(sessions):
                assert sessions.revision("s1") == before
            sessions.append("s1", turn(2), 2, fence=current)
            sessions.append("s1", turn(3), 4, fence=None)  # not written under a lease
            assert texts(sessions.load("s1")) == ["q1", "a1", "q2", "a2", "q3", "a3"]

    def test_take_turn_saves_only_a_turn_nothing_moved_under(self, tmp_path: Path) -> None:
        """``take_turn`` takes the lease as ``turn_lock`` does; a store that saves the offered
        checkpoint with the lease does so only on the revision it was built on, with no
        checkpoint of the session pending, and with the lease's fence (the default saves
        nothing)."""
        with self.store(tmp_path) as parts:
            sessions, cp = need_sessions(parts), need_checkpoints(parts)
            sessions.append("s1", turn(1), 0)
            built = sessions.revision("s1")

            def take(turn_id: str, step: int) -> TakeTurn:
                start = StartCheckpoint(turn_id, lambda: {"step": step})
                return TakeTurn("s1", timeout=WAIT, checkpoints=cp, held_length=2,
                                held_revision=built, checkpoint=start)  # fmt: skip

            taken = sessions.take_turn(take("s1.turn-2", 0))
            with taken.lease as lease:
                assert isinstance(lease.fence, int)
                assert not lease.lost
                saved = cp.load("s1.turn-2")
                assert saved == (
                    {"step": 0, "fence": lease.fence} if taken.saved_checkpoint else None
                )
            cp.save("s1.turn-2", {"pending": True})
            taken = sessions.take_turn(take("s1.turn-3", 1))
            with taken.lease:
                assert not taken.saved_checkpoint  # a turn is pending: not saved over or beside
                assert not taken.no_checkpoints, "take_turn saw no checkpoint where one is stored"
            assert cp.list("s1.") == ["s1.turn-2"]
            assert cp.load("s1.turn-2") == {"pending": True}
            cp.delete("s1.turn-2")
            sessions.append("s1", turn(2), 2)  # the revision moves on
            taken = sessions.take_turn(take("s1.turn-4", 2))
            with taken.lease:
                assert not taken.saved_checkpoint
            assert cp.list("s1.") == []

    def test_take_turn_is_turn_lock_with_what_the_turn_starts_from(self, tmp_path: Path) -> None:
        """``take_turn`` takes the lease as ``turn_lock`` does (a new fence each time,
        exclusive) and answers the transcript: whole with nothing held, else what was added
        since the ``held_length`` messages held (or whole), never a wrong list."""
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            sessions.append("s1", turn(1), 0)
            revision = sessions.revision("s1")
            held = sessions.load("s1") or []
            fences = []
            for _ in range(2):
                taken = sessions.take_turn(TakeTurn("s1", timeout=WAIT))
                with taken.lease as lease:
                    assert isinstance(lease.fence, int)
                    assert not lease.lost
                    fences.append(lease.fence)
                    with raises(SessionBusyError):
                        sessions.turn_lock("s1", timeout=0)
                    assert taken.since is None and texts(taken.messages) == ["q1", "a1"]
                    if tracks_revisions(sessions):
                        assert taken.revision == sessions.revision("s1")
            assert fences[1] > fences[0]
            sessions.append("s1", turn(2), 2)
            for held_revision in (revision, "kit-unknown"):
                request = TakeTurn("s1", timeout=WAIT, held_length=2, held_revision=held_revision)
                taken = sessions.take_turn(request)
                with taken.lease as lease:
                    assert lease.fence > fences[-1]
                    fences.append(lease.fence)
                    whole = taken.messages if taken.since is None else [*held, *taken.messages]
                    assert taken.since in (None, 2), taken.since
                    assert texts(whole) == ["q1", "a1", "q2", "a2"], (
                        f"take_turn holding 2 messages answered {texts(taken.messages)} after "
                        f"{taken.since}: the store holds q1 a1 q2 a2"
                    )
                    if tracks_revisions(sessions):
                        assert taken.revision == sessions.revision("s1"), "a stale revision"
            taken = sessions.take_turn(
                TakeTurn("s1", timeout=WAIT, held_length=4, held_revision=sessions.revision("s1"))
            )
            with taken.lease:
                assert taken.since is None or taken.messages == [], texts(taken.messages)

    def test_fences_are_per_session(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            need_fenced(sessions)
            with sessions.turn_lock("s1", timeout=WAIT) as lease:
                pass
            stale_and_current(sessions, "s2")
            sessions.append("s1", turn(1), 0, fence=lease.fence)
            assert texts(sessions.load("s1")) == ["q1", "a1"]

    def test_stale_fence_checkpoint_writes_change_nothing(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions, cp = need_sessions(parts), need_checkpoints(parts)
            need_fenced(cp)
            cp.save("s1.turn-0", {"step": 0})
            stale, current = stale_and_current(sessions, "s1")
            with raises(LeaseLostError):
                cp.save("s1.turn-0", {"step": 1}, fence=stale)
            with raises(LeaseLostError):
                cp.save("s1.turn-1", {"step": 1}, fence=stale)
            with raises(LeaseLostError):
                cp.delete("s1.turn-0", fence=stale)
            assert cp.load("s1.turn-0") == {"step": 0}
            assert cp.list() == ["s1.turn-0"]
            cp.save("s2.turn-0", {"step": 0}, fence=stale)  # another session's checkpoint
            cp.save("s1.turn-0", {"step": 2}, fence=current)
            assert cp.load("s1.turn-0") == {"step": 2}
            cp.delete("s1.turn-0", fence=None)
            assert cp.list() == ["s2.turn-0"]

    def test_stale_fence_approval_create_changes_nothing(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions, ap = need_sessions(parts), need_approvals(parts)
            need_fenced(ap)
            stale, current = stale_and_current(sessions, "s1")
            with raises(LeaseLostError):
                ap.create(approval("a1"), fence=stale)
            assert ap.get("a1") is None
            assert ap.list(status=None) == []
            ap.create(approval("a1"), fence=current)
            ap.create(approval("a2"), fence=None)
            assert [r["id"] for r in ap.list()] == ["a1", "a2"]

    # -- persistence and other processes --------------------------------------------

    def test_fences_grow_across_reopen(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            need_scope(sessions)
            with sessions.turn_lock("s1", timeout=WAIT) as first:
                pass
        with self.reopened(tmp_path) as again:
            sessions = need_sessions(again)
            with sessions.turn_lock("s1", timeout=WAIT) as second:
                pass
            assert second.fence > first.fence
            if sessions.fenced_writes:
                with raises(LeaseLostError):
                    sessions.append("s1", turn(1), 0, fence=first.fence)
                assert sessions.load("s1") is None

    def test_turn_lock_excludes_other_processes(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            kit = self.spawnable(sessions)
            out: Any = _SPAWN.Queue()
            go = _SPAWN.Event()
            child = _SPAWN.Process(
                target=_workers.hold_lease, args=(kit, str(tmp_path), "s1", out, go)
            )
            child.start()
            try:
                state, theirs = out.get(timeout=WAIT * 2)
                assert state == "held", theirs
                with raises(SessionBusyError):
                    sessions.turn_lock("s1", timeout=0.1)
                with sessions.turn_lock("s2", timeout=WAIT):  # another session is free
                    pass
                go.set()
                assert out.get(timeout=WAIT) == ("released", None)
            finally:
                go.set()
                child.join(WAIT)
            assert child.exitcode == 0
            with sessions.turn_lock("s1", timeout=WAIT) as mine:
                assert mine.fence > theirs
                if sessions.fenced_writes:  # the other process's fence is stale now
                    with raises(LeaseLostError):
                        sessions.append("s1", turn(1), 0, fence=theirs)
                    sessions.append("s1", turn(1), 0, fence=mine.fence)

    def test_lock_of_a_killed_process_is_freed(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            kit = self.spawnable(sessions)
            out: Any = _SPAWN.Queue()
            child = _SPAWN.Process(
                target=_workers.hold_until_killed, args=(kit, str(tmp_path), "s1", out)
            )
            child.start()
            try:
                state, detail = out.get(timeout=WAIT * 2)
                assert state == "held", detail
                with raises(SessionBusyError):
                    sessions.turn_lock("s1", timeout=0.1)
            finally:
                child.kill()
                child.join(WAIT)
            with sessions.turn_lock("s1", timeout=WAIT):
                sessions.append("s1", [], 0)

    def test_processes_lose_no_turn(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            kit = self.spawnable(sessions)
            processes, turns = 3, 8
            go = _SPAWN.Event()
            out: Any = _SPAWN.Queue()
            workers = [
                _SPAWN.Process(
                    target=_workers.run_turns,
                    args=(kit, str(tmp_path), "shared", n, turns, go, out),
                )
                for n in range(processes)
            ]
            for w in workers:
                w.start()
            go.set()
            results = [out.get(timeout=WAIT * 2) for _ in workers]
            for w in workers:
                w.join(WAIT)
            assert [r for r in results if r[0] != "ok"] == []
            messages = sessions.load("shared") or []
        tags = [m.text for m in messages[::2]]
        assert len(messages) == 2 * processes * turns
        assert sorted(tags) == sorted(f"w{w}-t{n}" for w in range(processes) for n in range(turns))
        for n in range(processes):  # each process's turns are in its own order
            assert [t for t in tags if t.startswith(f"w{n}-")] == [
                f"w{n}-t{i}" for i in range(turns)
            ]

    def spawnable(self, sessions: BaseSessionStore) -> type[Any]:
        """This test class, if another process can import it and the lock spans processes."""
        need_scope(sessions)
        if type(self).reopen_store is KitBase.reopen_store:
            skip(f"{type(self).__name__} defines no reopen_store: other processes cannot open it")
        try:
            pickle.dumps(type(self))
        except (pickle.PicklingError, AttributeError, TypeError) as exc:
            skip(f"{type(self).__qualname__} is not importable by another process: {exc}")
        return type(self)


def need_scope(sessions: BaseSessionStore) -> None:
    if sessions.lock_scope == "process":
        skip(
            f"{type(sessions).__name__} has lock_scope 'process': its turn lock does not span "
            "processes, so the cross-process tests do not apply"
        )
