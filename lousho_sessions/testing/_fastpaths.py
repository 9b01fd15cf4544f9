"""The kit's tests of the fast paths a turn takes: ``load_since``, ``revision`` across commits,
``commit_turn``, ``take_turn`` with an offered checkpoint, and ``save_and_delete``.

Each is called directly and checked against what ``load``/``list`` say afterwards, so a
store that overrides one of them wrongly fails here, not only in a long conversation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from ..errors import LeaseLostError, SessionBusyError, StoreConflictError
from ..messages import Message
from ..stores.base import (
    BaseCheckpointStore,
    BaseSessionStore,
    CommitTurn,
    StartCheckpoint,
    TakeTurn,
)
from ..stores.memory import MemoryCheckpointStore
from ._base import KitBase, need_checkpoints, need_sessions
from ._leases import need_fenced, stale_and_current
from ._sessions import need_revisions
from ._support import WAIT, Parts, raises, texts, tracks_revisions, turn

#: The ways a turn commits (``commit_turn``; the kit's helper ``commit`` calls it).
COMMITS = ("commit_turn",)


def commit(
    sessions: BaseSessionStore, how: str, id: str, messages: Sequence[Message], expected: int,
    **fields: Any,
) -> object | None:  # fmt: skip
    """``sessions.<how>(CommitTurn(id, messages, expected, **fields))``."""
    method = getattr(sessions, how)
    result: object | None = method(CommitTurn(id, messages, expected, **fields))
    return result


def check_since(
    sessions: BaseSessionStore, id: str, held: Sequence[Message], revision: object
) -> None:
    """``load_since`` from ``held`` (read at ``revision``) answers ``None`` ("load it all") or
    exactly the messages that make ``held`` the stored transcript: never a wrong list."""
    added = sessions.load_since(id, len(held), revision)
    if added is None:
        return
    stored = sessions.load(id) or []
    assert [*held, *added] == stored, (
        f"load_since({id!r}, {len(held)}, {revision!r}) answered {texts(added)}: with the "
        f"{len(held)} messages held that makes {texts([*held, *added])}, but the store "
        f"holds {texts(stored)}"
    )


def _returning(body: dict[str, Any]) -> Callable[[], dict[str, Any]]:
    return lambda: body


class FastPathTests(KitBase):
    """What a turn calls instead of ``load``/``append``/``turn_lock``, checked directly."""

    @contextmanager
    def other_store(self, tmp_path: Path, parts: Parts) -> Iterator[Parts]:
        """The store opened again (another object, as another process has), or the same
        parts when the store cannot be reopened."""
        if type(self).reopen_store is KitBase.reopen_store:
            with nullcontext(parts) as same:
                yield same
        else:
            with self.reopened(tmp_path) as again:
                yield again

    # -- load_since -------------------------------------------------------------------

    def test_load_since_returns_what_another_store_appended(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            second, third, fifth = turn(2), turn(3), turn(5)
            sessions.append("s1", turn(1), 0)
            revision = sessions.revision("s1")  # read before the messages, as a session does
            held = sessions.load("s1") or []
            with self.other_store(tmp_path, parts) as other:
                writer = need_sessions(other)
                writer.append("s1", second, 2)
                writer.append("s1", third, 4)
                writer.append("s2", turn(9), 0)  # another session's write
            added = sessions.load_since("s1", 2, revision)
            assert added is None or added == second + third, texts(added)
            now = sessions.revision("s1")
            assert sessions.load_since("s1", 6, now) in (None, [])  # nothing new
            check_since(sessions, "s1", held, revision)
            committed = commit(sessions, "commit_turn", "s1", turn(4), 6)
            with self.other_store(tmp_path, parts) as other:
                need_sessions(other).append("s1", fifth, 8)
            added = sessions.load_since("s1", 8, committed)  # the commit's revision
            assert added is None or added == fifth, texts(added)

    def test_load_since_after_save_or_delete_never_answers_a_wrong_list(
        self, tmp_path: Path
    ) -> None:
        """After a ``save`` or ``delete`` an old revision answers ``None`` or the messages that
        really follow the ones held; the same when the transcript grew back to a longer length."""
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            sessions.append("s1", turn(1) + turn(2), 0)
            revision = sessions.revision("s1")
            held = sessions.load("s1") or []
            sessions.save("s1", turn(3))  # shorter
            check_since(sessions, "s1", held, revision)
            sessions.save("s1", turn(5) + turn(6) + turn(7))  # longer, another start
            check_since(sessions, "s1", held, revision)
            sessions.delete("s1")
            check_since(sessions, "s1", held, revision)
            sessions.append("s1", turn(8) + turn(9) + turn(10), 0)  # grown back after a delete
            check_since(sessions, "s1", held, revision)
            revision = sessions.revision("s1")
            held = sessions.load("s1") or []
            sessions.save("s1", [*held, *turn(11)])  # a save that only adds
            check_since(sessions, "s1", held, revision)

    # -- revision ---------------------------------------------------------------------

    def test_revision_moves_with_commits_and_stays_otherwise(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            need_revisions(sessions)
            sessions.save("s1", turn(1))
            sessions.save("s2", turn(1))
            before = sessions.revision("s1")
            sessions.load("s1")
            sessions.load_since("s1", 2, before)
            sessions.info("s1")
            sessions.revision("s2")
            sessions.held_sessions(["s1", "s2"])
            sessions.turn_held("s1")
            assert sessions.revision("s1") == before, "a read changed the revision"
            seen = [before]
            for how, length in zip(COMMITS * 2, (2, 4), strict=True):
                returned = commit(sessions, how, "s1", turn(length), length)
                assert returned == sessions.revision("s1"), f"{how} returned a stale revision"
                seen.append(returned)
                with raises(StoreConflictError):
                    commit(sessions, how, "s1", turn(9), length)
                assert sessions.revision("s1") == returned, f"a refused {how} moved the revision"
            assert len(set(map(repr, seen))) == len(seen), seen

    # -- commit_turn ------------------------------------------------------------------

    def commits_a_turn(self, tmp_path: Path, how: str) -> None:
        with self.store(tmp_path) as parts:
            sessions, cp = need_sessions(parts), need_checkpoints(parts)
            first, second = turn(1), turn(2)
            sessions.append("s1", first, 0)
            for key in ("s1.turn-2", "s1.turn-2-r1-1", "s1.turn-9", "s2.turn-0"):
                cp.save(key, {"key": key})
            with sessions.turn_lock("s1", timeout=WAIT) as lease:
                returned = commit(
                    sessions,
                    how,
                    "s1",
                    second,
                    2,
                    checkpoints=cp,
                    delete=["s1.turn-2", "s1.turn-2-r1-1", "s1.turn-7"],
                    fence=lease.fence,
                )
            assert sessions.load("s1") == first + second
            assert cp.list() == ["s1.turn-9", "s2.turn-0"], "the turn's checkpoints were kept"
            if tracks_revisions(sessions):
                assert returned == sessions.revision("s1"), f"{how} returned a stale revision"
                assert sessions.load_since("s1", 4, returned) in (None, [])
            commit(sessions, how, "s1", turn(3), 4)  # no checkpoints: an append
            commit(sessions, how, "s3", turn(1), 0, checkpoints=cp, delete=["s3.turn-0"])
            assert texts(sessions.load("s1")) == ["q1", "a1", "q2", "a2", "q3", "a3"]
            assert texts(sessions.load("s3")) == ["q1", "a1"]

    def refuses_a_conflict(self, tmp_path: Path, how: str) -> None:
        with self.store(tmp_path) as parts:
            sessions, cp = need_sessions(parts), parts.checkpoints
            sessions.append("s1", turn(1), 0)
            if cp is not None:
                cp.save("s1.turn-2", {"step": 1})
            before = sessions.revision("s1")
            for expected in (0, 1, 3):
                with raises(StoreConflictError):
                    commit(
                        sessions, how, "s1", turn(2), expected, checkpoints=cp, delete=["s1.turn-2"]
                    )
            with raises(StoreConflictError):
                commit(sessions, how, "fresh", turn(2), 2, checkpoints=cp, delete=["s1.turn-2"])
            assert texts(sessions.load("s1")) == ["q1", "a1"], "a refused commit wrote"
            assert sessions.load("fresh") is None, "a refused commit created the session"
            if tracks_revisions(sessions):
                assert sessions.revision("s1") == before
            if cp is not None:
                assert cp.list() == ["s1.turn-2"], "a refused commit deleted the checkpoint"

    def refuses_a_stale_fence(self, tmp_path: Path, how: str) -> None:
        with self.store(tmp_path) as parts:
            sessions, cp = need_sessions(parts), parts.checkpoints
            need_fenced(sessions)
            sessions.append("s1", turn(1), 0)
            if cp is not None:
                cp.save("s1.turn-2", {"step": 1})
            stale, current = stale_and_current(sessions, "s1")
            before = sessions.revision("s1")
            with raises(LeaseLostError):
                commit(
                    sessions,
                    how,
                    "s1",
                    turn(2),
                    2,
                    checkpoints=cp,
                    delete=["s1.turn-2"],
                    fence=stale,
                )
            assert texts(sessions.load("s1")) == ["q1", "a1"], "a commit with a stale fence wrote"
            if tracks_revisions(sessions):
                assert sessions.revision("s1") == before
            if cp is not None:
                assert cp.list() == ["s1.turn-2"], "a commit with a stale fence deleted"
            commit(
                sessions, how, "s1", turn(2), 2, checkpoints=cp, delete=["s1.turn-2"], fence=current
            )
            assert texts(sessions.load("s1")) == ["q1", "a1", "q2", "a2"]
            if cp is not None:
                assert cp.list() == []

    def test_commit_turn_commits_a_turn(self, tmp_path: Path) -> None:
        self.commits_a_turn(tmp_path, "commit_turn")

    def test_commit_turn_refuses_a_conflict(self, tmp_path: Path) -> None:
        self.refuses_a_conflict(tmp_path, "commit_turn")

    def test_commit_turn_refuses_a_stale_fence(self, tmp_path: Path) -> None:
        self.refuses_a_stale_fence(tmp_path, "commit_turn")

    def test_commit_turn_with_release_frees_the_lease(self, tmp_path: Path) -> None:
        """``commit_turn(CommitTurn(..., release=lease))`` may free the session in its write; a refused
        one frees nothing. Either way ``release()`` afterwards is safe and the next turn
        gets a newer fence."""
        with self.store(tmp_path) as parts:
            sessions, cp = need_sessions(parts), parts.checkpoints
            if cp is not None:
                cp.save("s1.turn-0", {"step": 0})
            lease = sessions.turn_lock("s1", timeout=WAIT)
            try:
                with raises(StoreConflictError):
                    commit(
                        sessions, "commit_turn", "s1", turn(1), 3, fence=lease.fence, release=lease
                    )
                assert not lease.lost, "a refused commit_turn released the lease"
                with raises(SessionBusyError):
                    sessions.turn_lock("s1", timeout=0)
                commit(
                    sessions,
                    "commit_turn",
                    "s1",
                    turn(1),
                    0,
                    checkpoints=cp,
                    delete=["s1.turn-0"],
                    fence=lease.fence,
                    release=lease,
                )
            finally:
                lease.release()
            assert lease.lost
            with sessions.turn_lock("s1", timeout=WAIT) as again:
                assert again.fence > lease.fence
                commit(sessions, "commit_turn", "s1", turn(2), 2, fence=again.fence, release=again)
            assert texts(sessions.load("s1")) == ["q1", "a1", "q2", "a2"]
            if cp is not None:
                assert cp.list() == []
            with sessions.turn_lock("s1", timeout=WAIT):  # freed again
                pass

    # -- take_turn with an offered checkpoint -----------------------------------------

    def test_take_turn_refuses_to_save_what_it_may_not(self, tmp_path: Path) -> None:
        """Not saved with the lease: a checkpoint for another store, for another session, an
        empty one, or one offered with nothing held. One saved is pending once the lease is
        gone without a commit."""
        with self.store(tmp_path) as parts:
            sessions, cp = need_sessions(parts), need_checkpoints(parts)
            sessions.append("s1", turn(1), 0)
            built = sessions.revision("s1")
            foreign = MemoryCheckpointStore()
            offers: list[tuple[BaseCheckpointStore, str, dict[str, Any], int | None]] = [
                (foreign, "s1.turn-2", {"step": 0}, 2),
                (cp, "s2.turn-0", {"step": 0}, 2),
                (cp, "s1.turn-2", {}, 2),
                (cp, "s1.turn-2", {"step": 0}, None),  # nothing held: nothing it was built on
            ]
            for store, turn_id, body, held in offers:
                start = StartCheckpoint(turn_id, _returning(body))
                request = TakeTurn("s1", timeout=WAIT, checkpoints=store, held_length=held,
                                   held_revision=built, checkpoint=start)  # fmt: skip
                taken = sessions.take_turn(request)
                with taken.lease:
                    assert not taken.saved_checkpoint, (store, turn_id, body, held)
            assert foreign.list() == [] and cp.list() == []
            start = StartCheckpoint("s1.turn-2", lambda: {"step": 1})
            request = TakeTurn("s1", timeout=WAIT, checkpoints=cp, held_length=2,
                               held_revision=built, checkpoint=start)  # fmt: skip
            taken = sessions.take_turn(request)
            with taken.lease as lease:
                saved, fence = taken.saved_checkpoint, lease.fence
            if saved:  # the lease ended without a commit: the turn is pending, as after a save
                assert cp.pending_turns() == ["s1.turn-2"]
                assert cp.load("s1.turn-2") == {"step": 1, "fence": fence}
            else:
                assert cp.list() == []
            assert texts(sessions.load("s1")) == ["q1", "a1"]

    # -- save_and_delete --------------------------------------------------------------

    def test_save_and_delete_replaces_the_turns_records(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions, cp = need_sessions(parts), need_checkpoints(parts)
            for key in ("s1.turn-0", "s1.turn-0-r1-1", "s1.turn-0-r1-2", "s2.turn-0-r1-1"):
                cp.save(key, {"key": key})
            with sessions.turn_lock("s1", timeout=WAIT) as lease:
                cp.save_and_delete(
                    "s1.turn-0",
                    {"step": 1},
                    ["s1.turn-0-r1-1", "s1.turn-0-r1-2", "s1.turn-0-r9-9"],
                    fence=lease.fence,
                )
            assert cp.load("s1.turn-0") == {"step": 1}
            assert cp.list() == ["s1.turn-0", "s2.turn-0-r1-1"], "the records were kept"
            cp.save("s1.turn-0-r2-1", {"r": 2})
            with raises(TypeError):
                cp.save_and_delete("s1.turn-0", {"x": object()}, ["s1.turn-0-r2-1"])
            assert cp.load("s1.turn-0") == {"step": 1}
            assert cp.list("s1.") == ["s1.turn-0", "s1.turn-0-r2-1"], "a refused save deleted"
            if cp.fenced_writes:
                stale, current = stale_and_current(sessions, "s1")
                with raises(LeaseLostError):
                    cp.save_and_delete("s1.turn-0", {"step": 2}, ["s1.turn-0-r2-1"], fence=stale)
                assert cp.load("s1.turn-0") == {"step": 1}
                assert cp.list("s1.") == ["s1.turn-0", "s1.turn-0-r2-1"]
                cp.save_and_delete("s1.turn-0", {"step": 2}, ["s1.turn-0-r2-1"], fence=current)
                assert cp.list("s1.") == ["s1.turn-0"]
                assert cp.load("s1.turn-0") == {"step": 2}

    def test_take_over_refuses_the_holders_writes(self, tmp_path: Path) -> None:
        """``take_over(id)`` hands out a newer fence at once, without waiting for the holder,
        whose writes are refused from then on (what ``lousho sessions rm --force`` relies on)."""
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            need_fenced(sessions)
            sessions.save("s1", turn(1))
            lease = sessions.turn_lock("s1", timeout=WAIT)
            try:
                newer = sessions.take_over("s1")
                assert newer > lease.fence, "take_over must hand out a newer fence"
                with raises(LeaseLostError):
                    sessions.append("s1", turn(2), 2, fence=lease.fence)
                with raises(LeaseLostError):
                    commit(sessions, "commit_turn", "s1", turn(2), 2, fence=lease.fence)
                assert texts(sessions.load("s1")) == ["q1", "a1"]
                sessions.append("s1", turn(2), 2, fence=newer)
                assert texts(sessions.load("s1")) == ["q1", "a1", "q2", "a2"]
            finally:
                lease.release()
