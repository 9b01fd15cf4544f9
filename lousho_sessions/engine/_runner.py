"""The turn runner: every turn — session, single send, ``AgentExecutor`` — runs through here.

``TurnRunner.run`` builds the turn's ``TurnConfig`` from the agent's configuration,
drives ``Turn``, and settles what the turn leaves: it commits a finished turn (through
the caller's ``commit``, which deletes its checkpoint in the same write), deletes the
checkpoint of a turn that ended otherwise (aborted, or failed for good —
``failures.is_permanent``) and keeps the one of a turn that paused or may succeed
when tried again, and answers the callers that joined the turn.

A turn whose session lease was lost (``LeaseLostError`` from any of its writes:
another turn holds the session now) ends at once with that error: it is not
retried, writes nothing more, and leaves its checkpoint alone — the turn that took
the session over owns it now. ``TurnRunner.release`` is the one "waits on approval" gate, ``finish`` loads a
pending turn and runs it to an end.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import attrs

from ..abort import AbortController
from ..errors import LeaseLostError, StoreCorruptError
from ..events import Event
from ..failures import is_permanent
from ..messages import NO_USAGE, Message, Usage
from ..results import ExecutionResult, Limits, PendingTurn
from ..runtime._runtime import Runtime
from ..serde import message_to_dict
from ..stores._state_requests import changed_state
from ..stores.adapters import adapt_approvals
from ..stores.base import ApprovalStore, BaseCheckpointStore
from ..telemetry._spans import Telemetry
from ._approvals import TurnKey
from ._checkpoint_codec import turn_state_from_checkpoint
from ._checkpoints import TurnCheckpoints
from ._config import AgentConfig, Approve
from ._inbox import Inbox, Ticket
from ._output import OutputSpec
from ._turn import Turn, TurnConfig, TurnState

__all__ = ["Commit", "TurnRequest", "TurnRunner", "settle"]

log = logging.getLogger("lousho_sessions.turn")


class Commit(Protocol):
    """Saves a finished turn's messages (and its ``state``, when it read it) and deletes the
    checkpoints ``delete`` of ``checkpoints``."""

    def __call__(
        self,
        new: list[Message],
        checkpoints: BaseCheckpointStore,
        delete: Sequence[str],
        *,
        state: dict[str, Any] | None = None,
    ) -> None: ...


@attrs.define  # not frozen: made for every turn, and a frozen init sets each field by a call
class TurnRequest:
    """One turn for ``TurnRunner.run``: ``state`` run under ``controller``, checkpointed by
    ``checkpoints``.

    ``turn``: its key (``None``: an ``AgentExecutor`` turn). ``commit`` saves a finished
    turn's messages (a session's transcript) and deletes its checkpoint in one go.
    ``requeue`` runs input the turn never took as the next turn. ``context`` is the
    caller's object for tools (``ToolContext.context``); ``output`` the type the answer
    is parsed into (``None``: the agent's); ``approvals`` the store of its approvals
    (``None``: the agent's). ``resumed``: a pending turn taken up again.
    """

    state: TurnState
    controller: AbortController
    checkpoints: TurnCheckpoints
    turn: TurnKey | None
    emit: Callable[[Event], None] | None = None
    approve: Approve | None = None
    inbox: Inbox | None = None
    resumed: bool = False
    session_limits: Limits | None = None
    session_spent: tuple[Usage, int, int] = (NO_USAGE, 0, 0)
    commit: Commit | None = None
    requeue: Callable[[Ticket], None] | None = None
    approvals: ApprovalStore | None = None
    context: Any = None
    output: OutputSpec | None = None
    #: reads the session's stored state, under the turn's lease (``ToolContext.state``)
    load_state: Callable[[], dict[str, Any]] | None = None


class TurnRunner:
    """Runs the turns of one agent with its configuration, on its runtime."""

    def __init__(self, config: AgentConfig, runtime: Runtime) -> None:
        self.config = config
        self.runtime = runtime
        #: decided once per agent: None when nothing is traced or measured
        self.telemetry = Telemetry.build(
            config.tracer_provider,
            config.meter_provider,
            content=config.trace_content,
            name=config.name,
            provider=config.provider.name.split("/", 1)[0],  # "openai/gpt-4o" -> "openai"
            model=config.model_name,
            system=config.system,
        )

    def run(self, request: TurnRequest) -> ExecutionResult:
        """Run ``request.state`` to an end and settle it; raises the turn's error."""
        state, controller, checkpoints = request.state, request.controller, request.checkpoints
        resumed, inbox, requeue, commit = (
            request.resumed, request.inbox, request.requeue, request.commit,
        )  # fmt: skip
        c = self.config
        if resumed:
            log.info(
                "resuming turn %s (run %s) after step %d", state.turn_id, state.run_id, state.steps
            )
        # positional, in the fields' order: a class called with keywords packs them into a
        # dict and unpacks it again, which costs more than the rest of the call (every turn)
        config = TurnConfig(
            c.provider,
            c.system,
            c.tools,
            controller.signal,
            adapt_approvals(request.approvals or c.approvals),
            c.settings,
            c.max_steps,
            c.limits,
            request.session_limits,
            request.session_spent,
            c.model_name,
            c.pricing,
            request.approve,
            checkpoints,
            request.emit,
            self.runtime.run_tools,
            inbox,
            self.runtime.tool_loop,
            request.turn,
            request.context,
            request.load_state,
            None,  # trace: started below
            request.output if request.output is not None else c.output,
        )
        kept = checkpoints.durable or resumed  # a checkpoint may exist
        trace = None  # started last: nothing between it and the try can leave it open
        if self.telemetry is not None:
            trace = self.telemetry.turn(state, resumed=resumed, fence=checkpoints.fence)
        config.trace = trace
        try:
            result = Turn(state, config).run()
            reason = result.finish_reason
            if commit is not None and reason not in ("aborted", "awaiting-approval"):
                keys = checkpoints.keys(state) if kept else []
                extra = state.extra  # the turn's state, when a tool read it
                changed = changed_state(extra) if "state" in extra else None
                commit(list(state.new), checkpoints.store, keys, state=changed)
                state.records.clear()
                kept = False  # the commit deleted it
        except LeaseLostError as exc:
            # another turn holds the session now: its checkpoint, its approvals; write nothing
            log.warning("turn %s lost its lease and ends: %s", state.turn_id, exc)
            if trace is not None:
                trace.end(error=exc)
            if self.telemetry is not None:
                self.telemetry.lease_lost()
            settle(inbox, None, exc, requeue)
            raise
        except BaseException as exc:
            if trace is not None:
                trace.end(error=exc)
            permanent = is_permanent(exc)
            left = inbox.close() if inbox is not None else []
            if left and checkpoints.durable and not permanent:
                state.queued.extend(
                    {"input_id": t.input_id, "messages": [message_to_dict(m) for m in t.messages]}
                    for t in left
                )
                try:
                    checkpoints.save(state)
                except Exception:  # the turn's own error is the one to raise
                    log.warning(
                        "could not save the queued input of %s", state.turn_id, exc_info=True
                    )
            if permanent and kept:
                # would fail the same way on every try: end the turn instead of keeping it
                log.warning("turn %s ended by a permanent failure: %r", state.turn_id, exc)
                _forget_quietly(checkpoints, state)
            settle(inbox, None, exc, requeue)
            raise
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "turn %s (run %s) ended: %s after %d model calls and %d tool calls",
                state.turn_id, state.run_id, reason, state.steps, state.tool_calls,
            )  # fmt: skip
        if trace is not None:
            trace.end(result)
        if reason == "aborted" and (resumed or (checkpoints.durable and state.tool_calls)):
            # what ran is never dropped: the turn stays pending with what finished recorded
            result = _keep_aborted(checkpoints, state, result)
        elif kept and reason != "awaiting-approval":
            checkpoints.forget(state)
        settle(inbox, result, None, requeue)
        return result

    def release(self, state: TurnState, waiting: Callable[[str | None], Exception]) -> None:
        """The approval gate: let a turn paused on an approval go on once it is decided.

        Raises ``waiting(approval_id)`` while the approval is pending (or its record is gone).
        A turn a sweep abandoned (``lousho_sessions.recovery``) is tried again: whoever
        calls ``resume()``/``send()`` on it decided so.
        """
        if state.status == "abandoned":
            state.status = "running"
        if state.status != "awaiting-approval":
            return
        if not self.decided(state):
            raise waiting(state.approval_id)
        state.status, state.approval_id = "running", None

    def decided(self, state: TurnState) -> bool:
        """Whether the approval the paused ``state`` waits on is decided (its record there,
        not pending): the turn may go on and apply the decision."""
        record = self.config.approvals.get(state.approval_id or "")
        return record is not None and record.get("status") != "pending"

    def load(
        self, checkpoints: TurnCheckpoints, turn: TurnKey, history: Sequence[Message] = ()
    ) -> TurnState | None:
        """The pending turn saved under ``turn``, its recorded tool results merged; None if none.

        A session turn's checkpoint that no longer matches ``history`` (the transcript
        changed under it) is deleted with a warning and not returned.
        """
        turn_id = turn.turn_id
        data = checkpoints.store.load(turn_id)
        if data is None:
            return None
        if turn.kind == "session":
            last = history[-1].id if history else None
            if data.get("base_last_id") != last or data.get("base_length") != len(history):
                log.warning(
                    "dropping stale checkpoint %s: the transcript changed under it", turn_id
                )
                checkpoints.store.delete(turn_id, fence=checkpoints.fence)
                return None
        try:
            state = turn_state_from_checkpoint(data, history, source=f"checkpoint {turn_id!r}")
            checkpoints.merge_records(state)
        except (AttributeError, KeyError, TypeError) as exc:  # fields of the wrong type
            raise StoreCorruptError(
                f"checkpoint {turn_id!r}: cannot read checkpoint: {exc!r}"
            ) from exc
        return state


def _keep_aborted(
    checkpoints: TurnCheckpoints, state: TurnState, result: ExecutionResult
) -> ExecutionResult:
    """Keep an aborted turn that was resumed or whose tools ran pending, saved whole with what
    finished (a failed save is logged: its earlier checkpoint and result records stay)."""
    log.info(
        "turn %s was aborted after %d tool calls (resumed or its tools ran): kept pending",
        state.turn_id, state.tool_calls,
    )  # fmt: skip
    try:
        checkpoints.keep(state)
    except Exception:
        log.warning("could not save the aborted turn %s", state.turn_id, exc_info=True)
    return attrs.evolve(result, pending=PendingTurn("running", state.turn_id or ""))


def _forget_quietly(checkpoints: TurnCheckpoints, state: TurnState) -> None:
    """Delete an ended turn's checkpoint; a failure is logged, not raised (the turn is over:
    ``prune()``, ``clear()`` or ``discard_pending()`` remove what is left)."""
    try:
        checkpoints.forget(state)
    except Exception:
        log.warning("could not delete the checkpoint of turn %s", state.turn_id, exc_info=True)


def settle(
    inbox: Inbox | None,
    result: ExecutionResult | None,
    error: BaseException | None,
    requeue: Callable[[Ticket], None] | None,
) -> None:
    """Answer the callers that joined this turn; input it never took runs as the next turn."""
    if inbox is None:
        return
    left = inbox.close()
    for ticket in inbox.tickets:
        if ticket.future is None or ticket.future.done():
            continue
        if error is not None:
            ticket.future.set_exception(error)
        elif ticket in left and requeue is not None:
            requeue(ticket)
        elif result is not None:
            ticket.future.set_result(result)
