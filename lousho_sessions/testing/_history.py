"""The kit's tests of ``rewind`` and ``fork``: each called directly and checked against what
``load``, ``revision``, ``load_since`` and ``info`` say afterwards."""

from __future__ import annotations

from pathlib import Path

from ..errors import LeaseLostError, SessionExistsError, StoreConflictError
from ..stores.base import BaseSessionStore, ForkRequest, RewindRequest
from ._base import KitBase, need_sessions
from ._fastpaths import check_since
from ._leases import need_fenced, stale_and_current
from ._support import raises, texts, tracks_revisions, turn


class HistoryTests(KitBase):
    """``rewind(RewindRequest)`` drops a tail, ``fork(ForkRequest)`` copies a prefix."""

    def test_rewind_keeps_a_prefix_and_returns_what_it_removed(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            sessions.save("s1", [*turn(1), *turn(2), *turn(3)])
            sessions.save("s2", turn(9))
            done = sessions.rewind(RewindRequest("s1", 2, expected_length=6))
            assert done.removed == 4
            assert texts(sessions.load("s1")) == ["q1", "a1"]
            assert texts(sessions.load("s2")) == ["q9", "a9"]  # another session is untouched
            assert sessions.rewind(RewindRequest("s1", 2)).removed == 0
            assert sessions.rewind(RewindRequest("s1", 0)).removed == 2
            assert sessions.load("s1") == []  # still stored, empty
            sessions.append("s1", turn(4), 0)  # an append after a rewind lands after the kept
            assert texts(sessions.load("s1")) == ["q4", "a4"]
            info = sessions.info("s1")
            assert info is not None and info.messages == 2

    def test_rewind_refuses_what_it_may_not_do_and_changes_nothing(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            sessions.save("s1", [*turn(1), *turn(2)])
            with raises(StoreConflictError):
                sessions.rewind(RewindRequest("s1", 5))  # beyond its end
            with raises(StoreConflictError):
                sessions.rewind(RewindRequest("s1", 1, expected_length=3))  # moved on
            with raises(StoreConflictError):
                sessions.rewind(RewindRequest("nobody", 0))  # not stored
            assert texts(sessions.load("s1")) == ["q1", "a1", "q2", "a2"]
            assert sessions.load("nobody") is None

    def test_rewind_with_a_stale_fence_changes_nothing(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            need_fenced(sessions)
            sessions.save("s1", [*turn(1), *turn(2)])
            stale, current = stale_and_current(sessions, "s1")
            with raises(LeaseLostError):
                sessions.rewind(RewindRequest("s1", 0, fence=stale))
            assert len(sessions.load("s1") or []) == 4
            sessions.rewind(RewindRequest("s1", 2, fence=current))
            assert texts(sessions.load("s1")) == ["q1", "a1"]

    def test_load_since_after_a_rewind_never_answers_a_wrong_list(self, tmp_path: Path) -> None:
        """A reader holding the long transcript (or a prefix of it) must not take the shorter
        one, grown again by appends, for appends to what it holds."""
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            sessions.append("s1", [*turn(1), *turn(2)], 0)
            revision = sessions.revision("s1")
            held = sessions.load("s1") or []
            done = sessions.rewind(RewindRequest("s1", 2))
            if tracks_revisions(sessions):
                assert done.revision != revision and sessions.revision("s1") == done.revision
            sessions.append("s1", [*turn(3), *turn(4)], 2)  # as long as before, and longer
            check_since(sessions, "s1", held, revision)
            check_since(sessions, "s1", held[:2], revision)
            check_since(sessions, "s1", held[:3], revision)

    def test_fork_copies_a_prefix_and_names_its_parent(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            sessions.save("s1", [*turn(1), *turn(2)])
            done = sessions.fork(ForkRequest("s1", "s2", 2))
            assert done.messages == 2
            assert texts(sessions.load("s2")) == ["q1", "a1"]
            assert sessions.fork(ForkRequest("s1", "s3")).messages == 4  # None: all of it
            assert texts(sessions.load("s3")) == texts(sessions.load("s1"))
            sessions.append("s2", turn(5), 2)  # the fork and its parent go their own ways
            sessions.rewind(RewindRequest("s1", 0))
            assert texts(sessions.load("s2")) == ["q1", "a1", "q5", "a5"]
            assert texts(sessions.load("s3")) == ["q1", "a1", "q2", "a2"]
            info, parent = sessions.info("s2"), sessions.info("s1")
            assert info is not None and parent is not None
            assert info.messages == 4 and parent.parent is None
            if info.parent is not None or keeps_origins(sessions):
                assert (info.parent, info.fork_point) == ("s1", 2), (
                    f"{type(sessions).__name__} overrides fork and info, so it keeps session "
                    f"metadata: info() of a fork must name its parent and fork point, got {info}"
                )
                sessions.save("s2", turn(6))  # kept by every later write
                again = sessions.info("s2")
                assert again is not None and (again.parent, again.fork_point) == ("s1", 2)
            sessions.delete("s2")
            assert sessions.load("s2") is None
            assert "s2" not in sessions.list_ids() if _lists(sessions) else True

    def test_fork_refuses_an_existing_id_or_a_missing_source(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            sessions.save("s1", turn(1))
            sessions.save("s2", turn(2))
            with raises(SessionExistsError) as caught:
                sessions.fork(ForkRequest("s1", "s2"))
            assert "s2" in str(caught[0])
            with raises(StoreConflictError):
                sessions.fork(ForkRequest("nobody", "s3"))
            with raises(StoreConflictError):
                sessions.fork(ForkRequest("s1", "s3", 3))  # beyond its end
            assert texts(sessions.load("s2")) == ["q2", "a2"]
            assert sessions.load("s3") is None


def keeps_origins(sessions: BaseSessionStore) -> bool:
    """Whether the store must name a fork's ``parent`` and ``fork_point`` in ``info()``: it
    overrides both ``fork`` and ``info`` (the defaults keep no session metadata)."""
    return all(
        getattr(type(sessions), name) is not getattr(BaseSessionStore, name)
        for name in ("fork", "info")
    )


def _lists(sessions: object) -> bool:
    try:
        sessions.list_ids()  # type: ignore[attr-defined]
    except NotImplementedError:
        return False
    return True
