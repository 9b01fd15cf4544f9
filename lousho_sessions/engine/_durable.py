"""A session's durable turns: the id a new turn takes, the pending turn, and running one.

Turn ``n`` of session ``id`` is checkpointed under ``TurnKey("session", id, n).turn_id``
(``f"{id}.turn-{n}"``), ``n`` being the transcript's length when it started, so a new
process finds the pending turn from the transcript alone. Without a checkpoint store
only a turn paused on an approval is kept, in the agent's memory. Everything here runs
on the session's worker thread, under the store's turn lock; every write carries its
lease's fence (``Transcript.fence``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import Any

import attrs

from ..abort import AbortController, AbortSignal
from ..errors import SessionAwaitingApprovalError, SessionBusyError, StoreCorruptError
from ..events import Event
from ..messages import Message, _new_id
from ..results import ExecutionResult, Limits
from ..stores._turn_requests import StartCheckpoint, TakenTurn
from ..stores.adapters import adapt_checkpoints
from ..stores.base import BaseCheckpointStore, CheckpointStore
from ._approvals import TurnKey
from ._checkpoint_codec import turn_checkpoint
from ._checkpoints import TurnCheckpoints
from ._config import Approve
from ._inbox import Inbox, Ticket
from ._output import OutputSpec
from ._runner import TurnRequest, TurnRunner
from ._transcript import Transcript
from ._turn import TurnState

__all__ = ["Offer", "SessionTurns", "TurnJob", "TurnPlan"]

log = logging.getLogger("lousho_sessions.session")


@attrs.define  # made before most turns' lease: a frozen init sets each field by a call
class Offer:
    """A new turn built before its lease, on the transcript held: its key, its state and its
    first checkpoint, offered to the store to save with the lease (``TakeTurn.checkpoint``)."""

    turn: TurnKey
    state: TurnState
    checkpoint: StartCheckpoint


@attrs.frozen
class TurnPlan:
    """What a session's turn starts from, decided once when its lease is taken (``plan()``).

    ``no_pending``: the store saw no checkpoint of the session with the lease, so no
    turn is pending (not read again). ``started``: the offered new turn, when the store
    saved its first checkpoint with the lease (it runs as it is; that save is not made
    again)."""

    no_pending: bool = False
    started: Offer | None = None


#: the plans of a turn started by nothing stored with the lease (most turns), made once
_NO_PENDING, _MAYBE_PENDING = TurnPlan(no_pending=True), TurnPlan()


class SessionTurns:
    """Runs, finds, finishes and drops the durable turns of one session."""

    def __init__(
        self,
        runner: TurnRunner,
        transcript: Transcript,
        checkpoint_store: CheckpointStore | None,
        limits: Limits | None,
    ) -> None:
        self.runner = runner
        self.transcript = transcript
        self.id = transcript.id
        self.durable = checkpoint_store is not None
        # without a checkpoint store, only a turn paused on an approval is kept, in memory
        self.pauses: BaseCheckpointStore = adapt_checkpoints(
            checkpoint_store or runner.runtime.pauses
        )
        self.limits = limits
        #: where the session's state record is kept by the store's default (``None``: the
        #: session store object itself, without a checkpoint store)
        self.state_store: BaseCheckpointStore | None = (
            None if checkpoint_store is None else self.pauses
        )
        # what every turn's request carries, made once: a session's own new turn (``last``:
        # its commit may free the lease) or a pending one finished first
        commit, store = transcript.commit, self.state_store
        self._commits = (
            partial(commit, last=False, state_store=store),
            partial(commit, last=True, state_store=store),
        )
        self._load_state = partial(transcript.load_state, store)

    def run(
        self,
        state: TurnState,
        turn: TurnKey,
        controller: AbortController,
        *,
        plan: TurnPlan,
        emit: Callable[[Event], None] | None,
        approve: Approve | None,
        inbox: Inbox | None,
        requeue: Callable[[Ticket], None] | None,
        resumed: bool = False,
        context: Any = None,
        output: OutputSpec | None = None,
    ) -> ExecutionResult:
        """Run ``state`` to an end; a finished turn is appended to the transcript.

        A session's own new turn (``requeue`` given: input it never took runs as a turn of
        its own) writes nothing under the lease after its commit, so that commit may free
        the lease; a pending turn finished first (no ``requeue``) is followed by more writes.
        """
        started = plan.started is not None and plan.started.state is state
        return self.runner.run(
            TurnRequest(  # by position, in the fields' order (keywords cost a dict, every turn)
                state,
                controller,
                self.checkpoints(input_saved=started),
                turn,
                emit,
                approve,
                inbox,
                resumed,
                self.limits,  # session_limits
                self.transcript.spent,  # session_spent
                self._commits[requeue is not None],  # commit
                requeue,
                None,  # approvals: the agent's
                context,
                output,
                self._load_state,
            )
        )

    def checkpoints(self, *, input_saved: bool = False) -> TurnCheckpoints:
        """Every checkpoint with a checkpoint store; else only a pause, in memory.
        ``input_saved``: a new turn whose first checkpoint the store saved with the lease."""
        return TurnCheckpoints(
            self.pauses, durable=self.durable, fence=self.transcript.fence, input_saved=input_saved
        )

    def offer(self, messages: list[Message], run_id: str) -> Offer | None:
        """The new turn of ``messages`` as it will start if nothing changed since the
        transcript was last read, with its first checkpoint, for the store to save with the
        lease (``TakeTurn.checkpoint``); ``None`` where it cannot be known beforehand."""
        if (
            not self.durable
            or not self.transcript.saves_start  # the store would not save it
            or self.transcript.known is None  # nothing read yet
            or self.runner.config.compaction is not None  # it may compact first
            or self.runner.telemetry is not None  # a traced turn's checkpoint holds its trace
        ):
            return None
        turn = self.next_turn()
        state = TurnState.start(
            messages,
            history=self.transcript.messages,
            copy_history=False,  # used on this thread only, changed by the commit
            session_id=self.id,
            turn_id=turn.turn_id,
            run_id=run_id,
        )
        return Offer(
            turn,
            state,
            StartCheckpoint(
                turn.turn_id, lambda: turn_checkpoint(state, encoded=True, fence=False)
            ),
        )

    def plan(self, taken: TakenTurn, offer: Offer | None = None) -> TurnPlan:
        """What the turn starts from, from what the store answered with the lease."""
        if offer is not None and taken.saved_checkpoint:
            return TurnPlan(no_pending=taken.no_checkpoints, started=offer)
        return _NO_PENDING if taken.no_checkpoints else _MAYBE_PENDING

    def new_turn(
        self, plan: TurnPlan, messages: list[Message], run_id: str, free: TurnKey | None = None
    ) -> tuple[TurnKey, TurnState]:
        """The key and state of a new turn, under the turn lock after the pending turn was
        finished: the one offered if the store saved it with the lease, else a new one.
        ``free``: a key found free under this lease (not looked up again)."""
        if plan.started is not None:
            # saved only if the transcript's revision had not moved and no turn was pending
            return plan.started.turn, plan.started.state
        turn = self.free_turn(free)
        state = TurnState.start(
            messages,
            history=self.transcript.messages,
            copy_history=False,
            session_id=self.id,
            turn_id=turn.turn_id,
            run_id=run_id,
        )
        return turn, state

    def next_turn(self) -> TurnKey:
        return TurnKey("session", self.id, len(self.transcript.messages))

    def awaiting(self, approval_id: str | None, then: str) -> SessionAwaitingApprovalError:
        return SessionAwaitingApprovalError(
            f"session {self.id!r} waits on approval {approval_id!r}; resolve it with "
            f"agent.approvals.resolve() or drop the turn with discard_pending(), then {then}",
            approval_id=approval_id,
        )

    def free_turn(self, free: TurnKey | None = None) -> TurnKey:
        """The key of a new turn, refused while a turn holds it.

        Called under the turn lock after the pending turn was finished, so the key is
        free unless that turn could not end; a checkpoint is never overwritten by another
        turn. ``free``: a key ``finish_pending`` found free under this lease.
        """
        if free is not None and free.n == len(self.transcript.messages):
            return free  # finish_pending found nothing there, under this lock
        turn = self.next_turn()
        data = self.pauses.load(turn.turn_id)
        if data is not None:
            if data.get("status") == "awaiting-approval":
                raise self.awaiting(data.get("approval_id"), "send() again")
            raise SessionBusyError(
                f"session {self.id!r}: turn {turn.turn_id!r} is still pending; "
                "finish it with resume() or drop it with discard_pending()"
            )
        return turn

    def pending(self, turn: TurnKey | None = None) -> TurnState | None:
        """The pending turn at the end of the transcript (its key ``turn``), if any."""
        key = turn if turn is not None else self.next_turn()
        return self.runner.load(self.checkpoints(), key, self.transcript.messages)

    def finish_pending(
        self,
        plan: TurnPlan,
        controller: AbortController | None,
        *,
        approve: Approve | None,
        link: AbortSignal | None = None,
        emit: Callable[[Event], None] | None = None,
        context: Any = None,
        output: OutputSpec | None = None,
    ) -> ExecutionResult | None:
        """Run the pending turn to an end (it becomes part of the transcript); None if none.

        ``controller`` stops it (``None``: one of its own, made only when a turn is pending)."""
        if plan.no_pending:  # the lease saw no checkpoint of this session when taken
            return None
        turn = self.next_turn()
        state = self.pending(turn)
        if state is None:
            return None
        self.runner.release(state, lambda approval_id: self.awaiting(approval_id, "try again"))
        if controller is None:
            controller = AbortController()
        if link is not None:
            stop = controller.abort
            link.add_callback(lambda s: stop(s.reason))
        return self.run(
            state,
            turn,
            controller,
            plan=plan,
            emit=emit,
            approve=approve,
            inbox=None,
            requeue=None,
            resumed=True,
            context=context,
            output=output,
        )

    def refuse_clear(self) -> None:
        """Raise while the pending turn waits on an approval (``clear()`` would drop it)."""
        try:
            state = self.pending()
        except StoreCorruptError as exc:  # clear() deletes it without reading it
            log.warning("clear() of session %r drops an unreadable checkpoint: %s", self.id, exc)
            return
        if state is not None:
            self.runner.release(
                state,
                lambda approval_id: SessionAwaitingApprovalError(
                    f"session {self.id!r} waits on approval {approval_id!r}; "
                    "resolve it or call discard_pending() before clear()",
                    approval_id=approval_id,
                ),
            )

    def drop_pending(self) -> None:
        """Delete every checkpoint of this session, and the approvals they wait on."""
        approvals = self.runner.config.approvals
        for turn_id in self.pauses.list(f"{self.id}.turn-"):
            try:
                data = self.pauses.load(turn_id)
            except StoreCorruptError as exc:  # unreadable: delete it and the approvals it made
                log.warning("deleting unreadable checkpoint %s: %s", turn_id, exc)
                for record in approvals.list(session_id=self.id, status=None):
                    if record.get("turn_id") == turn_id:
                        approvals.delete(str(record.get("id")))
                data = None
            if data and isinstance(data.get("approval_id"), str):
                approvals.delete(data["approval_id"])
            self.pauses.delete(turn_id, fence=self.transcript.fence)


class TurnJob:
    """What a session's queued turn carries until its worker runs it. ``prepare``: run under
    the turn's lease before it starts (a rewind), answering the turn's input (``regenerate``,
    ``edit``: one job, so no other turn lands between the rewind and the new turn)."""

    __slots__ = (
        "approve", "context", "controller", "emit", "inbox", "messages", "output", "prepare",
        "run_id",
    )  # fmt: skip

    def __init__(
        self,
        messages: list[Message],
        controller: AbortController,
        emit: Callable[[Event], None] | None,
        approve: Approve | None,
        context: Any,
        output: OutputSpec | None = None,
    ) -> None:
        self.context = context
        self.messages = messages
        self.controller = controller
        self.emit = emit
        self.approve = approve
        self.output = output
        self.inbox = Inbox()
        self.run_id = "run-" + _new_id()
        self.prepare: Callable[[], list[Message]] | None = None
