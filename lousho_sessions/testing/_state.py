"""The kit's tests of a session's state: ``load_state``, ``save_state(SaveState)`` and
``commit_turn`` with ``CommitTurn.state``, checked against what ``load_state`` says after."""

from __future__ import annotations

from pathlib import Path

from ..errors import LeaseLostError, StoreConflictError
from ..stores.base import CommitTurn, SaveState
from ._base import KitBase, need_checkpoints, need_sessions
from ._leases import need_fenced, stale_and_current
from ._support import raises, texts, turn


class StateTests(KitBase):
    """``save_state`` is a compare-and-set on the version, fenced; ``commit_turn`` stores
    a turn's state with its messages."""

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
        with self.store(tmp_path) as parts:
            sessions, checkpoints = need_sessions(parts), parts.checkpoints
            sessions.save("s1", turn(1))
            with sessions.turn_lock("s1") as lease:
                request = CommitTurn("s1", turn(2), 2, checkpoints, (), lease.fence)
                sessions.commit_turn(request)
            assert sessions.load_state("s1", checkpoints) == ({}, 0)  # no state: unchanged
            with sessions.turn_lock("s1") as lease:
                request = CommitTurn(
                    "s1", turn(3), 4, checkpoints, (), lease.fence, state={"city": "Lyon"}
                )
                sessions.commit_turn(request)
            assert texts(sessions.load("s1"))[-2:] == ["q3", "a3"]
            if sessions.commits_state or type(sessions).commit_turn is _default_commit():
                assert sessions.load_state("s1", checkpoints)[0] == {"city": "Lyon"}


def _default_commit() -> object:
    from ..stores._turn_requests import TurnVerbs

    return TurnVerbs.commit_turn
