"""One turn: model -> tools -> approvals -> checkpoints. No threads live here.

``Turn.run()`` drives a ``TurnState`` to an end: a final answer, a pause on an
approval, a limit, an abort, or an error it raises. Everything outside the
loop — the provider, running tools (perhaps on threads), saving checkpoints,
emitting events, queued input — comes in through ``TurnConfig`` (``_turn_config``)
and the ``Inbox``, so the loop can be driven and tested step by step. The checks
on the tool calls a model sends are ``_tool_calls``'.

The state is the checkpoint: ``_checkpoint_codec.turn_checkpoint(state)`` is saved after the
input is taken, after each model response that asks for tools and after each tool
result (a final answer is recorded by the commit that ends the turn; a step's last
result once the next model call's request has left, see ``_checkpoints``), and
``_checkpoint_codec.turn_state_from_checkpoint()`` resumes it without asking the model again
for a recorded response or running a recorded tool again.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any

from .._message_codec import with_usage_and_calls
from ..abort import AbortController, AbortedError
from ..errors import LoushoError, PropagatingToolError, ProviderError, ToolArgumentsError
from ..events import (
    ApprovalRequested,
    Event,
    InputApplied,
    ReasoningDeltaEvent,
    RunStart,
    StepStart,
    TextDelta,
    ToolCallEvent,
    ToolResultEvent,
)
from ..inputs import check_message
from ..messages import NO_USAGE, Message, ToolCall
from ..pricing import price_usage
from ..providers.base import (
    ModelReasoningDelta,
    ModelRequest,
    ModelResponse,
    ModelTextDelta,
    ModelToolCallDelta,
)
from ..results import ExecutionResult, FinishReason
from ..stores._state_requests import turn_state
from ..tools import ToolContext, tool_error_text
from ._approvals import approval_id_for, new_record
from ._edits import decide, edited, show_edits
from ._effects import RERUN_NOTE, ledger, reads_only, rerun_approval_id
from ._inbox import Inbox, take_queued
from ._limits import limit_reached, tool_calls_left
from ._tool_calls import MAX_MALFORMED_TOOL_CALLS, check_malformed, malformed_text, unique_call_ids
from ._turn_config import ToolOutcome, TurnConfig
from ._turn_state import CHECKPOINT_VERSION, TurnState

__all__ = [
    "CHECKPOINT_VERSION",
    "MAX_MALFORMED_TOOL_CALLS",
    "Inbox",
    "Turn",
    "TurnConfig",
    "TurnState",
]

log = logging.getLogger("lousho_sessions.turn")


class _Finish(Exception):
    def __init__(self, reason: FinishReason, limit: str | None = None) -> None:
        self.reason = reason
        self.limit = limit


class Turn:
    """Runs a ``TurnState`` with a ``TurnConfig``. Not thread-safe; one thread drives it."""

    def __init__(self, state: TurnState, config: TurnConfig) -> None:
        self.state = state
        self.config = config
        self._emitted = False
        self.output: Any = None  # the final answer parsed (config.output)

    # -- public -------------------------------------------------------------

    def run(self) -> ExecutionResult:
        """Drive the turn to an end; raises the turn's error (provider, propagating tool, store)."""
        state, config = self.state, self.config
        if config.inbox is not None:
            config.inbox.run_id = state.run_id
            config.inbox.emit = config.emit
        if config.emit is not None:  # events are built only when someone listens
            config.emit(RunStart(state.run_id))
        checkpoints = config.checkpoints  # the input is taken: saved once it is sent
        if (
            checkpoints is not None
            and not checkpoints.input_saved  # with the lease
            and state.steps == 0
            and not state.results
            and state.status == "running"
        ):
            checkpoints.save(state, defer=True)
        try:
            while True:
                self._check_abort()
                last = state.new[-1] if state.new else None
                if last is not None and last.role == "assistant" and last.tool_calls:
                    self._tool_step(last)
                    continue
                if last is not None and last.role == "assistant":
                    if self._apply_queued(final=True) or self._repairing():
                        continue
                    raise _Finish("stop")
                self._apply_queued(final=False)
                self._model_step()
        except _Finish as finish:
            return self._result(finish.reason, finish.limit)
        except AbortedError:
            return self._result("aborted")
        except BaseException:
            self._flush(quietly=True)  # the turn is kept to be tried again: with its results
            raise

    # -- steps --------------------------------------------------------------

    def _model_step(self) -> None:
        state, config = self.state, self.config
        limit = limit_reached(self.state, self.config)
        if limit is not None:
            raise _Finish("limit", limit)
        if state.steps >= config.max_steps:
            raise _Finish("max-steps")
        state.steps += 1
        if config.emit is not None:
            config.emit(StepStart(state.run_id, state.steps))
        while True:
            response = self._call_model()
            if response is not None:
                break
            # steered: the call was dropped before it said anything; remake it with the new input
            self._apply_queued(final=False)
        message = response.message
        if message.role != "assistant":
            raise ProviderError(
                None, f"provider {config.provider.name!r} returned a {message.role!r} message"
            )
        try:  # what cannot be saved or sent again ends the turn here, before it is checkpointed
            check_message(message, f"the response of provider {config.provider.name!r}")
        except (TypeError, ValueError) as exc:
            raise ProviderError(None, str(exc)) from exc
        # ``is`` first: the shared zero and an unchanged value skip attrs' field-by-field ``==``
        reported = response.usage
        if reported is NO_USAGE or reported == NO_USAGE:
            reported = message.usage or NO_USAGE
        usage = price_usage(reported, config.model_name, config.pricing)
        calls = unique_call_ids(message.tool_calls, state)
        # before it is kept: a resumed turn then asks the model again, as after any failed call
        check_malformed(state, calls, config.provider.name)
        kept = message.usage
        if (kept is not usage and kept != usage) or message.tool_calls != calls:
            message = with_usage_and_calls(message, usage, calls)
        state.new.append(message)
        state.usage = state.usage + usage
        if calls:  # a final answer: the commit saves it; calls that only read: their results
            self._checkpoint(defer=reads_only(calls, config.tools))
        if config.emit is not None:
            for call in calls:
                config.emit(ToolCallEvent(state.run_id, call))
        if response.finish_reason == "length" and not calls:
            raise _Finish("length")

    def _call_model(self) -> ModelResponse | None:
        state, config = self.state, self.config
        controller = AbortController()
        remove = config.signal.add_callback(lambda s: controller.abort(s.reason))
        self._emitted = False
        inbox = config.inbox
        emit = config.emit

        def steer() -> None:
            if not self._emitted:
                controller.abort("steered")

        if inbox is not None:
            inbox.set_steer_hook(steer)
            if inbox.has_steer():
                steer()
        checkpoints = config.checkpoints
        on_sent = (
            None if checkpoints is None else checkpoints.owed_write(config.provider, controller)
        )
        request = ModelRequest(  # by position, as far as it goes: keywords cost a dict
            config.system,
            (*state.history, *state.new),  # messages
            tuple(t.spec for t in config.tools.values()),
            config.settings,
            controller.signal,
            config.output.schema if config.output is not None else None,  # output_schema
            session_id=state.session_id,
            on_sent=on_sent,
        )
        chat = config.trace.chat(request.messages) if config.trace is not None else None
        response: ModelResponse | None = None
        try:
            for event in config.provider.stream(request, controller.signal):
                if controller.signal.aborted:
                    break
                if isinstance(event, ModelTextDelta):
                    if event.text:
                        self._emitted = True
                        if emit is not None:  # built only when someone listens
                            emit(TextDelta(state.run_id, event.text))
                elif isinstance(event, ModelReasoningDelta):
                    if event.text:
                        self._emitted = True
                        if emit is not None:
                            emit(ReasoningDeltaEvent(state.run_id, event.text))
                elif isinstance(event, ModelToolCallDelta):
                    self._emitted = True
                elif isinstance(event, ModelResponse):
                    response = event
        except Exception as exc:
            if on_sent is not None and on_sent.failed is not None:  # why the call stopped
                if chat is not None:
                    chat.end(None, on_sent.failed)
                raise on_sent.failed from None
            error = self._call_error(controller, exc)
            if chat is not None:
                chat.end(None, error)
            if error is None:
                return None  # steered
            if error is exc:
                raise
            raise error from exc
        except BaseException as exc:  # KeyboardInterrupt, SystemExit: the span ends too
            if chat is not None:
                chat.end(None, exc)
            raise
        finally:
            remove()
            if inbox is not None:
                inbox.set_steer_hook(None)
        if on_sent is not None:
            try:  # raises why it failed; writes it if the request never left
                on_sent.settle()
            except BaseException as exc:
                if chat is not None:
                    chat.end(None, exc)
                raise
        if response is None or config.signal.aborted or controller.signal.aborted:
            error = self._call_error(controller, None)
            if chat is not None:
                chat.end(None, error)
            if error is None:
                return None  # steered
            raise error
        if chat is not None:
            chat.end(response)
        return response

    def _call_error(
        self, controller: AbortController, exc: Exception | None
    ) -> BaseException | None:
        """What a model call that raised ``exc`` (None: gave no response) raises; None: steered."""
        if self.config.signal.aborted:
            return AbortedError(self.config.signal.reason)
        if controller.signal.aborted:
            return None
        if exc is None:
            name = self.config.provider.name
            return ProviderError(None, f"provider {name!r} ended its stream without a response")
        if isinstance(exc, LoushoError):
            return exc
        return ProviderError(None, f"model call failed: {type(exc).__name__}: {exc}")

    def _tool_step(self, assistant: Message) -> None:
        state, config = self.state, self.config
        calls = [c for c in assistant.tool_calls if c.id not in state.results]
        runnable: list[ToolCall] = []
        pause: ToolCall | None = None
        steered = config.inbox is not None and config.inbox.has_steer()
        for call in calls:
            if steered:
                self.record(
                    call, "Not run: the user sent a new message first.", True, checkpoint=False
                )
                continue
            tool = config.tools.get(call.name)
            if tool is None:
                known = ", ".join(sorted(config.tools)) or "none"
                self.record(
                    call,
                    f"Error: unknown tool {call.name!r} (tools: {known})",
                    True,
                    checkpoint=False,
                )
                continue
            if call.raw_arguments is not None:  # not JSON: back to the model, which may retry
                self.record(call, malformed_text(call), True, checkpoint=False)
                continue
            try:  # arguments that do not fit go back to the model before anyone approves
                tool.check_arguments(call.arguments)
            except ToolArgumentsError as exc:
                self.record(call, tool_error_text(exc), True, checkpoint=False, exception=exc)
                continue
            decision = decide(state, config, call, tool)
            if decision is None:
                runnable.append(call)
            elif isinstance(decision, str):  # "pending"
                pause = pause or call
            elif decision["approved"]:
                runnable.append(edited(call, decision))  # with an approver's arguments
            else:
                reason = decision.get("reason")
                text = "The user denied this tool call" + (f": {reason}" if reason else ".")
                self.record(call, text, True, checkpoint=False)
        left = tool_calls_left(self.state, self.config)
        if left is not None and len(runnable) > left:
            # run the calls that fit; the others still get an answer, so none is left open
            runnable, over = runnable[:left], runnable[left:]
            for call in over:
                self.record(
                    call, "Not run: limit reached (max_tool_calls).", True, checkpoint=False
                )
        assistant = show_edits(state, config, assistant, runnable)  # the calls as they run
        runnable, parked = ledger(self, runnable)
        if runnable:
            self._run(runnable)
        if pause is not None:
            self._pause(pause)
        if parked is not None:
            self._pause(parked, rerun_approval_id(state.run_id, parked, state.started), RERUN_NOTE)
        # every call answered: the results join the turn, in call order. No checkpoint
        # here: the results are recorded already, and the next model response saves.
        for call in assistant.tool_calls:
            state.new.append(state.results.pop(call.id))
        state.results.clear()
        state.started.clear()

    def _pause(
        self, call: ToolCall, approval_id: str | None = None, note: str | None = None
    ) -> None:
        state, config = self.state, self.config
        self._flush()  # the results before the approval is asked for
        approval_id = approval_id or approval_id_for(state.run_id, call.id)
        if config.approvals.get(approval_id) is None:
            record = new_record(
                approval_id,
                session_id=state.session_id,
                turn_id=state.turn_id,
                run_id=state.run_id,
                call=call,
                turn=config.turn,
                note=note,
            )
            checkpoints = config.checkpoints
            config.approvals.create(record, fence=checkpoints.fence if checkpoints else None)
        state.status = "awaiting-approval"
        state.approval_id = approval_id
        self._checkpoint()
        self._emit(ApprovalRequested(state.run_id, approval_id, call))
        raise _Finish("awaiting-approval")

    def _run(self, calls: list[ToolCall]) -> None:
        config = self.config

        def job(call: ToolCall) -> Callable[[], ToolOutcome]:
            tool = config.tools[call.name]
            # a tool that takes no context cannot see the session's state: it is not read
            context = self.context(call, with_state=tool.takes_context)

            def run() -> str:
                return tool.invoke(call.arguments, context, loop=config.tool_loop)

            traced = run if config.trace is None else config.trace.tool(call, run)
            return lambda: (traced(), False)

        outcomes = config.run_tools([job(c) for c in calls])
        with contextlib.closing(outcomes):  # type: ignore[type-var]
            self._collect(calls, outcomes)

    def context(self, call: ToolCall, *, with_state: bool = True) -> ToolContext[Any]:
        """The ``ToolContext`` of ``call`` (the same for its reconcile hook); ``with_state``
        false: its ``state`` is an empty dict, the session's state not read (nor committed)."""
        state, config = self.state, self.config
        return ToolContext(
            session_id=state.session_id,
            run_id=state.run_id,
            call_id=call.id,
            signal=config.signal,
            idempotency_key=f"{state.run_id}:{call.id}",
            context=config.context,
            state=turn_state(state.extra, config.load_state) if with_state else {},
        )

    def _collect(
        self, calls: list[ToolCall], outcomes: Iterator[tuple[int, ToolOutcome | BaseException]]
    ) -> None:
        state = self.state
        propagate: BaseException | None = None
        left = len(calls)
        for index, outcome in outcomes:
            left -= 1
            call = calls[index]
            state.tool_calls += 1
            if isinstance(outcome, PropagatingToolError):
                propagate = propagate or outcome
                continue
            exception: Exception | None = None
            if isinstance(outcome, BaseException):
                if not isinstance(outcome, Exception):
                    raise outcome
                output, is_error, exception = tool_error_text(outcome), True, outcome
            else:
                output, is_error = outcome
            # the step's last result is owed: written once the next request has left
            self.record(call, output, is_error, checkpoint=True, exception=exception,
                        defer=not left)  # fmt: skip
            self._check_abort()
        if propagate is not None:
            raise propagate

    def record(
        self,
        call: ToolCall,
        output: str,
        is_error: bool,
        *,
        checkpoint: bool,
        exception: BaseException | None = None,
        defer: bool = False,
    ) -> None:
        self.state.results[call.id] = Message.tool(call.id, output, is_error)
        if self.config.emit is not None:  # built only when someone listens
            self.config.emit(
                ToolResultEvent(self.state.run_id, call.id, output, is_error, exception=exception)
            )
        if checkpoint and self.config.checkpoints is not None:
            self.config.checkpoints.save_result(self.state, call.id, defer=defer)

    def _apply_queued(self, *, final: bool) -> bool:
        """Move queued input into the turn; at the final answer, close the inbox if none waits."""
        applied = take_queued(self.state, self.config.inbox, final=final)
        for input_id in applied:
            self._emit(InputApplied(self.state.run_id, input_id))
        if applied:
            self._checkpoint()
        return bool(applied)

    def _repairing(self) -> bool:
        """Parse the final answer into ``output``; True if it did not fit and the model is
        asked again (``OutputValidationError`` once the repair rounds are used up)."""
        if self.config.output is None:
            return False
        self.output, repairing = self.config.output.settle(self.state.new)
        return repairing

    # -- helpers ------------------------------------------------------------

    def _check_abort(self) -> None:
        if self.config.signal.aborted:
            raise AbortedError(self.config.signal.reason)

    def _checkpoint(self, *, defer: bool = False) -> None:
        if self.config.checkpoints is not None:
            self.config.checkpoints.save(self.state, defer=defer)

    def _flush(self, *, quietly: bool = False) -> None:
        if self.config.checkpoints is not None:
            self.config.checkpoints.flush(quietly=quietly)

    def _emit(self, event: Event) -> None:
        if self.config.emit is not None:
            self.config.emit(event)

    def _result(self, reason: FinishReason, limit: str | None = None) -> ExecutionResult:
        state = self.state
        self._flush()  # a turn kept pending holds every result it recorded
        text = ""
        for message in reversed(state.new):
            if message.role == "assistant":
                text = message.text
                break
        aborted = reason == "aborted"
        return ExecutionResult(  # by position, in the fields' order: keywords cost a dict
            "" if aborted else text,
            () if aborted else tuple(state.new),  # messages
            state.usage,
            reason,  # finish_reason
            state.approval_id if reason == "awaiting-approval" else None,
            limit,
            state.run_id,
            state.session_id,
            state.steps,
            self.output if reason == "stop" else None,  # output
        )
