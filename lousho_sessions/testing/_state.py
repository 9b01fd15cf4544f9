"""The kit's tests of a session's state: ``load_state``, ``save_state(SaveState)``,
``commit_turn`` with ``CommitTurn.state``, ``fork`` with ``ForkRequest.state`` and ``prune``,
checked against what ``load_state`` says after."""

from __future__ import annotations

import contextlib
from pathlib import Path

from ..errors import LeaseLostError, StoreConflictError
from ..stores._history_requests import forks_state
from ..stores._turn_requests import commits_state
from ..stores.base import CommitTurn, ForkRequest, SaveState
from ._base import KitBase, need_checkpoints, need_sessions
from ._leases import need_fenced, stale_and_current
from ._support import WAIT, raises, skip, texts, turn


class StateTests(KitBase):
    """``save_state`` is a compare-and-set on the version, fenced; ``commit_turn`` stores
    a turn's state with its messages (and a refused commit stores neither); a fork copies
    the state; a prune removes the state of the sessions it removes."""

    def test_state_round_trip_and_compare_and_set(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions, checkpoints = need_sessions(parts), parts.checkpoints
            assert sessions.load_state("s1", checkpoints) == ({}, 0)
            v1 = sessions.save_state(SaveState("s1", {"a": [1, "x"]}, 0, None, checkpoints))
            assert sessions.load_state("s1", checkpoints) == ({"a": [1, "x"]}, v1)
            with raises(StoreConflictError):
                sessions.save_state(SaveState("s1", {"a": 2}, v1 - 1, None, checkpoints))
            v2 = sessions.save_state(SaveState("s1", {"b": None}, v1, None, checkpoints))
            assert v2 != v1
            assert sessions.load_state("s1", checkpoints) == ({"b": None}, v2)
            assert sessions.load_state("s2", checkpoints) == ({}, 0)  # another session's

    def test_state_with_a_stale_fence_changes_nothing(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions, checkpoints = need_sessions(parts), need_checkpoints(parts)
            need_fenced(checkpoints)
            stale, current = stale_and_current(sessions, "s1")
            sessions.save_state(SaveState("s1", {"n": 1}, None, current, checkpoints))
            with raises(LeaseLostError):
                sessions.save_state(SaveState("s1", {"n": 2}, None, stale, checkpoints))
            assert sessions.load_state("s1", checkpoints)[0] == {"n": 1}

    def test_commit_turn_stores_the_turn_state(self, tmp_path: Path) -> None:
        """With its messages, at a new version; without one, the state stays as it was; a
        commit refused (a conflict, a stale fence) stores neither its messages nor its state."""
        with self.store(tmp_path) as parts:
            sessions, checkpoints = need_sessions(parts), parts.checkpoints
            if not commits_state(sessions):
                skip(f"{type(sessions).__name__}.commit_turn does not declare commits_state")
            sessions.save("s1", turn(1))
            sessions.save_state(SaveState("s1", {"city": "Oslo"}, 0, None, checkpoints))
            before = sessions.load_state("s1", checkpoints)
            with sessions.turn_lock("s1", timeout=WAIT) as lease:
                request = CommitTurn("s1", turn(2), 2, checkpoints, (), lease.fence)
                sessions.commit_turn(request)
            assert sessions.load_state("s1", checkpoints) == before  # no state: unchanged
            with sessions.turn_lock("s1", timeout=WAIT) as lease:
                state = {"city": "Lyon", "trips": [1, {"x": None}]}
                request = CommitTurn("s1", turn(3), 4, checkpoints, (), lease.fence, state=state)
                sessions.commit_turn(request)
            assert texts(sessions.load("s1"))[-2:] == ["q3", "a3"]
            now, version = sessions.load_state("s1", checkpoints)
            assert now == {"city": "Lyon", "trips": [1, {"x": None}]}
            assert version != before[1]
            with sessions.turn_lock("s1", timeout=WAIT) as lease:
                conflict = CommitTurn("s1", turn(4), 5, checkpoints, (), lease.fence, state={})
                with raises(StoreConflictError):
                    sessions.commit_turn(conflict)
            assert sessions.load_state("s1", checkpoints) == (now, version)
            assert len(sessions.load("s1") or []) == 6
            if sessions.fenced_writes:
                stale, _ = stale_and_current(sessions, "s1")
                refused = CommitTurn("s1", turn(4), 6, checkpoints, (), stale, state={"n": 1})
                with raises(LeaseLostError):
                    sessions.commit_turn(refused)
                assert sessions.load_state("s1", checkpoints) == (now, version)
                assert len(sessions.load("s1") or []) == 6
            # a first turn (nothing stored yet) commits its state too
            first = CommitTurn("s2", turn(1), 0, checkpoints, (), None, state={"new": True})
            sessions.commit_turn(first)
            assert sessions.load_state("s2", checkpoints)[0] == {"new": True}

    def test_fork_copies_the_state(self, tmp_path: Path) -> None:
        """Asked to (``ForkRequest.state``), the new session gets the source's state, at a version
        newer than any the new id had; a source without state copies none; not asked, none."""
        with self.store(tmp_path) as parts:
            sessions, checkpoints = need_sessions(parts), parts.checkpoints
            if not forks_state(sessions):
                skip(f"{type(sessions).__name__}.fork does not declare forks_state")
            sessions.save("s1", turn(1))
            state = {"name": "Ada", "tags": ["a", {"b": 2.5}]}
            sessions.save_state(SaveState("s1", state, 0, None, checkpoints))
            source = sessions.load_state("s1", checkpoints)
            sessions.fork(ForkRequest("s1", "f1", 1, state=True, checkpoints=checkpoints))
            copied, version = sessions.load_state("f1", checkpoints)
            assert copied == state and version > 0
            assert sessions.load_state("s1", checkpoints) == source  # its source unchanged
            assert texts(sessions.load("f1")) == ["q1"]
            # a copy: changing one leaves the other
            sessions.save_state(SaveState("f1", {"name": "Bob"}, version, None, checkpoints))
            assert sessions.load_state("s1", checkpoints) == source
            # a new id with state of its own (and no transcript): the copy is newer than it
            held = sessions.save_state(SaveState("f2", {"old": 1}, 0, None, checkpoints))
            held = sessions.save_state(SaveState("f2", {"old": 2}, held, None, checkpoints))
            sessions.fork(ForkRequest("s1", "f2", state=True, checkpoints=checkpoints))
            copied, version = sessions.load_state("f2", checkpoints)
            assert copied == state and version != held
            with raises(StoreConflictError):
                sessions.save_state(SaveState("f2", {"lost": 1}, held, None, checkpoints))
            # not asked: none copied; a source without state: none either
            sessions.fork(ForkRequest("s1", "f3", checkpoints=checkpoints))
            assert sessions.load_state("f3", checkpoints) == ({}, 0)
            sessions.save("s2", turn(1))
            sessions.fork(ForkRequest("s2", "f4", state=True, checkpoints=checkpoints))
            assert sessions.load_state("f4", checkpoints) == ({}, 0)

    def test_prune_removes_the_state_of_the_sessions_it_removes(self, tmp_path: Path) -> None:
        """A pruned session's state goes with it; a session a turn holds keeps both, and so
        does state without a transcript (a scope's)."""
        with self.store(tmp_path) as parts:
            sessions, checkpoints = need_sessions(parts), parts.checkpoints
            if not sessions.prunes_state:
                skip(f"{type(sessions).__name__} does not declare prunes_state")
            for id in ("s1", "s2"):
                sessions.save(id, turn(1))
                sessions.save_state(SaveState(id, {"id": id}, 0, None, checkpoints))
            sessions.save_state(SaveState("_scope-u1", {"lang": "fr"}, 0, None, checkpoints))
            with sessions.turn_lock("s2", timeout=WAIT):
                assert sessions.prune(0).sessions == 1
                if checkpoints is not None:
                    with contextlib.suppress(NotImplementedError):
                        checkpoints.prune(0)  # as a whole store's prune runs both
            assert sessions.load("s1") is None
            assert sessions.load_state("s1", checkpoints) == ({}, 0)
            assert sessions.load_state("s2", checkpoints)[0] == {"id": "s2"}
            assert sessions.load_state("_scope-u1", checkpoints)[0] == {"lang": "fr"}
            # a new session of the pruned id starts with no state
            sessions.commit_turn(CommitTurn("s1", turn(2), 0, checkpoints))
            assert sessions.load_state("s1", checkpoints) == ({}, 0)
