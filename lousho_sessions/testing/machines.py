"""Hypothesis state machines: random sequences of store calls checked against a dict model.

Imports Hypothesis (``pip install hypothesis``). Build one with
``lousho_sessions.testing.session_store_machine(factory)`` (or the checkpoint and
approval variants), where ``factory(tmp_dir)`` makes a new, empty store, and let
pytest collect its ``TestCase``.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ..errors import (
    ApprovalAlreadyResolvedError,
    ApprovalNotFoundError,
    LeaseLostError,
    SessionExistsError,
    StoreConflictError,
)
from ..messages import Message
from ..stores._history_requests import forks_state
from ..stores.adapters import takes_arguments
from ..stores.base import ForkRequest, RewindRequest
from ._fastpaths import check_since
from ._history import keeps_origins
from ._state_rules import IDS, JSON, SESSION_IDS, TEXTS, StateRules
from ._support import WAIT, Parts, opened, skip, tracks_revisions

__all__ = ["SETTINGS", "approval_machine", "checkpoint_machine", "session_machine"]

TURN_IDS = st.sampled_from(["s1.turn-0", "s1.turn-2", "s2.turn-0", "s2.send"])
APPROVAL_IDS = st.sampled_from(["a1", "a2", "a.3"])
MESSAGES = st.lists(
    st.builds(Message.user, TEXTS) | st.builds(Message.assistant, TEXTS), max_size=3
)
#: The settings the machines' ``TestCase`` runs with.
SETTINGS = settings(
    max_examples=30,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class _StoreMachine(RuleBasedStateMachine):
    """Opens ``factory(tmp_dir)`` for one run; closes it and removes the directory after."""

    factory: Callable[[Path], Any]

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="lousho-kit-"))
        self._context = opened(type(self).factory, self.tmp / "store")
        self.parts: Parts = self._context.__enter__()

    def teardown(self) -> None:
        try:
            self._context.__exit__(None, None, None)
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)


def _machine(base: type[_StoreMachine], factory: Callable[[Path], Any]) -> type[Any]:
    machine: type[_StoreMachine] = type(
        base.__name__.lstrip("_"), (base,), {"factory": staticmethod(factory)}
    )
    machine.TestCase.settings = SETTINGS
    return machine


class _SessionMachine(StateRules, _StoreMachine):
    def __init__(self) -> None:
        super().__init__()
        sessions = self.parts.sessions
        if sessions is None:
            self.teardown()
            skip("the store has no sessions part")
        self.sessions = sessions
        self.revisions_known = tracks_revisions(sessions)
        self.model: dict[str, list[Message]] = {}
        self.revisions: dict[str, object] = {}
        self.fences: dict[str, list[int]] = {}
        #: id -> what a reader loaded and the revision it read first (``load_since`` checks)
        self.held: dict[str, tuple[list[Message], object]] = {}
        #: id -> (state, version) as ``save_state``, ``commit_turn`` and ``fork`` left it (kept
        #: by rewinds and deletes); kept where ``self.home`` is (the checkpoints part)
        self.states: dict[str, tuple[dict[str, Any], int]] = {}
        self.home = self.parts.checkpoints

    def _wrote(self, id: str) -> None:
        if not self.revisions_known:
            return
        revision = self.sessions.revision(id)
        assert revision is not None
        assert revision != self.revisions.get(id)
        self.revisions[id] = revision

    @rule(id=SESSION_IDS, messages=MESSAGES)
    def save(self, id: str, messages: list[Message]) -> None:
        self.sessions.save(id, messages)
        self.model[id] = list(messages)
        self._wrote(id)

    @rule(id=SESSION_IDS, messages=MESSAGES)
    def append(self, id: str, messages: list[Message]) -> None:
        fence = self.fences[id][-1] if self.fences.get(id) else None
        self.sessions.append(id, messages, len(self.model.get(id, [])), fence=fence)
        self.model[id] = self.model.get(id, []) + messages
        self._wrote(id)

    @precondition(lambda self: self.model)
    @rule(data=st.data(), off_by=st.sampled_from([-1, 1, 5]), messages=MESSAGES)
    def append_conflict(self, data: st.DataObject, off_by: int, messages: list[Message]) -> None:
        id = data.draw(st.sampled_from(sorted(self.model)))
        expected = len(self.model[id]) + off_by
        try:
            self.sessions.append(id, messages, expected)
        except StoreConflictError:
            pass
        else:
            raise AssertionError(f"append with expected_length {expected} succeeded")
        if self.revisions_known:
            assert self.sessions.revision(id) == self.revisions[id]

    @rule(id=SESSION_IDS)
    def take_lease(self, id: str) -> None:
        with self.sessions.turn_lock(id, timeout=WAIT) as lease:
            assert not lease.lost
        assert lease.lost
        seen = self.fences.setdefault(id, [])
        assert not seen or lease.fence > seen[-1], (seen, lease.fence)
        seen.append(lease.fence)

    @precondition(lambda self: any(len(f) >= 2 for f in self.fences.values()))
    @rule(data=st.data(), messages=MESSAGES)
    def append_with_stale_fence(self, data: st.DataObject, messages: list[Message]) -> None:
        if not self.sessions.fenced_writes:
            return
        id = data.draw(st.sampled_from(sorted(i for i, f in self.fences.items() if len(f) >= 2)))
        stale = data.draw(st.sampled_from(self.fences[id][:-1]))
        try:
            self.sessions.append(id, messages, len(self.model.get(id, [])), fence=stale)
        except LeaseLostError:
            pass
        else:
            raise AssertionError(f"append with stale fence {stale} succeeded")
        assert self.sessions.load(id) == self.model.get(id)

    def _fence(self, id: str, kind: str) -> tuple[int | None, bool]:
        """A fence of ``kind`` for ``id`` ("none", "current" or "stale") and whether it is
        stale; "none" when the machine has no such fence (or the store checks none)."""
        seen = self.fences.get(id, [])
        if kind == "stale" and len(seen) >= 2 and self.sessions.fenced_writes:
            return seen[0], True
        if kind != "none" and seen:
            return seen[-1], False
        return None, False

    @rule(
        data=st.data(),
        id=SESSION_IDS,
        checked=st.sampled_from(["no", "right", "wrong"]),
        fence_kind=st.sampled_from(["none", "current", "stale"]),
    )
    def rewind(self, data: st.DataObject, id: str, checked: str, fence_kind: str) -> None:
        stored = self.model.get(id)
        length = -1 if stored is None else len(stored)
        keep = data.draw(st.integers(0, max(length, 0) + 1), label="keep")  # one past the end
        expected = {"no": None, "right": max(length, 0), "wrong": max(length, 0) + 1}[checked]
        fence, stale = self._fence(id, fence_kind)
        request = RewindRequest(id, keep, fence=fence, expected_length=expected)
        refused = stored is None or keep > length or checked == "wrong"
        if stale or refused:
            # with a stale fence and another fault, either error will do
            errors: tuple[type[Exception], ...] = (
                (LeaseLostError, StoreConflictError) if stale and refused
                else (LeaseLostError,) if stale
                else (StoreConflictError,)
            )  # fmt: skip
            try:
                self.sessions.rewind(request)
            except errors:
                pass
            else:
                raise AssertionError(f"{request} succeeded on {length} stored messages")
            assert self.sessions.load(id) == stored, f"a refused {request} changed {id!r}"
            if self.revisions_known and stored is not None:
                assert self.sessions.revision(id) == self.revisions[id], request
            return
        done = self.sessions.rewind(request)
        assert done.removed == length - keep, (request, done, length)
        assert stored is not None
        self.model[id] = stored[:keep]
        self._wrote(id)
        if self.revisions_known:
            assert done.revision == self.revisions[id], (done, self.revisions[id])

    @precondition(lambda self: self.model and self.sessions.fenced_writes)
    @rule(data=st.data())
    def rewind_with_stale_fence(self, data: st.DataObject) -> None:
        """Two leases taken in turn: a rewind carrying the first one's fence changes nothing."""
        id = data.draw(st.sampled_from(sorted(self.model)))
        for _ in range(2):
            self.take_lease(id)
        keep = data.draw(st.integers(0, len(self.model[id])), label="keep")
        stale = self.fences[id][-2]
        try:
            self.sessions.rewind(RewindRequest(id, keep, fence=stale))
        except LeaseLostError:
            pass
        else:
            raise AssertionError(f"rewind of {id!r} with stale fence {stale} succeeded")
        assert self.sessions.load(id) == self.model[id]
        if self.revisions_known:
            assert self.sessions.revision(id) == self.revisions[id]

    @rule(data=st.data())
    def fork(self, data: st.DataObject) -> None:
        # mostly a stored source (with state) into a free id (with state of its own): the
        # forks that succeed and copy state over state; else any two ids
        known, free = sorted(self.model), sorted(set(IDS) - set(self.model))
        source = data.draw(_prefer(known, self.states), label="source")
        new_id = data.draw(_prefer(free, self.states), label="new_id")
        length = len(self.model.get(source, []))
        keep = data.draw(st.none() | st.integers(0, length + 1), label="keep")  # one past the end
        if source == new_id:
            try:
                ForkRequest(source, new_id, keep)
            except SessionExistsError:
                return
            raise AssertionError(f"a fork of {source!r} into itself was accepted")
        with_state = data.draw(st.booleans(), label="state") and forks_state(self.sessions)
        request = ForkRequest(source, new_id, keep, state=with_state, checkpoints=self.home)
        stored = self.model.get(source)
        before = self.revisions.get(source)
        if new_id in self.model or stored is None or (keep or 0) > len(stored):
            try:
                self.sessions.fork(request)
            except StoreConflictError as exc:  # SessionExistsError exactly when new_id is stored
                assert isinstance(exc, SessionExistsError) == (new_id in self.model), repr(exc)
            else:
                raise AssertionError(f"{request} succeeded")
            assert self.sessions.load(new_id) == self.model.get(new_id), request
        else:
            kept = len(stored) if keep is None else keep
            done = self.sessions.fork(request)
            assert done.messages == kept, (request, done)
            self.model[new_id] = stored[:kept]
            self._wrote(new_id)
            if self.revisions_known:
                assert done.revision == self.revisions[new_id], (done, self.revisions[new_id])
            self._forked_state(source, new_id, with_state)
            info = self.sessions.info(new_id)
            assert info is not None and info.messages == kept
            if info.parent is not None or keeps_origins(self.sessions):
                assert (info.parent, info.fork_point) == (source, kept), info
        assert self.sessions.load(source) == stored, f"{request} changed its source"
        if self.revisions_known and stored is not None:
            assert self.sessions.revision(source) == before, f"{request} moved its source"

    @rule(id=SESSION_IDS)
    def read(self, id: str) -> None:
        """A reader loads ``id`` (the revision first, as a turn does) and keeps what it read."""
        revision = self.sessions.revision(id)
        self.held[id] = (self.sessions.load(id) or [], revision)

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def load_since(self, data: st.DataObject) -> None:
        """After any writes since (rewinds, saves, deletes, appends), ``load_since`` from what a
        reader holds (or a prefix of it) answers ``None`` or exactly what makes it current."""
        id = data.draw(st.sampled_from(sorted(self.held)))
        held, revision = self.held[id]
        upto = data.draw(st.integers(0, len(held)))
        check_since(self.sessions, id, held[:upto], revision)

    @rule(id=SESSION_IDS)
    def delete(self, id: str) -> None:
        self.sessions.delete(id)
        self.model.pop(id, None)
        self.revisions.pop(id, None)

    @rule(id=SESSION_IDS)
    def load(self, id: str) -> None:
        assert self.sessions.load(id) == self.model.get(id)

    @invariant()
    def known_ids_have_revisions(self) -> None:
        if self.revisions_known:
            for id in ("s1", "s2", "s-3"):
                assert (self.sessions.revision(id) is None) == (id not in self.model)


def _prefer(ids: list[str], states: dict[str, Any]) -> st.SearchStrategy[str]:
    """One of ``ids`` holding state, one of ``ids``, or any id, in that order of likelihood."""
    choices = [st.sampled_from(p) for p in ([i for i in ids if i in states], ids) if p]
    return st.one_of(*choices, SESSION_IDS)


class _CheckpointMachine(_StoreMachine):
    def __init__(self) -> None:
        super().__init__()
        checkpoints = self.parts.checkpoints
        if checkpoints is None:
            self.teardown()
            skip("the store has no checkpoints part")
        self.checkpoints = checkpoints
        self.model: dict[str, dict[str, Any]] = {}

    @rule(turn_id=TURN_IDS, checkpoint=st.dictionaries(TEXTS, JSON, max_size=3))
    def save(self, turn_id: str, checkpoint: dict[str, Any]) -> None:
        self.checkpoints.save(turn_id, checkpoint)
        self.model[turn_id] = checkpoint

    @rule(turn_id=TURN_IDS)
    def delete(self, turn_id: str) -> None:
        self.checkpoints.delete(turn_id)
        self.model.pop(turn_id, None)

    @rule(prefix=st.sampled_from(["", "s1", "s1.", "s2.s", "x"]))
    def list_checkpoints(self, prefix: str) -> None:
        expected = sorted(k for k in self.model if k.startswith(prefix))
        assert self.checkpoints.list(prefix) == expected

    @invariant()
    def checkpoints_match(self) -> None:
        for turn_id, checkpoint in self.model.items():
            assert self.checkpoints.load(turn_id) == checkpoint


class _ApprovalMachine(_StoreMachine):
    def __init__(self) -> None:
        super().__init__()
        approvals = self.parts.approvals
        if approvals is None:
            self.teardown()
            skip("the store has no approvals part")
        self.approvals = approvals
        self.model: dict[str, dict[str, Any]] = {}

    @rule(id=APPROVAL_IDS, session_id=SESSION_IDS, extra=JSON)
    def create(self, id: str, session_id: str, extra: object) -> None:
        record = {"id": id, "session_id": session_id, "status": "pending", "extra": extra}
        if id in self.model:
            try:
                self.approvals.create(record)
            except ValueError:
                return
            raise AssertionError(f"created approval {id!r} twice")
        self.approvals.create(record)
        self.model[id] = record

    @rule(
        id=APPROVAL_IDS,
        approved=st.booleans(),
        arguments=st.none() | st.dictionaries(TEXTS, JSON, max_size=3),
    )
    def resolve(self, id: str, approved: bool, arguments: dict[str, Any] | None) -> None:
        record = self.model.get(id)
        if not (approved and takes_arguments(self.approvals)):
            arguments = (
                None  # edited arguments go only with an approval, to a store that keeps them
            )
        resolve: Any = self.approvals.resolve  # the Protocol's resolve has no arguments=
        edits = {} if arguments is None else {"arguments": arguments}
        try:
            resolved = resolve(id, approved=approved, reason="why", **edits)
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
            assert resolved.get("arguments") == arguments
            self.model[id] = resolved

    @rule(id=APPROVAL_IDS)
    def delete(self, id: str) -> None:
        self.approvals.delete(id)
        self.model.pop(id, None)

    @rule(session_id=st.none() | SESSION_IDS, status=st.sampled_from([None, "pending", "approved"]))
    def list_approvals(self, session_id: str | None, status: str | None) -> None:
        expected = sorted(
            id
            for id, r in self.model.items()
            if (session_id is None or r["session_id"] == session_id)
            and (status is None or r["status"] == status)
        )
        found = self.approvals.list(session_id=session_id, status=status)
        assert sorted(r["id"] for r in found) == expected

    @invariant()
    def approvals_match(self) -> None:
        for id, record in self.model.items():
            assert self.approvals.get(id) == record


def session_machine(factory: Callable[[Path], Any]) -> type[RuleBasedStateMachine]:
    """The sessions part of ``factory(tmp_dir)`` against a dict: saves, appends, deletes,
    leases and stale fences, ``rewind`` (valid and refused: beyond the end, a wrong
    ``expected_length``, a stale fence, a missing session), ``fork`` (into a new id, an
    existing one, from a missing source; with its state or not), ``save_state`` and
    ``commit_turn`` with a state (both land or neither); every write changes the revision,
    and ``load_since`` from what a reader held before never answers a wrong list."""
    return _machine(_SessionMachine, factory)


def checkpoint_machine(factory: Callable[[Path], Any]) -> type[RuleBasedStateMachine]:
    """The checkpoints part of ``factory(tmp_dir)`` against a dict."""
    return _machine(_CheckpointMachine, factory)


def approval_machine(factory: Callable[[Path], Any]) -> type[RuleBasedStateMachine]:
    """The approvals part of ``factory(tmp_dir)`` against a dict."""
    return _machine(_ApprovalMachine, factory)
