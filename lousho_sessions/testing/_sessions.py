"""The kit's tests of transcripts: load, save, delete, append, revision, ids, persistence."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from ..errors import InvalidSessionIdError, StoreConflictError
from ..messages import Message
from ..serde import message_from_dict, message_to_dict
from ..stores.base import BaseSessionStore, CommitTurn, SessionStore
from ._base import KitBase, need_checkpoints, need_sessions
from ._support import WAIT, raises, rich_message, skip, texts, tracks_revisions, turn

BAD_SESSION_IDS = ["../x", "a/b", "", "a" * 129, "a.b", "a b"]


def need_revisions(sessions: BaseSessionStore) -> None:
    if not tracks_revisions(sessions):
        skip(f"{type(sessions).__name__} does not track revisions (revision() is the default)")


def snapshot(tmp_path: Path) -> set[str]:
    """Every path under ``tmp_path`` and beside it: what a write outside the store would change."""
    found = {str(p) for p in tmp_path.parent.iterdir()}
    for root, dirs, files in os.walk(tmp_path):
        found.update(os.path.join(root, n) for n in dirs + files)
    return found


class SessionTests(KitBase):
    """Transcripts: what every ``SessionStore`` under the contract does."""

    def test_parts_follow_the_contract(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            assert isinstance(sessions, SessionStore)
            assert isinstance(sessions, BaseSessionStore)
            assert sessions.lock_scope in ("process", "machine", "cluster")

    def test_unknown_id_loads_none(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            assert sessions.load("nobody") is None
            if tracks_revisions(sessions):
                assert sessions.revision("nobody") is None

    def test_save_load_round_trip(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            messages = [*turn(1), rich_message(), Message.tool("c1", "found", is_error=True)]
            sessions.save("s1", messages)
            assert sessions.load("s1") == messages
            assert sessions.load("other") is None

    def test_save_replaces(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            sessions.save("s1", turn(1) + turn(2))
            sessions.save("s1", turn(3))
            assert texts(sessions.load("s1")) == ["q3", "a3"]

    def test_empty_transcript_is_not_unknown(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            sessions.save("s1", [])
            assert sessions.load("s1") == []
            assert sessions.revision("s1") is not None

    def test_save_rejects_non_messages(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            with raises(TypeError):
                sessions.save("s1", [{"role": "user"}])  # type: ignore[list-item]
            assert sessions.load("s1") is None

    def test_delete(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            second = turn(2)
            sessions.save("s1", turn(1))
            sessions.save("s2", second)
            sessions.delete("s1")
            sessions.delete("s1")
            sessions.delete("never")
            assert sessions.load("s1") is None
            if tracks_revisions(sessions):
                assert sessions.revision("s1") is None
            assert sessions.load("s2") == second

    def test_list_ids_and_info(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            try:
                before = sessions.list_ids()
            except NotImplementedError:
                skip(f"{type(sessions).__name__} does not implement list_ids()")
            assert before == []
            sessions.save("s-b", turn(1) + turn(2))
            sessions.save("s-a", [])
            sessions.save("s_c", turn(3))
            sessions.append("s_c", turn(4), 2)
            assert sessions.list_ids() == ["s-a", "s-b", "s_c"]
            info = sessions.info("s_c")
            assert info is not None and (info.id, info.messages) == ("s_c", 4)
            empty = sessions.info("s-a")
            assert empty is not None and empty.messages == 0
            assert sessions.info("never") is None
            sessions.delete("s-b")
            assert sessions.list_ids() == ["s-a", "s_c"]
            assert sessions.info("s-b") is None
            with raises(InvalidSessionIdError):
                sessions.info("../x")

    def test_append(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            first, second = turn(1), turn(2)
            sessions.append("s1", first, 0)
            sessions.append("s1", second, 2)
            assert sessions.load("s1") == first + second

    def test_append_conflict_leaves_transcript(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            sessions.save("s1", turn(1))
            before = sessions.revision("s1")
            for expected in (0, 1, 3):
                with raises(StoreConflictError):
                    sessions.append("s1", turn(2), expected)
            assert texts(sessions.load("s1")) == ["q1", "a1"]
            if tracks_revisions(sessions):
                assert sessions.revision("s1") == before

    def test_failed_append_creates_nothing(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            with raises(StoreConflictError):
                sessions.append("fresh", turn(2), 1)
            assert sessions.load("fresh") is None
            if tracks_revisions(sessions):
                assert sessions.revision("fresh") is None

    def test_append_after_save_and_delete(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            sessions.save("s1", turn(1))
            sessions.append("s1", turn(2), 2)
            sessions.delete("s1")
            sessions.append("s1", turn(3), 0)
            assert texts(sessions.load("s1")) == ["q3", "a3"]

    def test_revision_changes_with_every_write(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            need_revisions(sessions)
            seen = []
            sessions.save("s1", turn(1))
            seen.append(sessions.revision("s1"))
            assert sessions.revision("s1") == seen[-1]  # reading does not change it
            sessions.load("s1")
            assert sessions.revision("s1") == seen[-1]
            sessions.append("s1", turn(2), 2)
            seen.append(sessions.revision("s1"))
            sessions.save("s1", turn(1))  # the same content again is still a write
            seen.append(sessions.revision("s1"))
            sessions.append("s1", [], 2)
            seen.append(sessions.revision("s1"))
            sessions.delete("s1")
            assert sessions.revision("s1") is None
            sessions.save("s1", turn(1))
            seen.append(sessions.revision("s1"))
            assert None not in seen
            assert len(set(map(repr, seen))) == len(seen), seen

    def test_revision_is_per_session(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            need_revisions(sessions)
            sessions.save("s1", turn(1))
            sessions.save("s2", turn(1))
            before = sessions.revision("s1")
            sessions.append("s2", turn(2), 2)
            assert sessions.revision("s1") == before

    def test_unknown_message_fields_round_trip(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            data = message_to_dict(rich_message())
            data["from_the_future"] = {"nested": [1, 2]}
            data["content"][0]["highlight"] = True
            data["content"][1]["alt"] = "a picture"
            data["tool_calls"][0]["strict"] = False
            message = message_from_dict(data)
            sessions.save("s1", [message])
            sessions.append("s1", [message], 1)
            loaded = sessions.load("s1")
            assert loaded is not None
            assert [message_to_dict(m) for m in loaded] == [data, data]

    def test_invalid_session_ids(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            calls: dict[str, Callable[[str], Any]] = {
                "load": sessions.load,
                "save": lambda i: sessions.save(i, turn(1)),
                "delete": sessions.delete,
                "append": lambda i: sessions.append(i, turn(1), 0),
                "revision": sessions.revision,
                "turn_lock": lambda i: sessions.turn_lock(i, timeout=0).release(),
            }
            before = snapshot(tmp_path)
            for bad in BAD_SESSION_IDS:
                for name, call in calls.items():
                    with raises(InvalidSessionIdError) as caught:
                        call(bad)
                    assert isinstance(caught[0], ValueError), name
            assert snapshot(tmp_path) == before, "a call with an invalid id wrote something"

    def test_longest_session_id_is_valid(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            sid = "a" * 128
            sessions.save(sid, turn(1))
            assert sessions.load(sid) is not None
            sessions.turn_lock(sid, timeout=0).release()
            if parts.checkpoints is not None:
                need_checkpoints(parts).save(f"{sid}.turn-0", {"step": 1})
                assert parts.checkpoints.list(sid) == [f"{sid}.turn-0"]

    def test_reopened_store_keeps_transcripts(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            messages, second = [*turn(1), rich_message()], turn(2)
            sessions.save("s1", messages)
            sessions.append("s1", second, 3)
            revision = sessions.revision("s1")
        with self.reopened(tmp_path) as again:
            sessions = need_sessions(again)
            assert sessions.load("s1") == [*messages, *second]
            if tracks_revisions(sessions):
                assert sessions.revision("s1") == revision
            sessions.append("s1", turn(3), 5)
            assert len(sessions.load("s1") or []) == 7

    def test_prune_sessions(self, tmp_path: Path) -> None:
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            try:
                kept = sessions.prune(timedelta(days=1))
            except NotImplementedError:
                skip(f"{type(sessions).__name__} does not implement prune()")
            with raises(ValueError):
                sessions.prune(-1)
            sessions.save("s1", turn(1))
            assert sessions.prune(timedelta(days=1)).sessions == 0 == kept.sessions
            assert sessions.load("s1") is not None
            assert sessions.prune(0).sessions == 1
            assert sessions.load("s1") is None

    def test_prune_keeps_a_session_whose_turn_holds_its_lease(self, tmp_path: Path) -> None:
        """However old, a session whose turn runs right now is not pruned (nor its checkpoint):
        the turn's commit, after the prune, lands on the transcript it started from."""
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            try:
                sessions.prune(timedelta(days=1))
            except NotImplementedError:
                skip(f"{type(sessions).__name__} does not implement prune()")
            sessions.save("s1", turn(1))
            sessions.save("s2", turn(1))
            checkpoints = parts.checkpoints
            with sessions.turn_lock("s1", timeout=WAIT) as lease:
                if checkpoints is not None:
                    checkpoints.save("s1.turn-2", {"n": 2}, fence=lease.fence)
                assert sessions.prune(0).sessions == 1  # s2 only
                if checkpoints is not None:
                    with contextlib.suppress(NotImplementedError):
                        checkpoints.prune(0)
                    assert checkpoints.load("s1.turn-2") == {"n": 2}
                sessions.commit_turn(
                    CommitTurn("s1", turn(2), 2, checkpoints, ["s1.turn-2"], lease.fence)
                )
            assert texts(sessions.load("s1")) == ["q1", "a1", "q2", "a2"]
            assert sessions.load("s2") is None
            assert sessions.prune(0).sessions == 1  # let go: pruned as any other
            assert sessions.load("s1") is None
