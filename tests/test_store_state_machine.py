"""Each store against a dict model: Hypothesis runs random sequences of calls on both."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from storekit import open_kit

from lousho_sessions.errors import (
    ApprovalAlreadyResolvedError,
    ApprovalNotFoundError,
    StoreConflictError,
)
from lousho_sessions.messages import Message

SESSION_IDS = st.sampled_from(["s1", "s2", "s-3"])
TURN_IDS = st.sampled_from(["s1.turn-0", "s1.turn-2", "s2.turn-0", "s2.send"])
APPROVAL_IDS = st.sampled_from(["a1", "a2", "a.3"])
TEXTS = st.text(st.characters(codec="utf-8"), max_size=8)
MESSAGES = st.lists(
    st.builds(Message.user, TEXTS) | st.builds(Message.assistant, TEXTS), max_size=3
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | TEXTS,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(TEXTS, inner, max_size=2),
    max_leaves=5,
)


class StoreMachine(RuleBasedStateMachine):
    """Runs one store kind against dicts holding what it should contain."""

    kind = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="lousho-sm-"))
        self.store = open_kit(self.kind, self.tmp / "store")
        self.sessions: dict[str, list[Message]] = {}
        self.revisions: dict[str, object] = {}
        self.checkpoints: dict[str, dict[str, Any]] = {}
        self.approvals: dict[str, dict[str, Any]] = {}

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _wrote(self, id: str) -> None:
        revision = self.store.sessions.revision(id)
        assert revision is not None
        assert revision != self.revisions.get(id)
        self.revisions[id] = revision

    @rule(id=SESSION_IDS, messages=MESSAGES)
    def save(self, id: str, messages: list[Message]) -> None:
        self.store.sessions.save(id, messages)
        self.sessions[id] = list(messages)
        self._wrote(id)

    @rule(id=SESSION_IDS, messages=MESSAGES)
    def append(self, id: str, messages: list[Message]) -> None:
        self.store.sessions.append(id, messages, len(self.sessions.get(id, [])))
        self.sessions[id] = self.sessions.get(id, []) + messages
        self._wrote(id)

    @precondition(lambda self: self.sessions)
    @rule(data=st.data(), off_by=st.sampled_from([-1, 1, 5]), messages=MESSAGES)
    def append_conflict(self, data: st.DataObject, off_by: int, messages: list[Message]) -> None:
        id = data.draw(st.sampled_from(sorted(self.sessions)))
        expected = len(self.sessions[id]) + off_by
        try:
            self.store.sessions.append(id, messages, expected)
        except StoreConflictError:
            pass
        else:
            raise AssertionError(f"append with expected_length {expected} succeeded")
        assert self.store.sessions.revision(id) == self.revisions[id]

    @rule(id=SESSION_IDS)
    def delete(self, id: str) -> None:
        self.store.sessions.delete(id)
        self.sessions.pop(id, None)
        self.revisions.pop(id, None)

    @rule(id=SESSION_IDS)
    def load(self, id: str) -> None:
        assert self.store.sessions.load(id) == self.sessions.get(id)

    @rule(turn_id=TURN_IDS, checkpoint=st.dictionaries(TEXTS, JSON, max_size=3))
    def save_checkpoint(self, turn_id: str, checkpoint: dict[str, Any]) -> None:
        self.store.checkpoints.save(turn_id, checkpoint)
        self.checkpoints[turn_id] = checkpoint

    @rule(turn_id=TURN_IDS)
    def delete_checkpoint(self, turn_id: str) -> None:
        self.store.checkpoints.delete(turn_id)
        self.checkpoints.pop(turn_id, None)

    @rule(prefix=st.sampled_from(["", "s1", "s1.", "s2.s", "x"]))
    def list_checkpoints(self, prefix: str) -> None:
        expected = sorted(k for k in self.checkpoints if k.startswith(prefix))
        assert self.store.checkpoints.list(prefix) == expected

    @rule(id=APPROVAL_IDS, session_id=SESSION_IDS, extra=JSON)
    def create_approval(self, id: str, session_id: str, extra: object) -> None:
        record = {"id": id, "session_id": session_id, "status": "pending", "extra": extra}
        if id in self.approvals:
            try:
                self.store.approvals.create(record)
            except ValueError:
                return
            raise AssertionError(f"created approval {id!r} twice")
        self.store.approvals.create(record)
        self.approvals[id] = record

    @rule(id=APPROVAL_IDS, approved=st.booleans())
    def resolve_approval(self, id: str, approved: bool) -> None:
        record = self.approvals.get(id)
        try:
            resolved = self.store.approvals.resolve(id, approved=approved, reason="why")
        except ApprovalNotFoundError:
            assert record is None
        except ApprovalAlreadyResolvedError:
            assert record is not None
            assert record["status"] != "pending"
        else:
            assert record is not None
            assert record["status"] == "pending"
            assert resolved["status"] == ("approved" if approved else "denied")
            assert resolved["extra"] == record["extra"]
            self.approvals[id] = resolved

    @rule(id=APPROVAL_IDS)
    def delete_approval(self, id: str) -> None:
        self.store.approvals.delete(id)
        self.approvals.pop(id, None)

    @rule(session_id=st.none() | SESSION_IDS, status=st.sampled_from([None, "pending", "approved"]))
    def list_approvals(self, session_id: str | None, status: str | None) -> None:
        expected = sorted(
            id
            for id, r in self.approvals.items()
            if (session_id is None or r["session_id"] == session_id)
            and (status is None or r["status"] == status)
        )
        found = self.store.approvals.list(session_id=session_id, status=status)
        assert sorted(r["id"] for r in found) == expected

    @invariant()
    def known_ids_have_revisions(self) -> None:
        for id in ("s1", "s2", "s-3"):
            assert (self.store.sessions.revision(id) is None) == (id not in self.sessions)

    @invariant()
    def checkpoints_match(self) -> None:
        for turn_id, checkpoint in self.checkpoints.items():
            assert self.store.checkpoints.load(turn_id) == checkpoint

    @invariant()
    def approvals_match(self) -> None:
        for id, record in self.approvals.items():
            assert self.store.approvals.get(id) == record


SETTINGS = settings(
    max_examples=60,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class MemoryMachine(StoreMachine):
    kind = "memory"


class FilesMachine(StoreMachine):
    kind = "files"


class SqliteMachine(StoreMachine):
    kind = "sqlite"


class SqliteMemoryMachine(StoreMachine):
    kind = "sqlite-memory"


TestMemoryStore = MemoryMachine.TestCase
TestMemoryStore.settings = SETTINGS
TestFileStore = FilesMachine.TestCase
TestFileStore.settings = SETTINGS
TestSqliteStore = SqliteMachine.TestCase
TestSqliteStore.settings = SETTINGS
TestSqliteMemoryStore = SqliteMemoryMachine.TestCase
TestSqliteMemoryStore.settings = SETTINGS


def test_machine_kinds_are_distinct() -> None:
    kinds = [m.kind for m in (MemoryMachine, FilesMachine, SqliteMachine, SqliteMemoryMachine)]
    assert sorted(kinds) == sorted({*kinds})
    with pytest.raises(ValueError):
        open_kit("nonsense", Path(tempfile.gettempdir()))
