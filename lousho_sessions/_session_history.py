"""``Session.rewind``, ``regenerate``, ``edit`` and ``fork``: changing a conversation's history.

Each runs as a job on the session's lane, like a turn: queued behind a running turn,
under the session's lease, its store write fenced. A rewind first drops the pending
turn (its checkpoints deleted, its open approval marked ``"cancelled"``), then writes
the shorter transcript in one store call (``rewind(RewindRequest)``), compare-and-set on
the length the lease read; another ``Session`` object or process sees the change at its
next turn (the revision changed, and ``load_since`` never answers across a rewind).
``regenerate`` and ``edit`` are one turn job whose first step, under the turn's lease, is
the rewind: no turn of another process lands between the rewind and the new turn.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypeVar

from .abort import AbortSignal
from .errors import MessageNotFoundError, StoreCorruptError
from .inputs import Input, to_messages
from .messages import Message
from .results import ExecutionResult
from .run import AgentRun
from .runtime._calls import Stop, Stoppable, linked
from .stores._history_requests import fork_with_state
from .stores._summaries import SessionInfo
from .stores.base import RewindRequest, validate_session_id

if TYPE_CHECKING:
    from .engine._durable import SessionTurns
    from .engine._session_core import SessionCore
    from .runtime._worker import Job

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

    _core: SessionCore  # the session's core (``Session.__init__``)

    def rewind(self, to: int | str) -> list[Message]:
        """Keep the messages before ``to`` and return the ones removed.

        ``to``: an index (the transcript becomes ``messages[:to]``) or a message id
        (everything before that message is kept). Runs after the turns queued before it,
        under the session's lease; drops a pending turn (its approval reads as
        ``"cancelled"``). ``MessageNotFoundError`` for an id or index the transcript
        does not have; nothing is changed then.
        """
        removed: list[Message] = self._rewind_future(
            lambda msgs: point_of(self._core.id, msgs, to)
        ).result()
        return removed

    def _rewind_future(self, point: Callable[[Sequence[Message]], int]) -> Future[list[Message]]:
        self._core.lane.refuse_reentry("rewind")

        def work(job: Job) -> list[Message]:
            t = self._core.transcript
            with t.turn_lock():
                t.sync()
                return self._rewind_held(point)

        future: Future[list[Message]] = self._core.run(work, "rewind")
        return future

    def _rewind_held(self, point: Callable[[Sequence[Message]], int]) -> list[Message]:
        """The rewind itself, under the lease held and on the transcript just read: drop the
        pending turn and keep the messages before ``point(messages)``; the removed ones."""
        t = self._core.transcript
        held = list(t.messages)
        keep = point(held)
        drop_rewound_turn(self._core.turns, t.fence)
        if keep == len(held):
            return []
        request = RewindRequest(self._core.id, keep, fence=t.fence, expected_length=len(held))
        done = t.store.rewind(request)
        t.set(held[:keep], done.revision)
        return held[keep:]

    def _last_user(self, messages: Sequence[Message]) -> int:
        for i in range(len(messages) - 1, -1, -1):
            if messages[i].role == "user":
                return i
        raise MessageNotFoundError(f"session {self._core.id!r}: no user message to regenerate from")

    def _user_message(self, message_id: str) -> Callable[[Sequence[Message]], int]:
        def point(messages: Sequence[Message]) -> int:
            i = point_of(self._core.id, messages, message_id)
            if messages[i].role != "user":
                raise MessageNotFoundError(
                    f"session {self._core.id!r}: message {message_id!r} is an {messages[i].role} "
                    "message; edit() takes the id of a user message"
                )
            return i

        return point

    def _regenerating(self) -> Callable[[], list[Message]]:
        """What a regenerate does before its turn: rewind to the last user message, which is
        the turn's input again."""
        self._core.lane.refuse_reentry("regenerate")
        return lambda: [again(self._rewind_held(self._last_user)[0])]

    def _editing(self, message_id: str, input: Input) -> Callable[[], list[Message]]:
        """What an edit does before its turn: rewind to ``message_id``; ``input`` is the turn's."""
        self._core.lane.refuse_reentry("edit")
        messages = to_messages(input)  # checked now, before anything is queued
        point = self._user_message(message_id)

        def prepare() -> list[Message]:
            self._rewind_held(point)
            return messages

        return prepare

    def _prepared_turn(
        self,
        prepare: Callable[[], list[Message]],
        *,
        signal: AbortSignal | None = None,
        timeout: float | None = None,
        context: Any = None,
        output_type: Any = None,
        streamed: bool = False,
    ) -> tuple[Job, Stoppable, float | None]:
        """A turn job (``send``'s options) whose input ``prepare`` makes under its lease, not
        yet queued; the call that queues and stops it; the ``timeout``."""
        core = self._core
        output = core.runner.config.output_for(output_type)
        job = core.turn_job(
            [], linked(signal), emit=None, approve=None if streamed else core.approve,
            context=context, output=output,
        )  # fmt: skip
        job.state.prepare = prepare
        return job, core.call(job), timeout

    def _prepared_future(
        self, prepare: Callable[[], list[Message]], **options: Any
    ) -> tuple[Future[ExecutionResult | None], Stop, float | None]:
        """``_prepared_turn`` queued: its Future, what stops it, the ``timeout``."""
        _, call, timeout = self._prepared_turn(prepare, **options)
        future, stop = call.queued()
        assert stop is not None
        return future, stop, timeout

    def _prepared_call(self, prepare: Callable[[], list[Message]], **options: Any) -> Any:
        """``_prepared_turn`` queued and waited for (queued in ``wait``: Ctrl-C stops it)."""
        _, call, timeout = self._prepared_turn(prepare, **options)
        return call.wait(timeout)

    def _prepared_stream(self, prepare: Callable[[], list[Message]], **options: Any) -> AgentRun:
        """``_prepared_turn`` queued and streamed (``stream``'s options)."""
        job, _, _ = self._prepared_turn(prepare, streamed=True, **options)
        run: AgentRun = self._core.streamed(job)
        return run

    def regenerate(self, **options: Any) -> ExecutionResult:
        """Rewind to the last user message and send it again (``send``'s options); the new
        result. The rewind and the new turn are one job under one lease: no other turn lands
        between them. ``MessageNotFoundError`` when there is no user message (nothing changed)."""
        result: ExecutionResult = self._prepared_call(self._regenerating(), **options)
        return result

    def regenerate_stream(self, **options: Any) -> AgentRun:
        """``regenerate``, streamed (``stream``'s options): the rewind is the run's first step, so
        its errors (no user message) come from the run, as a turn's do."""
        return self._prepared_stream(self._regenerating(), **options)

    def edit(self, message_id: str, input: Input, **options: Any) -> ExecutionResult:
        """Rewind to the user message ``message_id`` (dropping it and all after it) and send
        ``input`` in its place (``send``'s options); the new result. One job under one lease,
        as ``regenerate``. ``MessageNotFoundError`` for an id that is not a user message of the
        transcript (nothing changed)."""
        prepare = self._editing(message_id, input)
        result: ExecutionResult = self._prepared_call(prepare, **options)
        return result

    def edit_stream(self, message_id: str, input: Input, **options: Any) -> AgentRun:
        """``edit``, streamed: the rewind is the run's first step (an unknown ``message_id``
        fails the run, as a turn's error does)."""
        return self._prepared_stream(self._editing(message_id, input), **options)

    def fork(self: _S, new_id: str, at: int | str | None = None) -> _S:
        """A new session ``new_id`` holding the messages before ``at`` (as ``rewind``'s ``to``;
        ``None``: all) and this session's state, made in one store write where the store can;
        its ``info()`` names this session as its ``parent`` and the ``fork_point``. ``SessionExistsError`` if ``new_id`` is stored. A
        pending turn is not copied. The new session has this one's store and settings."""
        new: _S = self._fork_future(new_id, at).result()
        return new

    def _fork_future(self: _S, new_id: str, at: int | str | None) -> Future[_S]:
        validate_session_id(new_id)
        core = self._core
        core.lane.refuse_reentry("fork")

        def work(job: Job) -> _S:
            t = core.transcript
            with t.turn_lock():
                t.sync()
                keep = len(t.messages) if at is None else point_of(core.id, t.messages, at)
                fork_with_state(t.store, core.id, new_id, keep, core.turns.state_store)
            make: Any = type(self)
            made: _S = make(core.like(new_id))
            return made

        future: Future[_S] = core.run(work, "fork")
        return future

    def info(self) -> SessionInfo | None:
        """What the store tells of this session: length, last write, and for a fork its
        ``parent`` and ``fork_point``; ``None`` when nothing is stored."""
        core = self._core
        result: SessionInfo | None = core.run(
            lambda job: core.transcript.store.info(core.id), "info"
        ).result()
        return result


def again(message: Message) -> Message:
    """The user message ``message`` sent again: its content, a new id and time."""
    return Message.user(list(message.content), metadata=message.metadata)
