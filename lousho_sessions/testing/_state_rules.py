"""The session state machine's rules of a session's state (``machines``): ``save_state``, a
turn's commit with its state, and a fork copying state over state, against a dict model."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from ..errors import StoreConflictError
from ..messages import Message
from ..stores._history_requests import forks_state
from ..stores._turn_requests import commits_state
from ..stores.base import BaseCheckpointStore, BaseSessionStore, CommitTurn, ForkRequest, SaveState
from ._support import WAIT, raises

__all__ = ["IDS", "JSON", "SESSION_IDS", "STATES", "TEXTS", "StateRules"]

IDS = ("s1", "s2", "s-3")
SESSION_IDS = st.sampled_from(IDS)
TEXTS = st.text(st.characters(codec="utf-8"), max_size=8)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | TEXTS,
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(TEXTS, inner, max_size=2),
    max_leaves=5,
)
#: State objects; their texts hold U+0000 too (PostgreSQL's schema v5 refused it in a commit
#: or a fork over state, fixed in v6).
_STATE_TEXTS = TEXTS
STATES = st.dictionaries(
    _STATE_TEXTS,
    st.recursive(
        st.none() | st.booleans() | st.integers(-(2**31), 2**31) | _STATE_TEXTS,
        lambda inner: (
            st.lists(inner, max_size=2) | st.dictionaries(_STATE_TEXTS, inner, max_size=2)
        ),
        max_leaves=4,
    ),
    max_size=3,
)
_MESSAGES = st.lists(
    st.builds(Message.user, TEXTS) | st.builds(Message.assistant, TEXTS), max_size=3
)


class StateRules:
    """The state rules of ``_SessionMachine`` (which holds the model they check)."""

    sessions: BaseSessionStore
    #: where the states are kept (the checkpoints part, or ``None``)
    home: BaseCheckpointStore | None
    model: dict[str, list[Message]]
    fences: dict[str, list[int]]
    #: id -> (state, version) as ``save_state``, ``commit_turn`` and ``fork`` left it
    states: dict[str, tuple[dict[str, Any], int]]

    def _wrote(self, id: str) -> None:
        raise NotImplementedError  # the machine's

    @rule(id=SESSION_IDS, state=STATES, stale=st.booleans())
    def save_state(self, id: str, state: dict[str, Any], stale: bool) -> None:
        """A compare-and-set on the version: a wrong ``expected_version`` changes nothing."""
        _, version = self.states.get(id, ({}, 0))
        if stale:
            with raises(StoreConflictError):
                self.sessions.save_state(SaveState(id, state, version + 1, None, self.home))
        else:
            new = self.sessions.save_state(SaveState(id, state, version, None, self.home))
            assert new != version
            self.states[id] = (state, new)
        assert self.sessions.load_state(id, self.home) == self.states.get(id, ({}, 0))

    def _forked_state(self, source: str, new_id: str, copied: bool) -> None:
        """The state ``fork`` left ``new_id``: the source's at a new version when copied and
        there is one, else what the new id had."""
        held = self.states.get(new_id, ({}, 0))
        state, version = self.sessions.load_state(new_id, self.home)
        if copied and source in self.states:
            assert (state, version != held[1]) == (self.states[source][0], True), new_id
            self.states[new_id] = (state, version)
        else:
            assert (state, version) == held, f"a fork changed the state of {new_id!r}"

    @precondition(lambda self: self.model and len(self.model) < len(IDS))
    @rule(data=st.data(), state=STATES, own=STATES)
    def fork_over_state(
        self, data: st.DataObject, state: dict[str, Any], own: dict[str, Any]
    ) -> None:
        """A fork with its state into an id that has state of its own (and no transcript)."""
        if not forks_state(self.sessions):
            return
        source = data.draw(st.sampled_from(sorted(self.model)), label="source")
        new_id = data.draw(st.sampled_from(sorted(set(IDS) - set(self.model))), label="new_id")
        self.save_state(source, state, False)
        self.save_state(new_id, own, False)
        self.sessions.fork(ForkRequest(source, new_id, state=True, checkpoints=self.home))
        self.model[new_id] = list(self.model[source])
        self._wrote(new_id)
        self._forked_state(source, new_id, True)

    @rule(
        id=SESSION_IDS,
        messages=_MESSAGES,
        state=st.none() | STATES,
        right=st.booleans(),
    )
    def commit_state(self, id: str, messages: list[Message], state: Any, right: bool) -> None:
        """A turn's commit with (or without) its state: both land, or neither does."""
        if not commits_state(self.sessions):
            return
        length = len(self.model.get(id, [])) + (0 if right else 1)
        with self.sessions.turn_lock(id, timeout=WAIT) as lease:
            self.fences.setdefault(id, []).append(lease.fence)
            request = CommitTurn(id, messages, length, self.home, (), lease.fence, state=state)
            if not right:
                with raises(StoreConflictError):
                    self.sessions.commit_turn(request)
            else:
                self.sessions.commit_turn(request)
                self.model[id] = self.model.get(id, []) + messages
                self._wrote(id)
        held = self.states.get(id, ({}, 0))
        found = self.sessions.load_state(id, self.home)
        if right and state is not None:
            assert found[0] == state and found[1] != held[1], (found, held)
            self.states[id] = found
        else:
            assert found == held, f"a commit that wrote no state changed it: {request}"
