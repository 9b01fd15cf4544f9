"""``Session.rewind``, ``regenerate``, ``edit`` and ``fork``: changing a conversation's history.

Each runs as a job on the session's lane, like a turn: queued behind a running turn,
under the session's lease, its store write fenced. A rewind first drops the pending
turn (its checkpoints deleted, its open approval marked ``"cancelled"``), then writes
the shorter transcript in one store call (``rewind(RewindRequest)``), compare-and-set on
the length the lease read; another ``Session`` object or process sees the change at its
next turn (the revision changed, and ``load_since`` never answers across a rewind).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypeVar

from .errors import MessageNotFoundError, StoreCorruptError
from .inputs import Input
from .messages import Message
from .results import ExecutionResult
from .run import AgentRun
from .stores._summaries import SessionInfo
from .stores.base import ForkRequest, RewindRequest, validate_session_id

if TYPE_CHECKING:
    from ._durable import SessionTurns
    from ._worker import Job

__all__ = ["HistoryMixin", "again", "cancel_approval", "point_of"]

log = logging.getLogger("lousho_sessions.session")

#: The reason a rewind writes into the approvals it cancels.
REWOUND = "the session was rewound past its turn"


def point_of(session_id: str, messages: Sequence[Message], to: int | str) -> int:
    """How many messages to keep for ``to``: an index (``messages[:to]``, negative counting
    from the end) or a message id (everything before it); ``MessageNotFoundError`` else."""
    n = len(messages)
    if isinstance(to, bool) or not isinstance(to, (int, str)):
        raise TypeError(f"to must be a message index (int) or a message id (str), got {to!r}")
    if isinstance(to, int):
        if not -n <= to <= n:
            raise MessageNotFoundError(
                f"session {session_id!r}: index {to} is outside its {n} messages (use {-n}..{n})"
            )
        return to if to >= 0 else n + to
    for i, m in enumerate(messages):
        if m.id == to:
            return i
    raise MessageNotFoundError(f"session {session_id!r}: no message with id {to!r}")


def cancel_approval(approvals: Any, approval_id: str, reason: str) -> None:
    """Mark a pending approval ``"cancelled"`` with ``reason`` (``resolve()`` then raises
    ``ApprovalCancelledError``); an approval not pending is left as it is."""
    record = approvals.get(approval_id)
    if record is None or record.get("status") != "pending":
        return
    cancelled = {
        **record,
        "status": "cancelled",
        "reason": reason,
        "resolved_at": datetime.now(timezone.utc).isoformat(),
    }
    approvals.delete(approval_id)
    approvals.create(cancelled)


def drop_rewound_turn(turns: SessionTurns, fence: int | None) -> None:
    """``SessionTurns.drop_pending``, the approvals cancelled instead of deleted."""
    approvals = turns.runner.config.approvals
    for turn_id in turns.pauses.list(f"{turns.id}.turn-"):
        try:
            data = turns.pauses.load(turn_id)
        except StoreCorruptError as exc:
            log.warning("deleting unreadable checkpoint %s: %s", turn_id, exc)
            data = None
            for record in approvals.list(session_id=turns.id, status="pending"):
                if record.get("turn_id") == turn_id:
                    cancel_approval(approvals, str(record.get("id")), REWOUND)
        if data and isinstance(data.get("approval_id"), str):
            cancel_approval(approvals, data["approval_id"], REWOUND)
        turns.pauses.delete(turn_id, fence=fence)


#: the Session type, as a method of the mixin sees it
_S = TypeVar("_S", bound="HistoryMixin")


class HistoryMixin:
    """The history verbs of ``Session`` (see the module)."""

    @property
    def _me(self) -> Any:
        # the Session this mixin is part of (typed loosely: session.py imports this module)
        return self

    def rewind(self, to: int | str) -> list[Message]:
        """Keep the messages before ``to`` and return the ones removed.

        ``to``: an index (the transcript becomes ``messages[:to]``) or a message id
        (everything before that message is kept). Runs after the turns queued before it,
        under the session's lease; drops a pending turn (its approval reads as
        ``"cancelled"``). ``MessageNotFoundError`` for an id or index the transcript
        does not have; nothing is changed then.
        """
        removed: list[Message] = self._rewind_future(
            lambda msgs: point_of(self._me.id, msgs, to)
        ).result()
        return removed

    def _rewind_future(self, point: Callable[[Sequence[Message]], int]) -> Future[list[Message]]:
        self._me._refuse_reentry("rewind")

        def work(job: Job) -> list[Message]:
            t = self._me._transcript
            with t.turn_lock():
                t.sync()
                held = list(t.messages)
                keep = point(held)
                drop_rewound_turn(self._me._turns, t.fence)
                if keep == len(held):
                    return []
                request = RewindRequest(self._me.id, keep, fence=t.fence, expected_length=len(held))
                done = t.store.rewind(request)
                t.set(held[:keep], done.revision)
                return held[keep:]

        future: Future[list[Message]] = self._me._run_job(work, "rewind")
        return future

    def _last_user(self, messages: Sequence[Message]) -> int:
        for i in range(len(messages) - 1, -1, -1):
            if messages[i].role == "user":
                return i
        raise MessageNotFoundError(f"session {self._me.id!r}: no user message to regenerate from")

    def _user_message(self, message_id: str) -> Callable[[Sequence[Message]], int]:
        def point(messages: Sequence[Message]) -> int:
            i = point_of(self._me.id, messages, message_id)
            if messages[i].role != "user":
                raise MessageNotFoundError(
                    f"session {self._me.id!r}: message {message_id!r} is an {messages[i].role} "
                    "message; edit() takes the id of a user message"
                )
            return i

        return point

    def regenerate(self, **options: Any) -> ExecutionResult:
        """Rewind to the last user message and send it again (``send``'s options); the new result."""
        removed = self._rewind_future(self._last_user).result()
        result: ExecutionResult = self._me.send(again(removed[0]), **options)
        return result

    def regenerate_stream(self, **options: Any) -> AgentRun:
        """``regenerate``, streamed: the rewind is done when this returns; the run streams the turn."""
        removed = self._rewind_future(self._last_user).result()
        result: AgentRun = self._me.stream(again(removed[0]), **options)
        return result

    def edit(self, message_id: str, input: Input, **options: Any) -> ExecutionResult:
        """Rewind to the user message ``message_id`` (dropping it and all after it) and send
        ``input`` in its place (``send``'s options); the new result."""
        self._rewind_future(self._user_message(message_id)).result()
        result: ExecutionResult = self._me.send(input, **options)
        return result

    def edit_stream(self, message_id: str, input: Input, **options: Any) -> AgentRun:
        """``edit``, streamed: the rewind is done when this returns; the run streams the turn."""
        self._rewind_future(self._user_message(message_id)).result()
        result: AgentRun = self._me.stream(input, **options)
        return result

    def fork(self: _S, new_id: str, at: int | str | None = None) -> _S:
        """A new session ``new_id`` holding the messages before ``at`` (as ``rewind``'s ``to``;
        ``None``: all), made in one store write; its ``info()`` names this session as its
        ``parent`` and the ``fork_point``. ``SessionExistsError`` if ``new_id`` is stored. A
        pending turn is not copied. The new session has this one's store and settings."""
        new: _S = self._fork_future(new_id, at).result()
        return new

    def _fork_future(self: _S, new_id: str, at: int | str | None) -> Future[_S]:
        me: Any = self

        validate_session_id(new_id)
        self._me._refuse_reentry("fork")

        def work(job: Job) -> _S:
            t = self._me._transcript
            with t.turn_lock():
                t.sync()
                keep = len(t.messages) if at is None else point_of(self._me.id, t.messages, at)
                t.store.fork(ForkRequest(self._me.id, new_id, keep))
            make: Any = type(self)
            made: _S = make(
                self._me._runner,
                new_id,
                store=self._me.store,
                checkpoint_store=self._me.checkpoint_store,
                turn_policy=self._me.turn_policy,
                limits=self._me.limits,
            )
            return made

        future: Future[_S] = me._run_job(work, "fork")
        return future

    def info(self) -> SessionInfo | None:
        """What the store tells of this session: length, last write, and for a fork its
        ``parent`` and ``fork_point``; ``None`` when nothing is stored."""
        result: SessionInfo | None = self._me._run_job(
            lambda job: self._me._transcript.store.info(self._me.id), "info"
        ).result()
        return result


def again(message: Message) -> Message:
    """The user message ``message`` sent again: its content, a new id and time."""
    return Message.user(list(message.content), metadata=message.metadata)
